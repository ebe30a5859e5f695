"""The ``/colony/*`` reads, answered the same way to an HTTP client and to a cell.

Each read takes the typed filters of :mod:`colony.queries` and returns the reply body, e.g.
``{"registry": [...]}`` or ``{"messages": [...], "next": ..., "scan_budget": ...,
"scan_truncated": ...}``: ``GET /colony/<x>`` serves it as is, and a message routed to
``/colony/<x>`` gets it as the body of its reply (:func:`answer`).

Registry and graph are read from memory. The message log and the dead letters are read from
the colony's database (``colony.db`` or the cluster database: its
:class:`~colony.persist.source.Source`): first a fence through the writer (a read sees every
write made before it was asked for), then the SQL on a worker thread with its own connection,
so a large read never stalls the event loop. The SQL of each read is a function of the source
and the filters (``select_trace``, ``select_messages``, ``select_dead_letters``), written once
for both engines.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from colony.envelope import Envelope, Headers
from colony.errors import ColonyError
from colony.ids import uuid7
from colony.persist.db import PersistenceError
from colony.persist.source import ReadDialect, Source
from colony.queries import (
    LIMIT_MAX,
    DeadLettersFilters,
    Filters,
    GraphFilters,
    MessagesFilters,
    QueryError,
    RegistryFilters,
    RunsFilters,
    StatsFilters,
    TraceFilters,
    parse_message,
    slot,
)
from colony.runs import select_handling, select_runs

if TYPE_CHECKING:
    from colony.colony import Colony

REPLY_TTL = 64
"""TTL of a ``/colony`` reply: a fresh budget, as meclaw's message builder gives one."""
REPLY_SENDER = "/colony"


class ReadFailed(ColonyError):
    """The colony's database could not be read (``colony.db`` missing, locked past the busy
    timeout or corrupt; the cluster database unreachable)."""

    code = "colony_db_unreadable"


# -- the reads ----------------------------------------------------------------------------------


def registry(colony: Colony, f: RegistryFilters) -> dict[str, Any]:
    rows = []
    for runner in colony.runners.values():
        if f.path is not None and runner.path != f.path:
            continue
        if f.path_prefix is not None and not runner.path.startswith(f.path_prefix):
            continue
        if f.cell_type is not None and runner.type.name != f.cell_type:
            continue
        failed = runner.state.value == "failed"
        active = runner.active and not failed
        if f.active is not None and active != f.active:
            continue
        rows.append(
            {
                "path": runner.path,
                "cell_id": runner.cell_id,
                "cell_type": runner.type.name,
                "lifecycle_status": runner.state.value,
                "active": active,
                "failed": failed,
                # Ours, not meclaw's: what the console's overview shows.
                "mailbox_depth": runner.mailbox.qsize(),
                "handled": runner.handled,
                "failures": runner.failed,
                "busy": runner.busy,
            }
        )
        if len(rows) == f.rows:
            break
    return {"registry": rows}


def inside(scope: str, path: str) -> bool:
    """Whether ``path`` lies in the subtree ``scope`` (``/a`` holds ``/a/b`` but not ``/ab``)."""
    return scope == "/" or path == scope or path.startswith(scope + "/")


def graph(colony: Colony, f: GraphFilters) -> dict[str, Any]:
    scope = f.root
    nodes: list[dict[str, Any]] = [
        {"path": r.path, "cell_type": r.type.name}
        for r in colony.runners.values()
        if inside(scope, r.path)
    ]
    nodes += [{"path": h, "cell_type": "hive"} for h in sorted(colony.hives) if inside(scope, h)]
    edges = []
    for edge in colony.edges.all():
        if not (inside(scope, edge.from_path) and inside(scope, edge.to_path)):
            continue
        item: dict[str, Any] = {
            "id": edge.id,
            "ref": edge.ref,
            "from": edge.from_path,
            "to": edge.to_path,
        }
        if edge.condition_source is not None:
            item["condition"] = edge.condition_source
        if edge.restore_ttl:
            item["restore_ttl"] = True
        edges.append(item)
    return {"graph": {"scope": scope, "graph_version": 0, "nodes": nodes, "edges": edges}}


