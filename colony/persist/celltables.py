"""Cells' tables in ``colony.db``: :class:`colony.celltables.CellTables` over the writer.

A write is an :class:`colony.persist.items.Execute` on the writer's queue: it runs inside the
writer's transaction, in queue order with every hand-off, so a write and the unit that answers
it commit together (the writer waits for that unit, briefly) and nothing routed after the unit
sees the write uncommitted. A read runs on the event loop, on a read connection of the cell's
own (WAL: it never waits for the writer), once the cell's last write is committed, so a cell
always reads its own writes.
"""

from __future__ import annotations

import asyncio
import sqlite3
from typing import TypeVar

from colony.celltables import CellTables, Work, table_name
from colony.envelope import Envelope
from colony.persist.backend import Backend
from colony.persist.db import ColonyDb, StorageUnavailable
from colony.persist.schema import connect

T = TypeVar("T")

COMMIT_POLL_S = 0.05
"""While the storage is out, how often a cell waiting for its write's commit looks again."""


class _WriteCommitted:
    """Whether one write is committed, set on the writer's thread (no loop wake-up: most
    writes are never waited for; the few that are ask through a fence)."""

    __slots__ = ("error", "settled")

    def __init__(self) -> None:
        self.settled = False
        self.error: BaseException | None = None

    def __call__(self, error: BaseException | None) -> None:
        self.error = error
        self.settled = True


class ColonyTables(CellTables):
    """One cell's tables in ``colony.db``."""

    dialect = "sqlite"

    def __init__(self, db: Backend, cell_path: str) -> None:
        self.db = db
        self.prefix = table_name(cell_path, "")
        self._last: _WriteCommitted | None = None
        """The commit of the last write, until it is seen settled."""
        self._reader: sqlite3.Connection | None = None

    async def write(
        self,
        work: Work[T],
        *,
        ack: tuple[str, str] | None = None,
        handling: Envelope | None = None,  # (a colony alone owns every conversation)
    ) -> T:
        self._last = last = _WriteCommitted()
        return await self.db.execute(work, ack, last)

    async def committed(self) -> None:
        last = self._last
        if last is None:
            return
        while not last.settled:
            if self.db.closed:
                raise StorageUnavailable("colony.db was closed before this write committed")
            await self.db.flush()  # a fence: passes once the write was tried
            if not last.settled:  # kept for a retry while the storage is out
                await asyncio.sleep(COMMIT_POLL_S)
        self._last = None
        if last.error is not None:
            raise last.error

    async def read(self, work: Work[T]) -> T:
        if self._last is not None:  # (no coroutine for a cell whose writes are all seen settled)
            await self.committed()
        if self._reader is None:
            assert isinstance(self.db, ColonyDb)  # (the cluster's tables read in pg/tables.py)
            self._reader = connect(str(self.db.path), readonly=True)
        return work(self._reader)

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


class ColonyTablesHost:
    """What a cell spec carries: ``colony.db``, for the cells that keep their tables there."""

    def __init__(self, db: ColonyDb) -> None:
        self.db = db

    def tables(self, cell_path: str) -> CellTables:
        return ColonyTables(self.db, cell_path)
