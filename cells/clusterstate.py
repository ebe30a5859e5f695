"""A cell's own state in a cluster's database, for the cells that keep one besides the store:
the proxy (its update cursor, the parts it sent) and the timer (its schedules).

A daemon alone keeps that state in the cell's ``cell.db`` (:mod:`cells.cellfile`). In a cluster
(``colony.json`` ``cluster``) every node has folders of its own, yet the state must be one: the
Telegram poller and the timer move to another node when theirs dies, and an answer is sent by
whichever node runs its conversation. So there it lives in the cluster's PostgreSQL:

* :func:`cluster_dsn` says where: the cluster's DSN when the colony keeps the cell's tables on
  PostgreSQL (:attr:`colony.celltables.CellTables.dialect`), None for ``cell.db``;
* :func:`state_table` names a table as the colony names cells' tables (``"<cell path>:<table>"``,
  :func:`colony.celltables.table_name`), fitted to PostgreSQL's 63 bytes as the store fits its
  own (:func:`cells.store.dialect.pg_identifier`), and quoted; each table's first column is the
  store's hidden identity :data:`ROW` (insertion order, as SQLite's ``rowid``), so what reads a
  store's tables in write order reads these too;
* :func:`pg` turns a statement written for ``cell.db`` (``?`` marks) into psycopg's (``%s``),
  so a cell writes each statement once;
* :class:`StateConnection` is the cell's connection (below);
* :func:`create_tables` makes a cell's tables under an advisory lock (two nodes booting together
  would race in the catalog) and says whether they are new;
* :func:`read_overlay` / :func:`save_overlay` keep the runtime ``params`` overlay as
  :class:`cells.cellfile.ParamsOverlay` keeps it in ``cell.db``.

Why a connection of the cell's own and not the colony's writer (``CellTables.write``): what
these cells write must commit, or fail, before they go on (a part marked sent before the next
is sent; a cursor saved before its update is emitted), within ``query_timeout_ms``. A write
queued on the writer cannot be withdrawn: one that outlived its timeout would still commit
later, and during an outage the writer keeps it until the server is back. And the poller's
emissions answer no message, so a write on the writer could not join their transaction anyway.
On a connection of its own each operation is one transaction that commits or fails at once, as
on ``cell.db``, and the cells' guarantees read the same on both databases.

psycopg is imported only here and only when a colony has a cluster (it is the ``cluster``
extra's).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from cells.cellfile import QueryTimeoutError
from cells.store.dialect import ROW, pg_identifier
from colony.cell import CellSpec
from colony.celltables import quoted, table_name

__all__ = [
    "ROW",
    "ROW_COLUMN",
    "StateConnection",
    "cluster_dsn",
    "create_tables",
    "overlay_ddl",
    "pg",
    "read_overlay",
    "save_overlay",
    "state_table",
]

T = TypeVar("T")

ROW_COLUMN = f"{ROW} BIGINT GENERATED ALWAYS AS IDENTITY"
"""The first column of every table here (see :func:`state_table`)."""

CONNECT_TIMEOUT_S = 10
"""How long opening the connection may take when no ``query_timeout_ms`` bounds it."""


def cluster_dsn(spec: CellSpec) -> str | None:
    """The cluster database's DSN when the colony keeps this cell's tables on PostgreSQL;
    None when the cell keeps its state in its ``cell.db`` (a daemon alone, or no colony)."""
    if spec.tables is None or spec.tables.tables(spec.path).dialect != "postgres":
        return None
    cluster = spec.colony.cluster
    if cluster is None:  # a host on PostgreSQL is made from the cluster block: never happens
        raise ValueError(
            f"{spec.path}: the colony keeps its tables on PostgreSQL but colony.json has no "
            "cluster block naming the database"
        )
    return cluster.dsn


def state_table(cell_path: str, table: str) -> str:
    """The quoted PostgreSQL name of the cell's ``table``."""
    return quoted(pg_identifier(table_name(cell_path, table)))


def pg(sql: str) -> str:
    """``sql`` written with SQLite's ``?`` marks, with psycopg's ``%s`` instead. Apply it to a
    template before the names go in (a cell's path may hold a ``?``); a template holds no
    other ``?`` and no ``%``."""
    return sql.replace("?", "%s")


def _lock_key(cell_path: str) -> int:
    digest = hashlib.sha256(b"colony cell state\x00" + cell_path.encode("utf-8", "replace"))
    return int.from_bytes(digest.digest()[:8], "big", signed=True)