async def trace(colony: Colony, f: TraceFilters) -> dict[str, Any]:
    """The trace's hops; of one trace (``trace_id`` given) also its ``handling`` rows and its
    dead letters (ours, beside meclaw's ``trace``)."""
    if f.trace_id is None:
        return {"trace": await _read(colony, select_trace, f)}
    whole: dict[str, Any] = await _read(colony, _whole_trace, f)
    return whole


def _whole_trace(source: Source, f: TraceFilters) -> dict[str, Any]:
    assert f.trace_id is not None
    letters = DeadLettersFilters(limit=LIMIT_MAX)
    return {
        "trace": select_trace(source, f),
        "handling": select_handling(source, f.trace_id),
        "dead_letters": select_dead_letters(source, letters, trace_id=f.trace_id),
    }


async def runs(colony: Colony, f: RunsFilters) -> dict[str, Any]:
    return {"runs": await _read(colony, functools.partial(select_runs, hives=colony.hives), f)}


def stats(colony: Colony) -> dict[str, Any]:
    rates = colony.events.rates
    return {
        "stats": {
            "decisions": rates.decisions,
            "dead_letters": rates.dead_letters,
            "uptime_s": round(time.time() - rates.started, 3),
            "watchers": len(colony.events.watchers),
            "series": rates.series(),
        }
    }


async def messages(colony: Colony, f: MessagesFilters) -> dict[str, Any]:
    rows, scanned = await _read(colony, select_messages, f)
    limit = f.rows
    following = None
    if len(rows) == limit:
        following = {"created_at": rows[-1]["created_at"], "id": rows[-1]["id"]}
    return {
        "messages": rows,
        "next": following,
        "scan_budget": f.budget,
        "scan_truncated": scanned >= f.budget,
    }


async def dead_letters(colony: Colony, f: DeadLettersFilters) -> dict[str, Any]:
    return {"dead_letters": await _read(colony, select_dead_letters, f)}


async def read(colony: Colony, filters: Filters) -> dict[str, Any]:
    """The reply body of the read ``filters`` belong to."""
    if isinstance(filters, RegistryFilters):
        return registry(colony, filters)
    if isinstance(filters, GraphFilters):
        return graph(colony, filters)
    if isinstance(filters, TraceFilters):
        return await trace(colony, filters)
    if isinstance(filters, MessagesFilters):
        return await messages(colony, filters)
    if isinstance(filters, DeadLettersFilters):
        return await dead_letters(colony, filters)
    if isinstance(filters, RunsFilters):
        return await runs(colony, filters)
    if isinstance(filters, StatsFilters):
        return stats(colony)
    raise TypeError(f"no read takes {type(filters).__name__}")


# -- the message plane ----------------------------------------------------------------------------


async def answer(colony: Colony, endpoint: str, message: Envelope) -> Envelope:
    """The reply to a read routed to ``endpoint`` (one of ``colony.paths.ANSWERING``): the read's
    body, or under the endpoint's slot ``{"status": "error", "error_code": "invalid_query" |
    "read_failed", "details": …}``. A new trace, no parent, TTL 64, no headers, addressed to the
    message's ``reply_to`` (which the caller has checked is set), as meclaw builds it."""
    assert message.reply_to is not None
    key = slot(endpoint)
    try:
        body = await read(colony, parse_message(endpoint, message.body))
    except QueryError as exc:
        colony.log.warning(
            "colony_read_refused",
            endpoint=endpoint,
            key=exc.key,
            detail=exc.detail,
            sender=message.reply_to,
            trace_id=message.trace_id,
        )
        body = {key: {"status": "error", "error_code": "invalid_query", "details": exc.detail}}
    except ReadFailed as exc:
        colony.log.error("colony_read_failed", endpoint=endpoint, error=str(exc))
        body = {key: {"status": "error", "error_code": "read_failed", "details": str(exc)}}
    reply_id = uuid7()
    return Envelope(
        id=reply_id,
        trace_id=reply_id,
        parent_message_id=None,
        correlation_id=None,
        target=message.reply_to,
        reply_to=None,
        ttl=REPLY_TTL,
        headers=Headers({}, {}),
        body=body,
        created_at=int(time.time()),
        partition=message.partition,  # the asker's conversation: its node gets the answer
        epoch=message.epoch,
    )


