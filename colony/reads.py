"""The ``/colony/*`` reads, answered the same way to an HTTP client and to a cell.

Each read takes the typed filters of :mod:`colony.queries` and returns the reply body, e.g.
``{"registry": [...]}`` or ``{"messages": [...], "next": ..., "scan_budget": ...,
"scan_truncated": ...}``: ``GET /colony/<x>`` serves it as is, and a message routed to
``/colony/<x>`` gets it as the body of its reply (:func:`answer`).

Registry and graph are read from memory. The message log and the dead letters are read from
``colony.db``: first a fence through the writer (a read sees every write made before it was
asked for), then the SQL on a worker thread with its own read-only connection, so a large read
never stalls the event loop.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from colony.envelope import Envelope, Headers
from colony.errors import ColonyError
from colony.ids import uuid7
from colony.persist.db import PersistenceError
from colony.persist.schema import MESSAGE_ID_OF_ENVELOPE, MESSAGE_LOG_SELECT, connect
from colony.queries import (
    DeadLettersFilters,
    Filters,
    GraphFilters,
    MessagesFilters,
    QueryError,
    RegistryFilters,
    TraceFilters,
    parse_message,
    slot,
)

if TYPE_CHECKING:
    from colony.colony import Colony

REPLY_TTL = 64
"""TTL of a ``/colony`` reply: a fresh budget, as meclaw's message builder gives one."""
REPLY_SENDER = "/colony"

_COLUMNS = MESSAGE_LOG_SELECT


class ReadFailed(ColonyError):
    """``colony.db`` could not be read (missing, locked past the busy timeout, corrupt)."""

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
        item: dict[str, Any] = {"id": edge.id, "from": edge.from_path, "to": edge.to_path}
        if edge.condition_source is not None:
            item["condition"] = edge.condition_source
        if edge.restore_ttl:
            item["restore_ttl"] = True
        edges.append(item)
    return {"graph": {"scope": scope, "graph_version": 0, "nodes": nodes, "edges": edges}}


async def trace(colony: Colony, f: TraceFilters) -> dict[str, Any]:
    where = _Where()
    where.compare("trace_id", "=", f.trace_id)
    where.compare("correlation_id", "=", f.correlation_id)
    where.prefix("to_path", f.path_prefix)
    if f.error:
        where.add(
            "(CASE WHEN json_valid(headers) THEN json_extract(headers, '$.hop.error_code') END) "
            "IS NOT NULL"
        )
    where.compare("created_at", ">=", f.since)
    # ``seq`` selected too: ordered by a column it returns, SQLite merges the message log's two
    # tables in order instead of sorting them (see colony.persist.schema).
    sql = f"SELECT seq, {_COLUMNS} FROM message_log{where} ORDER BY seq ASC LIMIT ?"
    rows = await _read(colony, _select_log, sql, [*where.args, f.rows])
    return {"trace": rows}


async def messages(colony: Colony, f: MessagesFilters) -> dict[str, Any]:
    rows, scanned = await _read(colony, _select_messages, f)
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
    where = _Where()
    where.compare("error_code", "=", f.error_code)
    where.compare("created_at", ">=", f.since)
    # A listing never reads a stored body: the message id has its own column (only rows an
    # older daemon wrote lack it; see colony.persist.schema).
    sql = (
        "SELECT id, sender_path, original_target, resolved_target, error_code, trace_id, "
        f"created_at, COALESCE(message_id, {MESSAGE_ID_OF_ENVELOPE}), detail, replayed_at, "
        f"replayed_as FROM dead_letters{where} ORDER BY id ASC LIMIT ?"
    )
    rows = await _read(colony, _select_letters, sql, [*where.args, f.rows])
    return {"dead_letters": rows}


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


async def _read(colony: Colony, fn: Any, *args: Any) -> Any:
    try:
        await colony.db.flush()
    except PersistenceError as exc:
        # What is committed can still be read; the writer's failure is logged where it happens.
        colony.log.warning("colony_read_unfenced", error=str(exc))
    try:
        return await asyncio.to_thread(fn, colony.db.path, *args)
    except sqlite3.Error as exc:
        raise ReadFailed(f"colony.db could not be read: {exc}") from exc


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

    def __init__(self) -> None:
        self.clauses: list[str] = []
        self.args: list[Any] = []

    def add(self, clause: str, *args: Any) -> None:
        self.clauses.append(clause)
        self.args.extend(args)

    def compare(self, column: str, op: str, value: Any) -> None:
        if value is not None:
            self.add(f"{column} {op} ?", value)

    def prefix(self, column: str, prefix: str | None) -> None:
        """``column`` starts with ``prefix``, as a range the column's index serves."""
        if prefix is None:
            return
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
        # Decoded too, for readers that want objects rather than meclaw's strings.
        "headers": _loads(r[8]),
        "body": _loads(r[10]),
    }


def _fetch(path: Path, sql: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
    conn = connect(str(path), readonly=True)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def _select_log(path: Path, sql: str, args: Sequence[Any]) -> list[dict[str, Any]]:
    """Rows of ``sql``, which selects ``seq`` before the message-log columns."""
    return [_log_row(r[1:]) for r in _fetch(path, sql, args)]


def _select_letters(path: Path, sql: str, args: Sequence[Any]) -> list[dict[str, Any]]:
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
        }
        for r in _fetch(path, sql, args)
    ]


def _select_messages(path: Path, f: MessagesFilters) -> tuple[list[dict[str, Any]], int]:
    """Newest first, in two stages as meclaw reads them: the indexed filters pick at most
    ``scan_budget`` rows; correlation, sender prefix and body kind filter that window (so
    ``scan_truncated`` says when they may have missed older matches)."""
    order = " ORDER BY created_at DESC, id DESC"
    if f.id is not None:
        sql = f"SELECT {_COLUMNS} FROM message_log WHERE id = ?{order} LIMIT ?"
        rows = _fetch(path, sql, [f.id, f.rows])
        return [_log_row(r) for r in rows], len(rows)
    inner = _Where()
    inner.compare("trace_id", "=", f.trace_id)
    inner.compare("parent_message_id", "=", f.parent_message_id)
    inner.prefix("to_path", f.to_path_prefix)
    inner.compare("created_at", ">=", f.since)
    inner.compare("created_at", "<=", f.until)
    if f.before_created_at is not None and f.before_id is not None:
        inner.add(
            "(created_at < ? OR (created_at = ? AND id < ?))",
            f.before_created_at,
            f.before_created_at,
            f.before_id,
        )
    else:
        inner.compare("created_at", "<", f.before_created_at)
        inner.compare("id", "<", f.before_id)
    outer = _Where()
    outer.compare("correlation_id", "=", f.correlation_id)
    outer.prefix("from_path", f.from_path_prefix)
    outer.compare("body_kind", "=", f.body_kind)
    window = f"SELECT {_COLUMNS} FROM message_log{inner}{order} LIMIT ?"
    sql = f"SELECT * FROM ({window}){outer}{order} LIMIT ?"
    args = [*inner.args, f.budget, *outer.args, f.rows]
    conn = connect(str(path), readonly=True)
    try:
        rows = conn.execute(sql, args).fetchall()
        counted = conn.execute(f"SELECT COUNT(*) FROM ({window})", [*inner.args, f.budget])
        (scanned,) = counted.fetchone()
    finally:
        conn.close()
    return [_log_row(r) for r in rows], int(scanned)
