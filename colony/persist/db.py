"""The one writer of ``colony.db``.

Routing must never wait on a commit: message-log rows and dead letters are handed to a writer
thread through a queue (a put costs well under a microsecond) and committed in batches of up
to 1,024 rows per transaction. Serialising headers and bodies to JSON also happens on that
thread. Readers first ``flush()`` (a fence through the same queue), then read on their own
connection, so they see every write made before they asked.
"""

from __future__ import annotations

import asyncio
import functools
import json
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from colony.crashpoints import crash_point
from colony.dead_letters import DeadLetter
from colony.envelope import Envelope
from colony.gc_pause import gc_paused
from colony.persist.schema import (
    MESSAGE_ID_OF_ENVELOPE,
    connect,
    dead_letter_columns,
    migrate,
)

_BATCH = 1024


@dataclass(frozen=True, slots=True)
class LogRow:
    """One routing decision into a cell or hive (meclaw's ``message_log`` row)."""

    message: Envelope
    from_path: str
    to_path: str
    ttl: int


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


def _log_entry(r: Sequence[Any]) -> MessageLogEntry:
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
    source: Path | None = field(default=None, repr=False, compare=False)
    """The ``colony.db`` the row was read from (where :attr:`message` is read)."""

    @functools.cached_property
    def message(self) -> Envelope:
        """The dead message as stored (raises LookupError once the row is deleted)."""
        if self.source is None:
            raise LookupError(f"dead letter #{self.id} was not read from a database")
        text = read_dead_letter_message(self.source, self.id)
        if text is None:
            raise LookupError(f"dead letter #{self.id} is no longer in {self.source}")
        return Envelope.from_json(json.loads(text))


def _dumps(value: Any) -> str:
    # A cell written in Python may emit a value JSON cannot hold; the log must still take it.
    return json.dumps(value, ensure_ascii=False, default=repr)


def _completion() -> tuple[asyncio.Future[None], Callable[[BaseException | None], None]]:
    """A future of the running loop, and the callback the writer thread calls to settle it."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()

    def done(error: BaseException | None) -> None:
        def resolve() -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(PersistenceError(f"colony.db write failed: {error}"))
            else:
                future.set_result(None)

        loop.call_soon_threadsafe(resolve)

    return future, done


def _ignore(error: BaseException | None) -> None:
    """The completion callback of a commit nobody waits for."""


class _Rows:
    """Rows of one writer transaction, serialised on the writer thread."""

    __slots__ = ("_body", "_body_json", "acks", "forgets", "inserts", "letters", "logs")

    def __init__(self) -> None:
        self.logs: list[tuple[Any, ...]] = []
        self.letters: list[tuple[Any, ...]] = []
        self.inserts: list[tuple[Any, ...]] = []
        self.acks: list[tuple[str, str]] = []
        self.forgets: list[tuple[int]] = []
        self._body: Any = None
        self._body_json = ""

    def _body_of(self, m: Envelope) -> str:
        # Follow-ups of one emission and transit copies share a body object.
        if m.body is not self._body or not self._body_json:
            self._body = m.body
            self._body_json = _dumps(m.body)
        return self._body_json

    def log(self, item: LogRow) -> None:
        m = item.message
        self.logs.append(
            (
                m.id,
                m.trace_id,
                m.parent_message_id,
                m.correlation_id,
                item.ttl,
                item.from_path,
                item.to_path,
                m.reply_to,
                _dumps({"context": m.headers.context, "hop": m.headers.hop}),
                "inline",
                self._body_of(m),
                m.created_at,
            )
        )

    def letter(self, item: DeadLetter) -> None:
        self.letters.append(
            (
                item.sender_path,
                item.original_target,
                item.resolved_target,
                item.error_code,
                item.trace_id,
                item.created_at,
                _dumps(item.message.to_json()),
                item.detail,
                item.message.id,
            )
        )

    def journal(self, cell: str, sender: str, m: Envelope) -> None:
        # The envelope as dead letters store it, minus the body: that is kept apart, so a body
        # shared by follow-ups is serialised once (``ColonyDb.journal`` joins them again).
        envelope = m.to_json()
        del envelope["body_kind"], envelope["body_payload"]
        self.inserts.append((m.id, cell, sender, _dumps(envelope), self._body_of(m)))


class _Fence:
    __slots__ = ("done",)

    def __init__(self, done: Callable[[BaseException | None], None]) -> None:
        self.done = done


class _Stop:
    pass


@dataclass(slots=True)
class Unit:
    """Everything one hand-off writes, committed in one transaction (at-least-once delivery).

    A unit is what the colony does with one message: the handling cell's emissions routed,
    their message-log rows and dead letters, every delivery they cause (journal inserts), and
    the removal of the handled message from the journal (``ack``). Committed together, a crash
    leaves either the handled message in the journal and none of its effects, or its effects
    and not the message. ``key`` makes an ingress idempotent: a unit whose key was seen before
    commits nothing and reports itself a duplicate.
    """

    ack: tuple[str, str] | None = None
    """``(message id, cell path)`` of the handled message, or None for an ingress."""
    key: str | None = None
    logs: list[LogRow] = field(default_factory=list)
    letters: list[DeadLetter] = field(default_factory=list)
    deliveries: list[tuple[Any, Envelope, str]] = field(default_factory=list)
    """``(runner, message, sender)``: put into the runner's mailbox once committed."""
    closed: bool = False
    duplicate: bool = False

    def log(self, message: Envelope, from_path: str, to_path: str) -> None:
        self.logs.append(LogRow(message, from_path, to_path, message.ttl))

    def dead_letter(self, letter: DeadLetter) -> None:
        self.letters.append(letter)