# -- SQL, on a worker thread ----------------------------------------------------------------------


async def _read(colony: Colony, fn: Callable[[Source, Any], Any], filters: Filters) -> Any:
    try:
        await colony.db.flush()
    except PersistenceError as exc:
        # What is committed can still be read; the writer's failure is logged where it happens.
        colony.log.warning("colony_read_unfenced", error=str(exc))
    source = colony.db.source
    try:
        return await asyncio.to_thread(fn, source, filters)
    except source.errors as exc:
        what = "colony.db" if source.path is not None else str(source)
        raise ReadFailed(f"{what} could not be read: {exc}") from exc


def _successor(prefix: str) -> str | None:
    """The smallest string greater than every string starting with ``prefix`` (SQLite compares
    UTF-8 bytes, i.e. code points), or None when there is none."""
    chars = list(prefix)
    while chars:
        point = ord(chars.pop()) + 1
        if 0xD800 <= point <= 0xDFFF:
            point = 0xE000
        if point <= 0x10FFFF:
            return "".join(chars) + chr(point)
    return None


class _Where:
    """The WHERE clause of a read, built filter by filter: a filter that is None adds
    nothing, so each read lists its filters once, in one line each."""

    def __init__(self, dialect: ReadDialect) -> None:
        self.dialect = dialect
        self.clauses: list[str] = []
        self.args: list[Any] = []

    def add(self, clause: str, *args: Any) -> None:
        self.clauses.append(clause)
        self.args.extend(args)

    def compare(self, column: str, op: str, value: Any) -> None:
        if value is not None:
            self.add(f"{column} {op} ?", value)

    def prefix(self, column: str, prefix: str | None) -> None:
        """``column`` starts with ``prefix``, as a range the column's index serves (compared
        by code point, which :func:`_successor` counts in)."""
        if prefix is None:
            return
        column = self.dialect.text(column)
        self.add(f"{column} >= ?", prefix)
        upper = _successor(prefix)
        if upper is not None:
            self.add(f"{column} < ?", upper)

    def __str__(self) -> str:
        return " WHERE " + " AND ".join(self.clauses) if self.clauses else ""


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _log_row(r: Sequence[Any]) -> dict[str, Any]:
    return {
        "id": r[0],
        "trace_id": r[1],
        "parent_message_id": r[2],
        "correlation_id": r[3],
        "ttl": r[4],
        "from_path": r[5],
        "to_path": r[6],
        "reply_to": r[7],
        "headers_json": r[8],
        "body_kind": r[9],
        "body_payload": r[10],
        "created_at": r[11],
        "at_ms": r[12],
        "edges": r[13].split(",") if r[13] else [],
        # Decoded too, for readers that want objects rather than meclaw's strings.
        "headers": _loads(r[8]),
        "body": _loads(r[10]),
    }


def select_trace(source: Source, f: TraceFilters) -> list[dict[str, Any]]:
    """The message-log rows of ``/colony/trace``, oldest first."""
    where = _Where(source.dialect)
    where.compare("trace_id", "=", f.trace_id)
    where.compare("correlation_id", "=", f.correlation_id)
    where.prefix("to_path", f.path_prefix)
    if f.error:
        where.add(f"({source.dialect.hop_error_code}) IS NOT NULL")
    where.compare("created_at", ">=", f.since)
    # ``seq`` selected too: ordered by a column it returns, SQLite merges the message log's two
    # tables in order instead of sorting them (see colony.persist.schema).
    sql = f"SELECT seq, {source.log_select()} FROM message_log{where} ORDER BY seq ASC LIMIT ?"
    return [_log_row(r[1:]) for r in source.select(sql, [*where.args, f.rows])]


