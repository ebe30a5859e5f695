"""The cluster database as the colony sees it: :class:`colony.persist.db.ColonyDb`'s methods
over PostgreSQL.

Writes go through the same queue to a writer thread (:class:`PgWriter`), so a unit, a store's
write inside it, fences and group commit behave as on SQLite. Reads open a connection of their
own, off the event loop.
"""

from __future__ import annotations

import asyncio
import json
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import psycopg

from colony.dead_letters import DeadLetter
from colony.effects import Handled, LogRow
from colony.envelope import Envelope
from colony.persist.db import DbStatistics, _ignore, _result, completion
from colony.persist.items import Commit, Execute, Fence, Forget, Item, Registry, Stop, Unit
from colony.persist.pg import schema
from colony.persist.pg.writer import PgWriter, scrub
from colony.persist.records import DeadLetterRow, MessageLogEntry, log_entry
from colony.persist.rows import describe
from colony.persist.schema import MESSAGE_LOG_SELECT
from colony.persist.source import Source
from colony.persist.writer import Event, StorageUnavailable

T = TypeVar("T")


class PgDb:
    """One node's handle on the cluster database: a writer thread, read connections on
    demand. ``create`` makes the tables (and the partitions' rows) if they are missing."""

    dialect = "postgres"

    def __init__(
        self,
        dsn: str,
        node: str,
        partitions: int,
        lease_ms: int = 10_000,
        partition_by: str = "trace_id",
    ) -> None:
        self.dsn = dsn
        self.node = node
        self.partitions = partitions
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            schema.create(conn, partitions, partition_by)
        self._queue: queue.SimpleQueue[Item] = queue.SimpleQueue()
        self._writer = PgWriter(dsn, node, self._queue, idle_timeout_ms=lease_ms)
        self._thread = threading.Thread(
            target=self._writer.run, name="cluster-db-writer", daemon=True
        )
        self._thread.start()

    @property
    def source(self) -> Source:
        return Source.postgres(self.dsn)

    @property
    def closed(self) -> bool:
        return not self._thread.is_alive()

    @property
    def rows_written(self) -> int:
        return self._writer.rows_written

    @property
    def journalled(self) -> int:
        return self._writer.journalled

    @property
    def lost(self) -> str | None:
        return None  # a server has no file to lose: its outages are storage errors

    def check_file(self) -> str | None:
        return None

    # -- writes (never block the caller) ------------------------------------------------------

    def write(self, rows: Iterable[LogRow | DeadLetter | Handled]) -> None:
        put = self._queue.put
        for row in rows:
            put(row)

    def set_registry(self, path: str, cell_id: str, cell_type: str, status: str) -> None:
        self._queue.put(Registry(path, cell_id, cell_type, status, int(time.time())))

    def listen(self, on_event: Event) -> None:
        self._writer.on_event = on_event

    def unavailable(self) -> str | None:
        error = self._writer.storage_error
        if error is None:
            return None
        return f"the cluster database cannot be written: {scrub(describe(error), self.dsn)}"

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

    async def flush(self) -> None:
        if not self._thread.is_alive():
            return
        future, done = completion()
        self._queue.put(Fence(done))
        await future

    async def commit(self, unit: Unit) -> None:
        """As :meth:`ColonyDb.commit`; also raises
        :class:`~colony.persist.pg.writer.UnitFenced` when the unit was made under an
        ownership of its partition that has ended."""
        if not self._thread.is_alive():
            raise StorageUnavailable("the cluster database is closed")
        future, done = completion()
        self._queue.put(Commit(unit, done))
        await future

    def execute(
        self,
        work: Callable[[Any], T],
        ack: tuple[str, str] | None = None,
        done: Callable[[BaseException | None], None] = _ignore,
        *,
        fence: tuple[int, int | None] | None = None,
    ) -> asyncio.Future[T]:
        """As :meth:`ColonyDb.execute`; ``fence`` is the ``(partition, epoch)`` the write was
        made under (refused with :class:`UnitFenced` once that ownership ended)."""
        if not self._thread.is_alive():
            raise StorageUnavailable("the cluster database is closed")
        executed, report = _result()
        self._queue.put(Execute(work, ack, report, done, fence))
        return executed

    def commit_later(self, unit: Unit) -> None:
        self._queue.put(Commit(unit, _ignore, waited=False))

    def forget(self, seqs: Sequence[int]) -> None:
        for seq in seqs:
            self._queue.put(Forget(seq))

    def close(self) -> None:
        if self._thread.is_alive():
            self._queue.put(Stop())
            self._thread.join()

    # -- reads --------------------------------------------------------------------------------

    def _select(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
            return conn.execute(sql, tuple(args)).fetchall()

    async def message_log(self, trace_id: str | None = None) -> list[MessageLogEntry]:
        await self.flush()
        sql = f"SELECT {MESSAGE_LOG_SELECT} FROM message_log"
        args: tuple[Any, ...] = ()
        if trace_id is not None:
            sql += " WHERE trace_id = %s"
            args = (trace_id,)
        rows = await asyncio.to_thread(self._select, sql + " ORDER BY seq", args)
        return [log_entry(r) for r in rows]

    async def dead_letters(
        self, *, error_code: str | None = None, since: int | None = None, limit: int | None = None
    ) -> list[DeadLetterRow]:
        await self.flush()
        clauses: list[str] = []
        args: list[Any] = []
        if error_code is not None:
            clauses.append("error_code = %s")
            args.append(error_code)
        if since is not None:
            clauses.append("created_at >= %s")
            args.append(since)
        sql = (
            "SELECT id, error_code, sender_path, original_target, resolved_target, trace_id, "
            "created_at, message_id, detail, replayed_at, replayed_as, message_json "
            "FROM dead_letters"
        )
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        sql += " ORDER BY id"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        out: list[DeadLetterRow] = []
        for r in await asyncio.to_thread(self._select, sql, args):
            row = DeadLetterRow(*r[:11])
            vars(row)["message"] = Envelope.from_json(json.loads(r[11]))
            out.append(row)
        return out
