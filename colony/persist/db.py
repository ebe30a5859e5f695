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
import json
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from colony.dead_letters import DeadLetter
from colony.envelope import Envelope
from colony.persist.items import Commit, Fence, Forget, LogRow, Registry, Stop, Unit
from colony.persist.journal import JournalSnapshot
from colony.persist.rows import UNSTORABLE, describe
from colony.persist.schema import connect, identity, open_for_writing
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
    "read_messages",
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


@dataclass(frozen=True, slots=True)
class DeadLetterRow:
    id: int
    error_code: str
    sender_path: str
    original_target: str
    resolved_target: str
    trace_id: str
    created_at: int
    message: Envelope
    detail: str | None

    @property
    def message_id(self) -> str:
        return self.message.id


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
        return await asyncio.to_thread(read_dead_letters, self.path, error_code, since, limit)


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
    sql = (
        "SELECT id, error_code, sender_path, original_target, resolved_target, trace_id, "
        "created_at, message_json, detail FROM dead_letters"
    )
    if clauses:
        sql += " WHERE " + " AND ".join(clauses)
    sql += " ORDER BY id"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    conn = connect(str(path), readonly=True)
    try:
        rows = conn.execute(sql, args).fetchall()
    finally:
        conn.close()
    return [
        DeadLetterRow(
            r[0], r[1], r[2], r[3], r[4], r[5], r[6], Envelope.from_json(json.loads(r[7])), r[8]
        )
        for r in rows
    ]


def delete_dead_letters(
    path: Path,
    *,
    error_code: str | None = None,
    since: int | None = None,
    ids: list[int] | None = None,
) -> list[DeadLetterRow]:
    """Remove the matching dead letters (all when no filter) and return them."""
    rows = [r for r in read_dead_letters(path, error_code, since) if ids is None or r.id in ids]
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
