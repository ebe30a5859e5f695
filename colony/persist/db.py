"""The one writer of ``colony.db``.

Routing must never wait on a commit: message-log rows and dead letters are handed to a writer
thread through a queue (a put costs well under a microsecond) and committed in batches of up
to 1,024 rows per transaction. Serialising headers and bodies to JSON also happens on that
thread. Readers first ``flush()`` (a fence through the same queue), then read on their own
connection, so they see every write made before they asked. How a write fails, and why one
bad unit or a full disk never leaves the writer failed, is :mod:`colony.persist.writer`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from colony.dead_letters import DeadLetter
from colony.envelope import Envelope
from colony.persist.items import Commit, Fence, Forget, LogRow, Registry, Stop, Unit
from colony.persist.journal import JournalSnapshot
from colony.persist.rows import UNSTORABLE, describe
from colony.persist.schema import (
    MESSAGE_ID_OF_ENVELOPE,
    connect,
    dead_letter_columns,
    identity,
    open_for_writing,
)
from colony.persist.writer import (
    Event,
    PersistenceError,
    StorageUnavailable,
    UnitRejected,
    Writer,
)

__all__ = [
    "UNSTORABLE",
    "ColonyDb",
    "DbStatistics",
    "DeadLetterRow",
    "LogRow",
    "MessageLogEntry",
    "PersistenceError",
    "StorageUnavailable",
    "Unit",
    "UnitRejected",
    "delete_dead_letters",
    "read_dead_letters",
    "read_log",
]


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


def _completion() -> tuple[asyncio.Future[None], Callable[[BaseException | None], None]]:
    """A future of the running loop, and the callback the writer thread calls to settle it."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()

    def done(error: BaseException | None) -> None:
        def resolve() -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(None)

        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(resolve)

    return future, done


def _ignore(error: BaseException | None) -> None:
    """The completion callback of a commit nobody waits for (the writer reports failures)."""


@dataclass(frozen=True, slots=True)
class DbStatistics:
    rows_written: int
    """Message-log rows and dead letters committed."""
    journalled: int
    """Journal inserts committed (deliveries made durable)."""
    rejected: int
    """Units or rows that could not be stored (dead-lettered ``unstorable`` or reported)."""
    kept: int
    """Writes waiting for the storage to come back."""
    unavailable: str | None
    """Why ``colony.db`` cannot be written now, or None."""


