"""Cells' tables in the cluster database: :class:`colony.celltables.CellTables` on PostgreSQL.

As on SQLite (:mod:`colony.persist.celltables`), a write is an
:class:`~colony.persist.items.Execute` on the writer's queue, run inside the transaction that
will carry the hand-off answering it; a read waits for the cell's last write to be committed,
then runs on a connection of the cell's own, in a thread (a read is a round trip to the server,
which the event loop must not wait for).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, TypeVar

import psycopg

from colony.celltables import CellTables, Work
from colony.envelope import Envelope
from colony.persist.celltables import ColonyTables, _WriteCommitted
from colony.persist.pg.db import PgDb

T = TypeVar("T")


class PgTables(ColonyTables):
    """One cell's tables in the cluster database: written as in ``colony.db`` (fenced by the
    message being handled), read in a thread on a connection of the cell's own."""

    dialect = "postgres"

    def __init__(self, db: PgDb, cell_path: str) -> None:
        super().__init__(db, cell_path)
        self.pg = db
        self._pg_reader: psycopg.Connection[Any] | None = None

    async def write(
        self,
        work: Work[T],
        *,
        ack: tuple[str, str] | None = None,
        handling: Envelope | None = None,
    ) -> T:
        self._last = last = _WriteCommitted()
        fence = None if handling is None else (handling.partition, handling.epoch)
        return await self.pg.execute(work, ack, last, fence=fence)

    async def read(self, work: Work[T]) -> T:
        if self._last is not None:
            await self.committed()
        return await asyncio.to_thread(self._read, work)

    def _read(self, work: Work[T]) -> T:
        conn = self._pg_reader
        if conn is None or conn.closed or conn.broken:
            conn = self._pg_reader = psycopg.connect(
                self.pg.dsn, autocommit=True, connect_timeout=5
            )
        return work(conn)  # a psycopg connection: this host says dialect "postgres"

    async def close(self) -> None:
        if self._pg_reader is not None:
            with contextlib.suppress(Exception):
                self._pg_reader.close()
            self._pg_reader = None


class PgTablesHost:
    """What a cell spec carries in a cluster: the cluster database, for cells' tables."""

    def __init__(self, db: PgDb) -> None:
        self.db = db

    def tables(self, cell_path: str) -> CellTables:
        return PgTables(self.db, cell_path)
