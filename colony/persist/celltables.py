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
import contextlib
import sqlite3
from typing import TypeVar

from colony.celltables import CellTables, Work, table_name
from colony.persist.db import ColonyDb

T = TypeVar("T")

READ_BUSY_TIMEOUT_S = 30.0


class ColonyTables(CellTables):
    """One cell's tables in ``colony.db``."""

    def __init__(self, db: ColonyDb, cell_path: str) -> None:
        self.db = db
        self.prefix = table_name(cell_path, "")
        self._pending: asyncio.Future[None] | None = None
        """The commit of the last write, while it is not done."""
        self._reader: sqlite3.Connection | None = None

    async def write(self, work: Work[T], *, ack: tuple[str, str] | None = None) -> T:
        executed, committed = self.db.execute(work, ack)
        committed.add_done_callback(_retrieve)
        self._pending = committed
        return await executed

    async def committed(self) -> None:
        pending = self._pending
        if pending is not None:
            if not pending.done():
                await asyncio.shield(pending)
            self._pending = None
            pending.result()

    async def read(self, work: Work[T]) -> T:
        await self.committed()
        if self._reader is None:
            self._reader = sqlite3.connect(
                self.db.path,
                isolation_level=None,
                check_same_thread=False,
                timeout=READ_BUSY_TIMEOUT_S,
            )
        return work(self._reader)

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


def _retrieve(future: asyncio.Future[None]) -> None:
    """Mark a commit's failure as seen: whoever needs it asks :meth:`ColonyTables.committed`."""
    with contextlib.suppress(asyncio.CancelledError):
        future.exception()


class ColonyTablesHost:
    """What a cell spec carries: ``colony.db``, for the cells that keep their tables there."""

    def __init__(self, db: ColonyDb) -> None:
        self.db = db

    def tables(self, cell_path: str) -> CellTables:
        return ColonyTables(self.db, cell_path)
