"""Reading and editing what the colony's database holds: the message log, dead letters, the
registry.

Every query of it outside the writer thread is here (the writer's inserts are
:mod:`colony.persist.rows`; the HTTP and message-plane reads with their filters are
:mod:`colony.reads`). Each takes the :class:`~colony.persist.source.Source` to read (``colony.db``
or the cluster database: the SQL is written once) and opens its own connection, so it is
usable without a running colony (operator commands on a stopped daemon) and, called in a
thread, beside a running one.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from colony.envelope import Envelope
from colony.persist.source import Source


@dataclass(frozen=True, slots=True)
class MessageLogEntry:
    id: str
    trace_id: str
    parent_message_id: str | None
    correlation_id: str | None
    ttl: int
    from_path: str
    to_path: str
    reply_to: str | None
    headers: dict[str, Any]
    body_kind: str
    body: Any
    created_at: int
    at_ms: int | None = None
    """When routing took the decision (epoch ms); None in rows an older daemon wrote."""
    edges: tuple[str, ...] = ()
    """At a hive transit, the out-edges that fired (``<hive>#<index>``)."""


def log_entry(r: Sequence[Any]) -> MessageLogEntry:
    """A ``message_log`` row as both readers select it (headers and body are JSON text)."""
    return MessageLogEntry(
        r[0],
        r[1],
        r[2],
        r[3],
        r[4],
        r[5],
        r[6],
        r[7],
        json.loads(r[8]),
        r[9],
        json.loads(r[10]),
        r[11],
        r[12],
        tuple(r[13].split(",")) if r[13] else (),
    )


@dataclass(frozen=True)
class DeadLetterRow:
    """A ``dead_letters`` row. The stored message is read and decoded on first use of
    :attr:`message`, from the database the row came from: a list of letters never reads a
    body (a body may be megabytes, and a listing needs none of it)."""

    id: int
    error_code: str
    sender_path: str
    original_target: str
    resolved_target: str
    trace_id: str
    created_at: int
    message_id: str | None
    """The dead message's id (None for a stored envelope that is not valid JSON)."""
    detail: str | None
    replayed_at: int | None = None
    """Unix seconds of the last replay, None if never replayed."""
    replayed_as: str | None = None
    """The message id the last replay sent."""
    source: Source | None = field(default=None, repr=False, compare=False)
    """The database the row was read from (where :attr:`message` is read)."""

    def fields(self) -> dict[str, Any]:
        """The row without its message, as every listing shows it (API, CLI ``--json``)."""
        return {
            "id": self.id,
            "sender_path": self.sender_path,
            "original_target": self.original_target,
            "resolved_target": self.resolved_target,
            "error_code": self.error_code,
            "trace_id": self.trace_id,
            "created_at": self.created_at,
            "message_id": self.message_id,
            "detail": self.detail,
            "replayed_at": self.replayed_at,
            "replayed_as": self.replayed_as,
        }

    @functools.cached_property
    def message(self) -> Envelope:
        """The dead message as stored (raises LookupError once the row is deleted)."""
        if self.source is None:
            raise LookupError(f"dead letter #{self.id} was not read from a database")
        text = read_dead_letter_message(self.source, self.id)
        if text is None:
            raise LookupError(f"dead letter #{self.id} is no longer in {self.source}")
        return Envelope.from_json(json.loads(text))


def read_dead_letters(
    source: Source,
    error_code: str | None = None,
    since: int | None = None,
    limit: int | None = None,
) -> list[DeadLetterRow]:
    """Dead letters in insertion order; usable without a running colony (read-only)."""
    clauses: list[str] = []
    args: list[Any] = []
    if error_code is not None:
        clauses.append("error_code = ?")
        args.append(error_code)
    if since is not None:
        clauses.append("created_at >= ?")
        args.append(since)
    sql = "SELECT {columns} FROM dead_letters"
    if clauses:
        sql += " WHERE " + " AND ".join(clauses)
    sql += " ORDER BY id"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    return _select_dead_letters(source, sql, args)


def delete_dead_letters(
    source: Source,
    *,
    error_code: str | None = None,
    since: int | None = None,
    ids: list[int] | None = None,
) -> list[DeadLetterRow]:
    """Remove the matching dead letters (all when no filter) and return them (their
    :attr:`DeadLetterRow.message` is gone with them)."""
    rows = read_dead_letters(source, error_code, since)
    if ids is not None:
        wanted = set(ids)
        rows = [r for r in rows if r.id in wanted]
    if rows:
        with source.connect(write=True) as session, session.transaction():
            session.executemany("DELETE FROM dead_letters WHERE id = ?", [(r.id,) for r in rows])
    return rows


def read_log(
    source: Source, trace_id: str | None = None, limit: int | None = None
) -> list[MessageLogEntry]:
    """Message-log rows in the order they were written (the first ``limit``), those of one
    trace when ``trace_id`` is given (read-only; usable without a running colony). The HTTP
    and message-plane reads with their filters are :mod:`colony.reads`."""
    # ``seq`` selected too: ordered by a column it returns, SQLite merges the message log's two
    # tables in order instead of sorting them (see colony.persist.schema).
    sql = f"SELECT seq, {source.log_select()} FROM message_log"
    args: tuple[Any, ...] = ()
    if trace_id is not None:
        sql += " WHERE trace_id = ?"
        args = (trace_id,)
    sql += " ORDER BY seq" if limit is None else f" ORDER BY seq LIMIT {int(limit)}"
    return [log_entry(r[1:]) for r in source.select(sql, args)]


@dataclass(frozen=True, slots=True)
class RegistryRow:
    """A cell as the registry last recorded it (``status``: active, inactive or failed)."""

    path: str
    cell_id: str
    cell_type: str
    status: str
    updated_at: int


def read_registry(source: Source) -> dict[str, RegistryRow]:
    """Every registry row by cell path, in code-point order of the paths (read-only; empty
    when ``colony.db`` does not exist)."""
    if not source.exists():
        return {}
    order = source.dialect.text("path")
    rows = source.select(
        f"SELECT path, cell_id, cell_type, status, updated_at FROM registry ORDER BY {order}"
    )
    return {r[0]: RegistryRow(*r) for r in rows}


def revive_in_registry(source: Source, cell_path: str) -> str | None:
    """Mark a failed cell ``active`` in a stopped colony's registry (the next boot computes its
    activity from the edges again); returns the status it had, or None for an unknown path.
    The caller holds the root lease, so no daemon writes meanwhile."""
    with source.connect(write=True) as session, session.transaction():
        row = session.execute("SELECT status FROM registry WHERE path = ?", (cell_path,)).fetchone()
        if row is not None and row[0] == "failed":
            session.execute(
                "UPDATE registry SET status = 'active', updated_at = ? "
                "WHERE path = ? AND status = 'failed'",
                (int(time.time()), cell_path),
            )
    return None if row is None else str(row[0])


# -- dead letters one by one: show, replay, the letters of a trace -----------------------------


def _select_dead_letters(source: Source, sql: str, args: Sequence[Any]) -> list[DeadLetterRow]:
    """Run ``sql`` (its ``{columns}`` filled in) and build rows without reading any body. A
    file an older daemon wrote, not yet upgraded, lacks the newer columns: they read as NULL."""
    dialect = source.dialect
    with source.connect() as session:
        have = {r[0] for r in session.execute(dialect.columns, ("dead_letters",)).fetchall()}
        newer = [c if c in have else f"NULL AS {c}" for c in _NEWER_COLUMNS]
        # Rows an older daemon wrote have no message_id: take it from the envelope (COALESCE
        # evaluates the parse only for those rows).
        of_envelope = dialect.message_id_of_envelope
        newer[0] = f"COALESCE(message_id, {of_envelope})" if "message_id" in have else of_envelope
        columns = ", ".join([*_DEAD_LETTER_COLUMNS, *newer])
        rows = session.execute(sql.format(columns=columns), args).fetchall()
    return [
        DeadLetterRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], source)
        for r in rows
    ]