def create_tables(conn: Any, cell_path: str, ddl: Sequence[str], first: str) -> bool:
    """Run ``ddl`` (``CREATE TABLE IF NOT EXISTS`` statements) inside the caller's transaction
    under the cell's advisory lock; True when the table ``first`` (its quoted name) did not
    exist before (fresh state: where a cell stores its seed, as in a fresh ``cell.db``)."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(cell_path),))
    fresh = bool(conn.execute("SELECT to_regclass(%s)", (first,)).fetchone() == (None,))
    for statement in ddl:
        conn.execute(statement)
    return fresh


def read_overlay(conn: Any, table: str) -> dict[str, Any]:
    """Every key of the params overlay ``table`` with its last value."""
    rows = conn.execute(f"SELECT key, value FROM {table}").fetchall()
    return {str(key): json.loads(value) for key, value in rows}


def overlay_ddl(table: str) -> str:
    """The overlay table, the columns of :class:`cells.cellfile.ParamsOverlay`."""
    return (
        f"CREATE TABLE IF NOT EXISTS {table} ({ROW_COLUMN}, "
        "key TEXT PRIMARY KEY, value TEXT NOT NULL, updated_at BIGINT NOT NULL)"
    )


def save_overlay(conn: Any, table: str, update: Mapping[str, Any]) -> None:
    """Store every key of ``update`` (in the caller's transaction: all of them or none)."""
    now = int(time.time())
    with conn.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {table} (key, value, updated_at) VALUES (%s, %s, %s) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value, "
            "updated_at = excluded.updated_at",
            [(key, json.dumps(value), now) for key, value in update.items()],
        )


class StateConnection:
    """One cell's connection to the cluster database (see the module docstring).

    :meth:`run` runs a work in a worker thread, one at a time; :meth:`call` runs it in the
    calling thread. Each work is one transaction; its statements run under the
    ``statement_timeout`` given (None: none), past which :class:`QueryTimeoutError` is raised
    and the transaction rolled back. Other failures are psycopg's (:attr:`errors`)."""

    def __init__(self, dsn: str) -> None:
        import psycopg

        self.dsn = dsn
        self.errors: tuple[type[Exception], ...] = (psycopg.Error, OSError)
        """What a work raises when the database failed it."""
        self.lock = asyncio.Lock()
        self.guard = threading.Lock()
        """Held by the thread using the connection; :meth:`close` takes it too."""
        self._conn: Any = None
        self._timeout_ms: int | None = None
        """The ``statement_timeout`` the session has (None: not set yet)."""

    def describe(self, exc: BaseException) -> str:
        """``exc`` in one line for a log, without the DSN's password (psycopg may quote the
        DSN)."""
        from colony.persist.pg.writer import scrub

        return scrub(f"{type(exc).__name__}: {exc}".splitlines()[0], self.dsn)

    def _connection(self, timeout_ms: int | None) -> Any:
        import psycopg

        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            self._drop()
            seconds = CONNECT_TIMEOUT_S if not timeout_ms else max(2, math.ceil(timeout_ms / 1000))
            self._conn = conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=seconds)
        return conn

    def _drop(self) -> None:
        conn, self._conn, self._timeout_ms = self._conn, None, None
        if conn is not None:
            with contextlib.suppress(Exception):  # closing a dead connection: nothing to keep
                conn.close()

    def call(self, work: Callable[[Any], T], timeout_ms: int | None) -> T:
        from psycopg import errors

        with self.guard:
            conn = self._connection(timeout_ms)
            wanted = int(timeout_ms or 0)
            try:
                if self._timeout_ms != wanted:
                    conn.execute(f"SET statement_timeout = {wanted}")
                    self._timeout_ms = wanted
                with conn.transaction():
                    return work(conn)
            except errors.QueryCanceled:
                raise QueryTimeoutError(
                    f"query exceeded query_timeout_ms ({timeout_ms} ms)"
                ) from None
            finally:
                if conn.broken:
                    self._drop()

    async def run(self, work: Callable[[Any], T], timeout_ms: int | None) -> T:
        async with self.lock:
            return await asyncio.to_thread(self.call, work, timeout_ms)

    async def close(self) -> None:
        async with self.lock:
            # A cancelled run releases ``lock`` while its thread still runs: wait for it.
            with self.guard:
                self._drop()
