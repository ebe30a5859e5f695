"""Operator commands that work on the colony's database directly: ``meclaw dead-letters``
(list, follow, show), ``meclaw trace`` (the hop tree of a trace) and ``meclaw cells`` (list,
revive). The reads take a :class:`~colony.persist.source.Source` (``colony.db`` or the cluster
database) and work beside running daemons; the one write here (reviving a cell of a stopped
colony) is on ``colony.db`` and takes the root lease first, so it never races a daemon."""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from colony.errors import ColonyError
from colony.failures import error_code, error_text, one_line
from colony.lease import RootLease
from colony.persist.records import (
    DeadLetterRow,
    MessageLogEntry,
    RegistryRow,
    read_dead_letters_after,
    read_log,
    read_registry,
    read_trace_dead_letters,
    revive_in_registry,
)
from colony.persist.source import Source


def _when(seconds: int) -> str:
    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def dead_letter_line(row: DeadLetterRow) -> str:
    """``time  code  sender → target  trace`` — one line an operator can grep."""
    replayed = f"  replayed as {row.replayed_as}" if row.replayed_as is not None else ""
    return (
        f"{_when(row.created_at)}  #{row.id}  {row.error_code:<28} "
        f"{row.sender_path} → {row.resolved_target}  trace {row.trace_id}{replayed}"
    )


def dead_letter_json(row: DeadLetterRow) -> str:
    return json.dumps(row.fields(), ensure_ascii=False)


def dead_letter_report(row: DeadLetterRow, *, as_json: bool = False) -> str:
    """One dead letter in full for ``meclaw dead-letters show``: what, why, when, whether it
    was replayed, and the stored message (headers and body) as indented JSON."""
    message = row.message.to_json()
    if as_json:
        return json.dumps({**row.fields(), "message": message}, ensure_ascii=False)
    replayed = (
        f"{_when(row.replayed_at)} as message {row.replayed_as}"
        if row.replayed_at is not None
        else "never (meclaw dead-letters replay ID)"
    )
    lines = [
        f"dead letter #{row.id}  {row.error_code}",
        f"  died      {_when(row.created_at)} (the message's created_at)",
        f"  route     {row.sender_path} → {row.original_target} (resolved {row.resolved_target})",
        f"  why       {row.detail or '(no detail recorded)'}",
        f"  trace     {row.trace_id}  (meclaw trace {row.trace_id})",
        f"  message   {row.message_id or '(its id is unreadable)'}",
        f"  replayed  {replayed}",
        "  stored message:",
    ]
    body = json.dumps(message, ensure_ascii=False, indent=2)
    lines += [f"    {line}" for line in body.splitlines()]
    return "\n".join(lines)


def list_dead_letters(
    db: Source,
    *,
    error_code: str | None,
    since: int | None,
    as_json: bool,
    follow: bool,
    write: Callable[[str], None],
    poll_s: float = 0.2,
    stop: Callable[[], bool] = lambda: False,
) -> int:
    """Print matching dead letters; with ``follow`` keep printing new ones until ``stop()``."""
    last = 0
    render = dead_letter_json if as_json else dead_letter_line
    while True:
        if db.exists():  # only the letters not printed yet, and never a body
            for row in read_dead_letters_after(db, last, error_code=error_code, since=since):
                write(render(row))
                last = row.id
        if not follow or stop():
            return last
        time.sleep(poll_s)


def trace_lines(db: Source, trace_id: str) -> list[str]:
    """The hop tree of a trace: each message under its parent, with the TTL left at each hop.
    A hop that carries a cell's error (``finish_reason: "error"``) is followed by the error
    text; each dead letter of the trace is marked ``✗`` where it died: under the hop that
    died (a hive no out-edge took), or under the message it came from (an emission no edge
    took, a target that does not exist)."""
    rows = read_log(db, trace_id, limit=100_000)
    ids = {r.id for r in rows}
    children: dict[str | None, list[MessageLogEntry]] = {}
    for row in rows:
        parent = row.parent_message_id if row.parent_message_id in ids else None
        children.setdefault(parent, []).append(row)
    died_at: dict[str, list[DeadLetterRow]] = {}
    letters_under: dict[str | None, list[DeadLetterRow]] = {}
    for letter in read_trace_dead_letters(db, trace_id):
        message = letter.message
        if message.id in ids:
            died_at.setdefault(message.id, []).append(letter)
        else:
            parent = message.parent_message_id if message.parent_message_id in ids else None
            letters_under.setdefault(parent, []).append(letter)
    out: list[str] = []

    def walk(parent: str | None, depth: int) -> None:
        pad = "  " * depth
        for row in children.get(parent, []):
            hop = row.headers.get("hop", {}) if isinstance(row.headers, dict) else {}
            extra = ", ".join(f"{k}={_short(v)}" for k, v in list(hop.items())[:4])
            out.append(
                f"{pad}{row.from_path} → {row.to_path}  ttl {row.ttl}"
                + (f"  [{extra}]" if extra else "")
            )
            out.extend(_error_lines(hop, row.body, pad + "  "))
            for letter in died_at.get(row.id, []):
                out.append(f"{pad}  ✗ died here: {_died(letter)}")
            walk(row.id, depth + 1)
        for letter in letters_under.get(parent, []):
            message = letter.message
            out.append(f"{pad}✗ {letter.sender_path} → {letter.original_target}  {_died(letter)}")
            out.extend(_error_lines(message.headers.hop, message.body, pad + "  "))

    walk(None, 0)
    return out


def _died(letter: DeadLetterRow) -> str:
    why = f": {letter.detail}" if letter.detail else ""
    return f"dead letter #{letter.id} {letter.error_code}{why}"


def _error_lines(hop: Any, body: Any, pad: str) -> list[str]:
    code = error_code(hop)
    if code is None:
        return []
    text = one_line(error_text(body)) or "(the emission carries no error text)"
    return [f"{pad}✗ error {code}: {text}"]


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value
    return text if len(text) <= 24 else text[:21] + "…"


# -- cells ------------------------------------------------------------------------------------


class UnknownCellError(ColonyError, LookupError):
    """The registry has no cell at this path."""

    code = "unknown_cell"


@dataclass(frozen=True, slots=True)
class Revival:
    path: str
    revived: bool
    """False when the cell was not failed (nothing to do)."""
    status: str
    """The status before reviving."""


def cell_line(row: RegistryRow) -> str:
    """``path  type  status  id`` — one line per registry row."""
    return f"{row.path:<32} {row.cell_type:<12} {row.status:<8}  {row.cell_id}"


def cell_json(row: RegistryRow) -> str:
    return json.dumps(
        {
            "path": row.path,
            "cell_type": row.cell_type,
            "status": row.status,
            "cell_id": row.cell_id,
            "updated_at": row.updated_at,
        },
        ensure_ascii=False,
    )


def revive_offline(root: Path, path: str) -> Revival:
    """Revive a failed cell of a stopped colony (raises :class:`colony.lease.LeaseHeldError`
    when a daemon runs on ``root``: revive through its API instead)."""
    db = Source.sqlite(root / "colony.db")
    if not db.exists():
        raise UnknownCellError(f"{root} has no colony.db: no daemon has run there yet")
    with RootLease(root):
        before = revive_in_registry(db, path)
    if before is None:
        known = ", ".join(read_registry(db)) or "none"
        raise UnknownCellError(f"no cell {path} in the registry of {root} (cells: {known})")
    return Revival(path, before == "failed", before)
