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
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from colony.dead_letters import DeadLetter
from colony.effects import Handled, LogRow
from colony.metrics.tally import Tally
from colony.persist.checkpoint import Checkpointer
from colony.persist.items import Commit, Execute, Fence, Forget, Item, Registry, Stop, Unit
from colony.persist.journal import JournalSnapshot
from colony.persist.records import (
    DeadLetterRow,
    MessageLogEntry,
    read_dead_letters,
    read_log,
    with_messages,
)
from colony.persist.rows import describe
from colony.persist.schema import identity, open_for_writing
from colony.persist.source import Source
from colony.persist.writer import (
    Event,
    PersistenceError,
    StorageUnavailable,
    UnitRejected,
    Writer,
)

T = TypeVar("T")

__all__ = [
    "ColonyDb",
    "DbStatistics",
    "PersistenceError",
    "StorageUnavailable",
    "UnitRejected",
]


def _result() -> tuple[asyncio.Future[Any], Callable[[Any, BaseException | None], None]]:
    """A future of the running loop for a result the writer thread produces."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def done(value: Any, error: BaseException | None) -> None:
        def resolve() -> None:
            if future.done():
                return  # a retried transaction ran the work again: the first result stands
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(value)

        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(resolve)

    return future, done


def completion() -> tuple[asyncio.Future[None], Callable[[BaseException | None], None]]:
    """A future of the running loop, and the callback the writer thread calls to settle it."""
    future, done = _result()
    return future, lambda error: done(None, error)


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
    commit_seconds: Tally | None = None
    """The writer's commit latencies and ``batch_items`` its batch sizes (for metrics)."""
    batch_items: Tally | None = None


class ColonyDb:
    """``<root>/colony.db``: one writer thread, read connections on demand."""

    dialect = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = path
        conn = open_for_writing(path)  # ColonyDbError names the file, the problem, the fix
        self._identity = identity(path)
        self._queue: queue.SimpleQueue[Item] = queue.SimpleQueue()
        self._writer = Writer(conn, self._queue)
        self._thread = threading.Thread(
            target=self._writer.run, name="colony-db-writer", daemon=True
        )
        self._thread.start()
        self._checkpointer = Checkpointer(path)

    @property
    def source(self) -> Source:
        """Where the reads find this colony's rows."""
        return Source.sqlite(self.path)

    @property
    def closed(self) -> bool:
        """The writer has stopped: nothing more is written."""
        return not self._thread.is_alive()

    @property
    def rows_written(self) -> int:
        return self._writer.rows_written

    @property
    def journalled(self) -> int:
        """Journal inserts committed so far (deliveries made durable)."""
        return self._writer.journalled

    # -- writes (never block the caller) ------------------------------------------------------

    def write(self, rows: Iterable[LogRow | DeadLetter | Handled]) -> None:
        """Hand message-log rows and dead letters to the writer, each committed on its own
        (outside any unit: at-most-once delivery, boot)."""
        put = self._queue.put
        for row in rows:
            put(row)

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
            writer.commit_seconds,
            writer.batch_items,
        )

    # -- barriers and reads -------------------------------------------------------------------

    async def flush(self) -> None:
        """Return once everything handed over before this call was tried: committed,
        rejected (dead-lettered ``unstorable``), or kept for a retry while the storage is
        unavailable. Never raises: reads after it see what is committed."""
        if not self._thread.is_alive():
            return
        future, done = completion()
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
        future, done = completion()
        self._queue.put(Commit(unit, done))
        await future

    def execute(
        self,
        work: Callable[[sqlite3.Connection], T],
        ack: tuple[str, str] | None = None,
        done: Callable[[BaseException | None], None] = _ignore,
    ) -> asyncio.Future[T]:
        """Run ``work`` on the writer's connection inside its current transaction (a cell's
        tables, :mod:`colony.celltables`); the future resolves with its result once it ran.
        ``done`` is called on the writer's thread once it is committed (it must not block).
        ``ack`` (the handled message) holds the transaction open briefly for the unit that
        acknowledges it."""
        if not self._thread.is_alive():
            raise StorageUnavailable("colony.db is closed")
        executed, report = _result()
        self._queue.put(Execute(work, ack, report, done))
        return executed

    def commit_later(self, unit: Unit) -> None:
        """Hand a unit to the writer without waiting (a failure is reported by the writer)."""
        self._queue.put(Commit(unit, _ignore, waited=False))

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
        self._checkpointer.close()
        if self._thread.is_alive():
            self._queue.put(Stop())
            self._thread.join()

    async def message_log(self, trace_id: str | None = None) -> list[MessageLogEntry]:
        await self.flush()
        return await asyncio.to_thread(read_log, self.source, trace_id)

    async def dead_letters(
        self, *, error_code: str | None = None, since: int | None = None, limit: int | None = None
    ) -> list[DeadLetterRow]:
        await self.flush()

        def read() -> list[DeadLetterRow]:  # rows that outlive the file carry their message
            return with_messages(read_dead_letters(self.source, error_code, since, limit))

        return await asyncio.to_thread(read)