class _Commit:
    __slots__ = ("done", "unit")

    def __init__(self, unit: Unit, done: Callable[[BaseException | None], None]) -> None:
        self.unit = unit
        self.done = done


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """A message that was in a mailbox when the daemon last stopped."""

    seq: int
    cell: str
    sender: str
    message: Envelope


class PersistenceError(Exception):
    """``colony.db`` could not be written."""


class ColonyDb:
    """``<root>/colony.db``: one writer thread, read connections on demand."""

    def __init__(self, path: Path) -> None:
        self.path = path
        conn = connect(str(path))
        migrate(conn)
        self._conn = conn
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._writer, name="colony-db-writer", daemon=True)
        self._thread.start()
        self.rows_written = 0
        self.journalled = 0
        """Journal inserts committed so far (deliveries made durable)."""

    def registry_ids(self) -> dict[str, str]:
        """``{path: cell_id}`` from earlier boots, so a cell keeps its id across restarts."""
        conn = connect(str(self.path), readonly=True)
        try:
            return dict(conn.execute("SELECT path, cell_id FROM registry").fetchall())
        finally:
            conn.close()

    # -- writes (never block the caller) ------------------------------------------------------

    def log(self, message: Envelope, from_path: str, to_path: str) -> None:
        self._queue.put(LogRow(message, from_path, to_path, message.ttl))

    def dead_letter(self, letter: DeadLetter) -> None:
        self._queue.put(letter)

    def set_registry(self, path: str, cell_id: str, cell_type: str, status: str) -> None:
        self._queue.put(("registry", path, cell_id, cell_type, status, int(time.time())))

    # -- the writer thread --------------------------------------------------------------------

    def _writer(self) -> None:
        conn = self._conn
        while True:
            batch = [self._queue.get()]
            while len(batch) < _BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = False
            fences: list[_Fence | _Commit] = []
            rows = _Rows()
            registry: list[tuple[Any, ...]] = []
            commits: list[_Commit] = []
            for item in batch:
                if isinstance(item, LogRow):
                    rows.log(item)
                elif isinstance(item, DeadLetter):
                    rows.letter(item)
                elif isinstance(item, _Commit):
                    commits.append(item)
                    fences.append(item)
                elif isinstance(item, tuple) and item[0] == "forget":
                    rows.forgets.append((item[1],))
                elif isinstance(item, tuple):
                    registry.append(item[1:])
                elif isinstance(item, _Fence):
                    fences.append(item)
                elif isinstance(item, _Stop):
                    stop = True
            error: BaseException | None = None
            logs, letters = rows.logs, rows.letters
            if logs or letters or registry or commits or rows.forgets:
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    for commit in commits:
                        unit = commit.unit
                        if unit.key is not None:
                            trace = unit.deliveries[0][1].trace_id if unit.deliveries else ""
                            taken = conn.execute(
                                "INSERT OR IGNORE INTO ingress_keys(key, trace_id, created_at) "
                                "VALUES (?,?,?)",
                                (unit.key, trace, int(time.time())),
                            ).rowcount
                            if not taken:
                                unit.duplicate = True
                                continue
                        for row in unit.logs:
                            rows.log(row)
                        for letter in unit.letters:
                            rows.letter(letter)
                        for runner, message, sender in unit.deliveries:
                            rows.journal(runner.path, sender, message)
                        if unit.ack is not None:
                            rows.acks.append(unit.ack)
                    if rows.inserts:
                        conn.executemany(
                            "INSERT INTO journal(id, cell, sender, envelope, body) "
                            "VALUES (?,?,?,?,?)",
                            rows.inserts,
                        )
                    if rows.acks:
                        conn.executemany("DELETE FROM journal WHERE id = ? AND cell = ?", rows.acks)
                    if rows.forgets:
                        conn.executemany("DELETE FROM journal WHERE seq = ?", rows.forgets)
                    if logs:
                        conn.executemany(
                            "INSERT INTO message_log(id, trace_id, parent_message_id, "
                            "correlation_id, ttl, from_path, to_path, reply_to, headers, "
                            "body_kind, body_payload, created_at) "
                            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                            logs,
                        )
                    if letters:
                        conn.executemany(
                            "INSERT INTO dead_letters(sender_path, original_target, "
                            "resolved_target, error_code, trace_id, created_at, message_json, "
                            "detail, message_id) VALUES (?,?,?,?,?,?,?,?,?)",
                            letters,
                        )
                    for path, cell_id, cell_type, status, now in registry:
                        conn.execute(
                            "INSERT INTO registry(path, cell_id, cell_type, status, created_at, "
                            "updated_at) VALUES (?,?,?,?,?,?) ON CONFLICT(path) DO UPDATE SET "
                            "cell_id=excluded.cell_id, cell_type=excluded.cell_type, "
                            "status=excluded.status, updated_at=excluded.updated_at",
                            (path, cell_id, cell_type, status, now, now),
                        )
                    if commits:
                        crash_point("journal.commit")
                    conn.execute("COMMIT")
                    self.rows_written += len(logs) + len(letters)
                    self.journalled += len(rows.inserts)
                except (sqlite3.Error, TypeError, ValueError) as exc:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    self._failure = exc
                    error = exc
            for fence in fences:
                fence.done(error or self._failure)
            if stop:
                conn.close()
                return

    # -- barriers and reads -------------------------------------------------------------------

    async def flush(self) -> None:
        """Return once everything handed over before this call is committed."""
        future, done = _completion()
        self._queue.put(_Fence(done))
        await future

    async def commit(self, unit: Unit) -> None:
        """Hand a unit to the writer and return once it is committed (group commit: every
        unit queued meanwhile shares the transaction). Sets ``unit.duplicate`` when its key
        was seen before."""
        future, done = _completion()
        self._queue.put(_Commit(unit, done))
        await future

    def commit_later(self, unit: Unit) -> None:
        """Hand a unit to the writer without waiting (a failure is kept in :attr:`failure`)."""
        self._queue.put(_Commit(unit, _ignore))

    def journal(self) -> list[JournalEntry]:
        """What the journal holds, oldest first (read at boot, before any unit is written).

        SQLite joins each row's envelope and body into one JSON array, so a row costs one
        parse, and rows are decoded as they are read rather than all held as text first: a
        journal of 100,000 messages is read in about a second."""
        decode = json.JSONDecoder().raw_decode  # loads() minus its checks, for our own text
        conn = connect(str(self.path), readonly=True)
        try:
            out: list[JournalEntry] = []
            rows = conn.execute(
                "SELECT seq, cell, sender, '[' || envelope || ',' || body || ']' FROM journal "
                "ORDER BY seq"
            )
            with gc_paused():  # every message read here lives until it is handled
                for seq, cell, sender, pair in rows:
                    (doc, body), _ = decode(pair)
                    doc["body_payload"] = body
                    out.append(JournalEntry(seq, cell, sender, Envelope.from_json(doc)))
            return out
        finally:
            conn.close()

    def forget(self, entries: Sequence[JournalEntry]) -> None:
        """Remove journal rows that can no longer be delivered (their cell is gone); they are
        dead-lettered by the caller in the same queue, so nothing is lost."""
        for entry in entries:
            self._queue.put(("forget", entry.seq))

    def close(self) -> None:
        """Commit what is queued and stop the writer (blocking; call once, at shutdown)."""
        if self._thread.is_alive():
            self._queue.put(_Stop())
            self._thread.join()

    @property
    def failure(self) -> BaseException | None:
        return self._failure

    def _read(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        conn = connect(str(self.path), readonly=True)
        try:
            return conn.execute(sql, args).fetchall()
        finally:
            conn.close()

    async def message_log(self, trace_id: str | None = None) -> list[MessageLogEntry]:
        await self.flush()
        sql = (
            "SELECT id, trace_id, parent_message_id, correlation_id, ttl, from_path, to_path, "
            "reply_to, headers, body_kind, body_payload, created_at FROM message_log"
        )
        args: tuple[Any, ...] = ()
        if trace_id is not None:
            sql += " WHERE trace_id = ?"
            args = (trace_id,)
        rows = await asyncio.to_thread(self._read, sql + " ORDER BY seq", args)
        return [_log_entry(r) for r in rows]

    async def dead_letters(
        self, *, error_code: str | None = None, since: int | None = None, limit: int | None = None
    ) -> list[DeadLetterRow]:
        await self.flush()

        def read() -> list[DeadLetterRow]:  # rows that outlive the file carry their message
            return with_messages(read_dead_letters(self.path, error_code, since, limit))

        return await asyncio.to_thread(read)


def read_dead_letters(
    path: Path, error_code: str | None = None, since: int | None = None, limit: int | None = None
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
    return _select_dead_letters(path, sql, args)


def delete_dead_letters(
    path: Path,
    *,
    error_code: str | None = None,
    since: int | None = None,
    ids: list[int] | None = None,
) -> list[DeadLetterRow]:
    """Remove the matching dead letters (all when no filter) and return them (their
    :attr:`DeadLetterRow.message` is gone with them)."""
    rows = read_dead_letters(path, error_code, since)
    if ids is not None:
        wanted = set(ids)
        rows = [r for r in rows if r.id in wanted]
    if rows:
        conn = connect(str(path))
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany("DELETE FROM dead_letters WHERE id = ?", [(r.id,) for r in rows])
            conn.execute("COMMIT")
        finally:
            conn.close()
    return rows


def read_messages(
    path: Path,
    *,
    trace_id: str | None = None,
    message_id: str | None = None,
    to_path_prefix: str | None = None,
    from_path_prefix: str | None = None,
    since: int | None = None,
    limit: int = 100,
    oldest_first: bool = False,
) -> list[MessageLogEntry]:
    """Message-log rows matching every given filter."""
    clauses: list[str] = []
    args: list[Any] = []
    for column, value in (("trace_id", trace_id), ("id", message_id)):
        if value is not None:
            clauses.append(f"{column} = ?")
            args.append(value)
    for column, prefix in (("to_path", to_path_prefix), ("from_path", from_path_prefix)):
        if prefix is not None:
            clauses.append(f"substr({column}, 1, ?) = ?")
            args.extend([len(prefix), prefix])
    if since is not None:
        clauses.append("created_at >= ?")
        args.append(since)
    sql = (
        "SELECT id, trace_id, parent_message_id, correlation_id, ttl, from_path, to_path, "
        "reply_to, headers, body_kind, body_payload, created_at FROM message_log"
    )
    if clauses:
        sql += " WHERE " + " AND ".join(clauses)
    sql += f" ORDER BY seq {'ASC' if oldest_first else 'DESC'} LIMIT ?"
    args.append(limit)
    conn = connect(str(path), readonly=True)
    try:
        rows = conn.execute(sql, args).fetchall()
    finally:
        conn.close()
    return [_log_entry(r) for r in rows]


@dataclass(frozen=True, slots=True)
class RegistryRow:
    """A cell as the registry last recorded it (``status``: active, inactive or failed)."""

    path: str
    cell_id: str
    cell_type: str
    status: str
    updated_at: int


def read_registry(path: Path) -> dict[str, RegistryRow]:
    """Every registry row by cell path (read-only; empty when ``colony.db`` does not exist)."""
    if not path.exists():
        return {}
    conn = connect(str(path), readonly=True)
    try:
        rows = conn.execute(
            "SELECT path, cell_id, cell_type, status, updated_at FROM registry ORDER BY path"
        ).fetchall()
    finally:
        conn.close()
    return {r[0]: RegistryRow(*r) for r in rows}


def revive_in_registry(path: Path, cell_path: str) -> str | None:
    """Mark a failed cell ``active`` in a stopped colony's registry (the next boot computes its
    activity from the edges again); returns the status it had, or None for an unknown path.
    The caller holds the root lease, so no daemon writes meanwhile."""
    conn = connect(str(path))
    try:
        conn.execute("BEGIN IMMEDIATE")
        row = conn.execute("SELECT status FROM registry WHERE path = ?", (cell_path,)).fetchone()
        if row is not None and row[0] == "failed":
            conn.execute(
                "UPDATE registry SET status = 'active', updated_at = ? WHERE path = ?",
                (int(time.time()), cell_path),
            )
        conn.execute("COMMIT")
    finally:
        conn.close()
    return None if row is None else str(row[0])


# -- dead letters one by one: show, replay, the letters of a trace -----------------------------


def _select_dead_letters(path: Path, sql: str, args: Sequence[Any]) -> list[DeadLetterRow]:
    """Run ``sql`` (its ``{columns}`` filled in) and build rows without reading any body. A
    file an older daemon wrote, not yet upgraded, lacks the newer columns: they read as NULL."""
    conn = connect(str(path), readonly=True)
    try:
        have = dead_letter_columns(conn)
        newer = [c if c in have else f"NULL AS {c}" for c in _NEWER_COLUMNS]
        # Rows an older daemon wrote have no message_id: take it from the envelope (COALESCE
        # evaluates the parse only for those rows).
        newer[0] = (
            f"COALESCE(message_id, {MESSAGE_ID_OF_ENVELOPE})"
            if "message_id" in have
            else MESSAGE_ID_OF_ENVELOPE
        )
        columns = ", ".join([*_DEAD_LETTER_COLUMNS, *newer])
        rows = conn.execute(sql.format(columns=columns), tuple(args)).fetchall()
    finally:
        conn.close()
    return [
        DeadLetterRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], path)
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


def read_dead_letter(path: Path, letter_id: int) -> DeadLetterRow | None:
    """One dead letter by id, its message read and decoded (call it off the event loop)."""
    rows = _select_dead_letters(
        path, "SELECT {columns} FROM dead_letters WHERE id = ?", (letter_id,)
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
    by_source: dict[Path, list[DeadLetterRow]] = {}
    for row in rows:
        if row.source is not None and "message" not in vars(row):
            by_source.setdefault(row.source, []).append(row)
    for source, pending in by_source.items():
        conn = connect(str(source), readonly=True)
        try:
            for start in range(0, len(pending), 500):
                chunk = {row.id: row for row in pending[start : start + 500]}
                marks = ",".join("?" * len(chunk))
                for letter_id, text in conn.execute(
                    f"SELECT id, message_json FROM dead_letters WHERE id IN ({marks})",
                    tuple(chunk),
                ):
                    # Fills the cached_property's slot, as a first access would.
                    vars(chunk[letter_id])["message"] = Envelope.from_json(json.loads(text))
        finally:
            conn.close()
    return rows


def read_dead_letter_message(path: Path, letter_id: int) -> str | None:
    """The stored envelope's JSON text of one dead letter (None when there is no such row)."""
    conn = connect(str(path), readonly=True)
    try:
        row = conn.execute(
            "SELECT message_json FROM dead_letters WHERE id = ?", (letter_id,)
        ).fetchone()
    finally:
        conn.close()
    return None if row is None else str(row[0])


def read_dead_letters_after(
    path: Path, after_id: int, *, error_code: str | None = None, since: int | None = None
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
    return _select_dead_letters(path, sql + " ORDER BY id", args)


def read_trace_dead_letters(path: Path, trace_id: str) -> list[DeadLetterRow]:
    """The dead letters of one trace, oldest first."""
    sql = "SELECT {columns} FROM dead_letters WHERE trace_id = ? ORDER BY id"
    return _select_dead_letters(path, sql, (trace_id,))


@dataclass(frozen=True, slots=True)
class ReplayClaim:
    """What :func:`claim_replay` found: the letter (None: no such id) and whether this replay
    may go ahead (False: it was replayed before and ``force`` was not given)."""

    letter: DeadLetterRow | None
    granted: bool


def claim_replay(path: Path, letter_id: int, message_id: str, *, force: bool) -> ReplayClaim:
    """Mark a dead letter replayed as ``message_id`` now, unless it was replayed before and
    ``force`` is False; the letter is returned as it was before, message decoded. The check
    and the mark are one transaction, so two concurrent replays cannot both be granted."""
    before = read_dead_letter(path, letter_id)
    if before is None:
        return ReplayClaim(None, False)
    conn = connect(str(path))
    try:
        conn.execute("BEGIN IMMEDIATE")
        sql = "UPDATE dead_letters SET replayed_at = ?, replayed_as = ? WHERE id = ?"
        if not force:
            sql += " AND replayed_at IS NULL"
        changed = conn.execute(sql, (int(time.time()), message_id, letter_id)).rowcount
        conn.execute("COMMIT")
    finally:
        conn.close()
    if not changed and not force:  # replayed meanwhile, or before
        return ReplayClaim(read_dead_letter(path, letter_id) or before, False)
    return ReplayClaim(before, bool(changed))


def release_replay(path: Path, letter: DeadLetterRow) -> None:
    """Undo :func:`claim_replay` when the replayed message could not be sent."""
    conn = connect(str(path))
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "UPDATE dead_letters SET replayed_at = ?, replayed_as = ? WHERE id = ?",
            (letter.replayed_at, letter.replayed_as, letter.id),
        )
        conn.execute("COMMIT")
    finally:
        conn.close()
