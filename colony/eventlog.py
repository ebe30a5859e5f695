"""Events read back from the record, for a watcher that resumes with ``Last-Event-ID``.

A watcher that fell behind (or lost its connection) names the last event it got; the record
holds the ``route`` events (the message log's ``at_ms``) and the ``handle_end`` and ``llm``
ones (the ``handling`` table) from that millisecond on, which are sent before the live stream
goes on. Events of that same millisecond may come twice: a watcher keys on ``message_id``.
``handle_start`` and ``dead_letter`` events are live only (a dead letter stays in
``/colony/dead_letters``).
"""

from __future__ import annotations

from typing import Any

from colony.effects import Handled
from colony.events import Event, Interest, handled_events
from colony.persist.schema import HANDLING_SELECT
from colony.persist.source import Source
from colony.runs import has_handling

LONGEST_MS = 3_600_000
"""A handling longer than an hour that ended after the resumption point is not sent again."""
REPLAY_MAX = 10_000
"""The most events a resumption reads back; a watcher further behind starts from the newest
of them (and is told how many were left out)."""


def _under(prefix: str, column: str) -> tuple[str, list[str]]:
    """SQL for ``column`` in the subtree ``prefix`` (as :class:`Interest` matches a cell), so
    the filter is applied before the limit, not after it. ``/`` and ``0`` are neighbours in
    code-point order: ``[p/, p0)`` is every path under ``p``."""
    if prefix in ("", "/"):
        return "1 = 1", []
    base = prefix.rstrip("/")
    return f"({column} = ? OR ({column} >= ? AND {column} < ?))", [base, base + "/", base + "0"]


def since_ms(last_event_id: str | None) -> int | None:
    """The millisecond an event id names (``<at_ms>-<n>``), or None for no or a foreign id."""
    if not last_event_id:
        return None
    head = last_event_id.split("-", 1)[0]
    return int(head) if head.isascii() and head.isdigit() and len(head) <= 16 else None


def recorded(source: Source, since: int, interest: Interest) -> tuple[list[Event], int]:
    """What the record holds from ``since`` on that ``interest`` wants, oldest first, and how
    many more there were than :data:`REPLAY_MAX`."""
    found: list[tuple[int, int, Event]] = []
    wants = interest.kinds
    if wants is None or "route" in wants:
        where = "at_ms >= ?"
        args: list[Any] = [since]
        if interest.trace_id is not None:
            where, args = where + " AND trace_id = ?", [*args, interest.trace_id]
        if interest.cell is not None:
            text = source.dialect.text  # code-point order on either engine
            to, to_args = _under(interest.cell, text("to_path"))
            sender, from_args = _under(interest.cell, text("from_path"))
            where, args = f"{where} AND ({to} OR {sender})", [*args, *to_args, *from_args]
        sql = (
            "SELECT seq, at_ms, trace_id, id, parent_message_id, from_path, to_path, ttl, edges "
            f"FROM message_log WHERE {where} ORDER BY seq DESC LIMIT ?"
        )
        for seq, at, trace, mid, parent, src, dst, ttl, edges in source.select(
            sql, [*args, REPLAY_MAX + 1]
        ):
            data: dict[str, Any] = {
                "kind": "route",
                "at_ms": at,
                "trace_id": trace,
                "message_id": mid,
                "parent_message_id": parent,
                "from": src,
                "to": dst,
                "ttl": ttl,
                "edges": edges.split(",") if edges else [],
            }
            found.append((at, seq, Event(at, 0, "route", data)))
    if (wants is None or wants & {"handle_end", "llm"}) and has_handling(source):
        # (started_ms is indexed; a handling that ended after ``since`` began at most
        # LONGEST_MS before it)
        where = "started_ms >= ? AND started_ms + duration_ms >= ?"
        args = [since - LONGEST_MS, since]
        if interest.trace_id is not None:
            where, args = where + " AND trace_id = ?", [*args, interest.trace_id]
        if interest.cell is not None:
            cell, cell_args = _under(interest.cell, source.dialect.text("cell"))
            where, args = f"{where} AND {cell}", [*args, *cell_args]
        sql = (
            f"SELECT {HANDLING_SELECT} FROM handling WHERE {where} ORDER BY started_ms DESC LIMIT ?"
        )
        for order, row in enumerate(source.select(sql, [*args, REPLAY_MAX + 1])):
            h = Handled(*row)
            at = h.started_ms + h.duration_ms
            for kind, data in handled_events(h):
                data.update(kind=kind, at_ms=at)
                found.append((at, -order, Event(at, 0, kind, data)))
    found.sort(key=lambda item: (item[0], item[1]))
    events = [e for _, _, e in found if interest.match(e)]
    left_out = max(0, len(events) - REPLAY_MAX)
    return events[left_out:], left_out