_DEAD_LETTER_COLUMNS = (
    "id",
    "error_code",
    "sender_path",
    "original_target",
    "resolved_target",
    "trace_id",
    "created_at",
)
_NEWER_COLUMNS = ("message_id", "detail", "replayed_at", "replayed_as")


def read_dead_letter(source: Source, letter_id: int) -> DeadLetterRow | None:
    """One dead letter by id, its message read and decoded (call it off the event loop)."""
    rows = _select_dead_letters(
        source, "SELECT {columns} FROM dead_letters WHERE id = ?", (letter_id,)
    )
    if not rows:
        return None
    try:
        _ = rows[0].message  # decoded here, on the caller's thread
    except LookupError:  # deleted between the two reads
        return None
    return rows[0]


def with_messages(rows: list[DeadLetterRow]) -> list[DeadLetterRow]:
    """``rows`` with their :attr:`DeadLetterRow.message` read now, in one query per 500 rows
    (for callers that keep rows after the file is gone: tests, reports)."""
    by_source: dict[Source, list[DeadLetterRow]] = {}
    for row in rows:
        if row.source is not None and "message" not in vars(row):
            by_source.setdefault(row.source, []).append(row)
    for source, pending in by_source.items():
        with source.connect() as session:
            for start in range(0, len(pending), 500):
                chunk = {row.id: row for row in pending[start : start + 500]}
                marks = ",".join("?" * len(chunk))
                for letter_id, text in session.execute(
                    f"SELECT id, message_json FROM dead_letters WHERE id IN ({marks})",
                    tuple(chunk),
                ).fetchall():
                    # Fills the cached_property's slot, as a first access would.
                    vars(chunk[letter_id])["message"] = Envelope.from_json(json.loads(text))
    return rows


