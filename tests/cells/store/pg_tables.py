"""A store's tables on PostgreSQL, for tests: :class:`colony.celltables.CellTables` in a few lines.

What the cluster's own tables do, minus the colony's writer: a write opens a transaction on a
connection of its own, runs the work inside the savepoint ``cell_sql`` (as the writer wraps
every work) and commits; a read runs the work on a second connection, in autocommit. Each
runs on a worker thread, so several stores (several daemons, in a race) really overlap.
``linger_s`` keeps each write's transaction open that long after the work, as the colony's
writer keeps it open for the hand-off that answers it: a racing guarded update then waits for
the row lock instead of finding it free.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, TypeVar

import psycopg

from colony.celltables import CellTables, Work, table_name
from colony.envelope import Envelope

T = TypeVar("T")


class PgTables(CellTables):
    """One store's tables in the schema ``dsn`` puts first in the search path."""

    dialect = "postgres"

    def __init__(self, dsn: str, cell_path: str, *, linger_s: float = 0.0) -> None:
        self.dsn = dsn
        self.prefix = table_name(cell_path, "")
        self.linger_s = linger_s
        self.writer: psycopg.Connection[Any] | None = None
        self.reader: psycopg.Connection[Any] | None = None
        self._writing = threading.Lock()
        """One write at a time on the writer's connection, as the colony's one writer thread."""
        self._reading = threading.Lock()

    def _write(self, work: Work[T]) -> T:
        with self._writing:
            return self._write_now(work)

    def _write_now(self, work: Work[T]) -> T:
        if self.writer is None:
            self.writer = psycopg.connect(self.dsn)
        conn = self.writer
        with conn.transaction():  # BEGIN … COMMIT; an exception rolls it all back
            conn.execute("SAVEPOINT cell_sql")
            result = work(conn)
            conn.execute("RELEASE SAVEPOINT cell_sql")
            if self.linger_s:
                time.sleep(self.linger_s)
        return result

    async def write(
        self,
        work: Work[T],
        *,
        ack: tuple[str, str] | None = None,
        handling: Envelope | None = None,
    ) -> T:
        return await asyncio.to_thread(self._write, work)

    async def committed(self) -> None:
        return None  # a write returns once committed

    def _read(self, work: Work[T]) -> T:
        with self._reading:
            if self.reader is None:
                self.reader = psycopg.connect(self.dsn, autocommit=True)
            return work(self.reader)

    async def read(self, work: Work[T]) -> T:
        return await asyncio.to_thread(self._read, work)

    async def close(self) -> None:
        for conn in (self.writer, self.reader):
            if conn is not None:
                conn.close()
        self.writer = self.reader = None


class PgTablesHost:
    """What a cell spec carries: the test's schema, for a store's tables."""

    def __init__(self, dsn: str, *, linger_s: float = 0.0) -> None:
        self.dsn = dsn
        self.linger_s = linger_s

    def tables(self, cell_path: str) -> CellTables:
        return PgTables(self.dsn, cell_path, linger_s=self.linger_s)