def select_dead_letters(
    source: Source, f: DeadLettersFilters, *, trace_id: str | None = None
) -> list[dict[str, Any]]:
    """The dead letters of ``/colony/dead_letters`` (of one trace: ``trace_id``), oldest
    first. A listing never reads a stored body: the message id has its own column (only rows
    an older daemon wrote lack it; see colony.persist.schema)."""
    where = _Where(source.dialect)
    where.compare("trace_id", "=", trace_id)
    where.compare("error_code", "=", f.error_code)
    where.compare("created_at", ">=", f.since)
    sql = (
        "SELECT id, sender_path, original_target, resolved_target, error_code, trace_id, "
        f"created_at, COALESCE(message_id, {source.dialect.message_id_of_envelope}), detail, "
        f"replayed_at, replayed_as, at_ms FROM dead_letters{where} ORDER BY id ASC LIMIT ?"
    )
    return [
        {
            "id": r[0],
            "sender_path": r[1],
            "original_target": r[2],
            "resolved_target": r[3],
            "error_code": r[4],
            "trace_id": r[5],
            "created_at": r[6],
            "message_id": r[7],
            "detail": r[8],
            "replayed_at": r[9],
            "replayed_as": r[10],
            "at_ms": r[11],
        }
        for r in source.select(sql, [*where.args, f.rows])
    ]


def select_messages(source: Source, f: MessagesFilters) -> tuple[list[dict[str, Any]], int]:
    """The rows of ``/colony/messages`` and how many were scanned. Newest first, in two stages
    as meclaw reads them: the indexed filters pick at most ``scan_budget`` rows; correlation,
    sender prefix and body kind filter that window (so ``scan_truncated`` says when they may
    have missed older matches)."""
    dialect = source.dialect
    order = f" ORDER BY created_at DESC, {dialect.text('id')} DESC"
    if f.id is not None:
        sql = f"SELECT {source.log_select()} FROM message_log WHERE id = ?{order} LIMIT ?"
        rows = source.select(sql, [f.id, f.rows])
        return [_log_row(r) for r in rows], len(rows)
    inner = _Where(dialect)
    inner.compare("trace_id", "=", f.trace_id)
    inner.compare("parent_message_id", "=", f.parent_message_id)
    inner.prefix("to_path", f.to_path_prefix)
    inner.compare("created_at", ">=", f.since)
    inner.compare("created_at", "<=", f.until)
    if f.before_created_at is not None and f.before_id is not None:
        inner.add(
            f"(created_at < ? OR (created_at = ? AND {dialect.text('id')} < ?))",
            f.before_created_at,
            f.before_created_at,
            f.before_id,
        )
    else:
        inner.compare("created_at", "<", f.before_created_at)
        inner.compare(dialect.text("id"), "<", f.before_id)
    outer = _Where(dialect)
    outer.compare("correlation_id", "=", f.correlation_id)
    outer.prefix("from_path", f.from_path_prefix)
    outer.compare("body_kind", "=", f.body_kind)
    window = f"SELECT {source.log_select()} FROM message_log{inner}{order} LIMIT ?"
    # The subqueries are named: PostgreSQL (before 16) requires it, SQLite accepts it.
    sql = f"SELECT * FROM ({window}) AS scanned{outer}{order} LIMIT ?"
    args = [*inner.args, f.budget, *outer.args, f.rows]
    with source.connect() as session:
        rows = session.execute(sql, args).fetchall()
        counted = session.execute(
            f"SELECT COUNT(*) FROM ({window}) AS scanned", [*inner.args, f.budget]
        )
        (scanned,) = counted.fetchone()
    return [_log_row(r) for r in rows], int(scanned)