def read_dead_letter_message(source: Source, letter_id: int) -> str | None:
    """The stored envelope's JSON text of one dead letter (None when there is no such row)."""
    rows = source.select("SELECT message_json FROM dead_letters WHERE id = ?", (letter_id,))
    return None if not rows else str(rows[0][0])


def read_dead_letters_after(
    source: Source, after_id: int, *, error_code: str | None = None, since: int | None = None
) -> list[DeadLetterRow]:
    """Dead letters with an id above ``after_id``, oldest first (what ``--follow`` polls)."""
    sql = "SELECT {columns} FROM dead_letters WHERE id > ?"
    args: list[Any] = [after_id]
    if error_code is not None:
        sql += " AND error_code = ?"
        args.append(error_code)
    if since is not None:
        sql += " AND created_at >= ?"
        args.append(since)
    return _select_dead_letters(source, sql + " ORDER BY id", args)


def read_trace_dead_letters(source: Source, trace_id: str) -> list[DeadLetterRow]:
    """The dead letters of one trace, oldest first."""
    sql = "SELECT {columns} FROM dead_letters WHERE trace_id = ? ORDER BY id"
    return _select_dead_letters(source, sql, (trace_id,))


@dataclass(frozen=True, slots=True)
class ReplayClaim:
    """What :func:`claim_replay` found: the letter (None: no such id) and whether this replay
    may go ahead (False: it was replayed before and ``force`` was not given)."""

    letter: DeadLetterRow | None
    granted: bool


def claim_replay(source: Source, letter_id: int, message_id: str, *, force: bool) -> ReplayClaim:
    """Mark a dead letter replayed as ``message_id`` now, unless it was replayed before and
    ``force`` is False; the letter is returned as it was before, message decoded. The check
    and the mark are one guarded UPDATE in a transaction, so two concurrent replays cannot
    both be granted (SQLite: the write lock; PostgreSQL: the row lock, after which the guard
    is evaluated again on the row the other replay committed)."""
    before = read_dead_letter(source, letter_id)
    if before is None:
        return ReplayClaim(None, False)
    sql = "UPDATE dead_letters SET replayed_at = ?, replayed_as = ? WHERE id = ?"
    if not force:
        sql += " AND replayed_at IS NULL"
    with source.connect(write=True) as session, session.transaction():
        changed = session.execute(sql, (int(time.time()), message_id, letter_id)).rowcount
    if not changed and not force:  # replayed meanwhile, or before
        return ReplayClaim(read_dead_letter(source, letter_id) or before, False)
    return ReplayClaim(before, bool(changed))


def release_replay(source: Source, letter: DeadLetterRow) -> None:
    """Undo :func:`claim_replay` when the replayed message could not be sent."""
    with source.connect(write=True) as session, session.transaction():
        session.execute(
            "UPDATE dead_letters SET replayed_at = ?, replayed_as = ? WHERE id = ?",
            (letter.replayed_at, letter.replayed_as, letter.id),
        )