class ColonyDb:
    """``<root>/colony.db``: one writer thread, read connections on demand."""

    def __init__(self, path: Path) -> None:
        self.path = path
        conn = open_for_writing(path)  # ColonyDbError names the file, the problem, the fix
        self._identity = identity(path)
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._writer = Writer(conn, self._queue)
        self._thread = threading.Thread(
            target=self._writer.run, name="colony-db-writer", daemon=True
        )
        self._thread.start()

    @property
    def rows_written(self) -> int:
        return self._writer.rows_written

    @property
    def journalled(self) -> int:
        """Journal inserts committed so far (deliveries made durable)."""
        return self._writer.journalled

    # -- writes (never block the caller) ------------------------------------------------------

    def log(self, message: Envelope, from_path: str, to_path: str) -> None:
        self._queue.put(LogRow(message, from_path, to_path, message.ttl))

    def dead_letter(self, letter: DeadLetter) -> None:
        self._queue.put(letter)

    def set_registry(self, path: str, cell_id: str, cell_type: str, status: str) -> None:
        self._queue.put(Registry(path, cell_id, cell_type, status, int(time.time())))

    # -- health -------------------------------------------------------------------------------

    def listen(self, on_event: Event) -> None:
        """Have the writer report through ``on_event`` (called on the writer's thread)."""
        self._writer.on_event = on_event

    def unavailable(self) -> str | None:
        """Why ``colony.db`` cannot be written now (the file is gone, the disk is full, an
        I/O error), or None while writes work."""
        writer = self._writer
        if writer.lost is not None:
            return writer.lost
        error = writer.storage_error
        return None if error is None else f"colony.db cannot be written: {describe(error)}"

    @property
    def lost(self) -> str | None:
        """Set once ``colony.db`` was found deleted or replaced (see :meth:`check_file`)."""
        return self._writer.lost

    def check_file(self) -> str | None:
        """Compare the file at ``path`` with the one opened at boot (device and inode). When
        it was deleted or replaced, stop writing (what would be written would be lost with the
        unlinked file) and return what happened; None when it is the same file, or once the
        loss was reported."""
        if self._writer.lost is not None or self._identity is None:
            return None
        now = identity(self.path)
        if now == self._identity:
            return None
        what = "deleted" if now is None else "replaced by another file"
        self._writer.lost = (
            f"{self.path} was {what} while the daemon was running; nothing more is written to "
            "it, and ingress is refused. Stop the daemon (what cells did since is lost with "
            "the old file) and restore colony.db from a backup, or start with a new one"
        )
        return self._writer.lost

    def statistics(self) -> DbStatistics:
        writer = self._writer
        return DbStatistics(
            writer.rows_written,
            writer.journalled,
            writer.rejected,
            len(writer.kept),
            self.unavailable(),
        )

    # -- barriers and reads -------------------------------------------------------------------

    async def flush(self) -> None:
        """Return once everything handed over before this call was tried: committed,
        rejected (dead-lettered ``unstorable``), or kept for a retry while the storage is
        unavailable. Never raises: reads after it see what is committed."""
        if not self._thread.is_alive():
            return
        future, done = _completion()
        self._queue.put(Fence(done))
        await future

    async def commit(self, unit: Unit) -> None:
        """Hand a unit to the writer and return once it is committed (group commit: every
        unit queued meanwhile shares the transaction). Sets ``unit.duplicate`` when its key
        was seen before. Raises :class:`UnitRejected` when this unit cannot be stored (its
        message was dead-lettered), :class:`StorageUnavailable` for a ``fail_fast`` unit
        while the storage refuses writes; any other unit waits until it can be written."""
        if not self._thread.is_alive():
            raise StorageUnavailable("colony.db is closed")
        future, done = _completion()
        self._queue.put(Commit(unit, done))
        await future

    def commit_later(self, unit: Unit) -> None:
        """Hand a unit to the writer without waiting (a failure is reported by the writer)."""
        self._queue.put(Commit(unit, _ignore))

    def journal(self) -> JournalSnapshot:
        """What the journal holds now (read at boot, before any unit is written), to be read
        a page at a time."""
        return JournalSnapshot(self.path)

    def forget(self, seqs: Sequence[int]) -> None:
        """Remove journal rows that can no longer be delivered (their cell is gone); they are
        dead-lettered by the caller in the same queue, so nothing is lost."""
        for seq in seqs:
            self._queue.put(Forget(seq))

    def close(self) -> None:
        """Commit what is queued and stop the writer (blocking; call once, at shutdown)."""
        if self._thread.is_alive():
            self._queue.put(Stop())
            self._thread.join()

    async def message_log(self, trace_id: str | None = None) -> list[MessageLogEntry]:
        await self.flush()
        return await asyncio.to_thread(read_log, self.path, trace_id)

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


def read_log(
    path: Path, trace_id: str | None = None, limit: int | None = None
) -> list[MessageLogEntry]:
    """Message-log rows in the order they were written (the first ``limit``), those of one
    trace when ``trace_id`` is given (read-only; usable without a running colony). The HTTP
    and message-plane reads with their filters are :mod:`colony.reads`."""
    sql = (
        "SELECT id, trace_id, parent_message_id, correlation_id, ttl, from_path, to_path, "
        "reply_to, headers, body_kind, body_payload, created_at FROM message_log"
    )
    args: tuple[Any, ...] = ()
    if trace_id is not None:
        sql += " WHERE trace_id = ?"
        args = (trace_id,)
    conn = connect(str(path), readonly=True)
    try:
        if limit is not None:
            sql += f" ORDER BY seq LIMIT {int(limit)}"
        else:
            sql += " ORDER BY seq"
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
