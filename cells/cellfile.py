"""A cell's own SQLite file, ``cell.db`` in its state folder, written once for every cell that
keeps one.

Three things each stateful cell needs and once wrote for itself:

* :func:`open_cell_db` opens the file the same way everywhere: autocommit (the cell writes
  ``BEGIN``/``COMMIT`` itself where it needs a transaction), usable from a worker thread, WAL so
  a reader never blocks the writer, ``synchronous=NORMAL`` (a committed transaction survives a
  crash of the daemon; only a power cut can take back the last ones) and a busy timeout so a
  second connection waits for the lock instead of failing at once (the switch to WAL too,
  which SQLite refuses at once to a process racing another on a fresh file). A cell without a
  folder (a test) gets a private in-memory database. The folder is ``CellSpec.state``: the
  cell's folder in the tree, or its folder under ``--state-dir`` (:mod:`colony.statedir`),
  made here (mode 0700) the first time the cell opens its file.
* :func:`bounded` interrupts statements that run past ``query_timeout_ms`` and raises
  :class:`QueryTimeoutError`, so a runaway query cannot hold the cell's single writer.
* :class:`ParamsOverlay` keeps the runtime ``params`` updates (the "β" overlay of cells.md
  §0.6): merged per key, last write wins, replayed over the birth params at the next start.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "BUSY_TIMEOUT_MS",
    "CELL_DB",
    "ParamsOverlay",
    "QueryTimeoutError",
    "bounded",
    "cell_db_path",
    "connect",
    "open_cell_db",
    "own_folder",
]

CELL_DB = "cell.db"
BUSY_TIMEOUT_MS = 5000
"""How long a statement waits for another connection's lock before ``database is locked``."""
MEMORY = ":memory:"

Synchronous = Literal["NORMAL", "FULL"]


class QueryTimeoutError(Exception):
    """A cell.db operation ran, or waited for the database, past its ``query_timeout_ms``."""


def cell_db_path(folder: Path | None) -> str:
    """Where a cell's file is: ``<folder>/cell.db``, or in memory for a cell without a folder."""
    return MEMORY if folder is None else str(Path(folder) / CELL_DB)


def own_folder(folder: Path) -> Path:
    """``folder`` (a cell's ``spec.state``), made when missing: a state folder outside the tree
    is made on demand, the cell's own folder in the tree always exists (nothing is written)."""
    if not folder.is_dir():
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


def connect(
    target: str | Path,
    *,
    busy_timeout_ms: int = BUSY_TIMEOUT_MS,
    synchronous: Synchronous = "NORMAL",
) -> sqlite3.Connection:
    """A connection to ``target`` with this module's settings (see the module docstring). The
    connection is closed again if the settings cannot be applied."""
    conn = sqlite3.connect(
        str(target),
        isolation_level=None,
        check_same_thread=False,
        timeout=busy_timeout_ms / 1000,
    )
    try:
        _into_wal(conn, busy_timeout_ms / 1000)
        conn.execute(f"PRAGMA synchronous={synchronous}")
    except sqlite3.Error:
        conn.close()
        raise
    return conn


def _into_wal(conn: sqlite3.Connection, patience_s: float) -> None:
    """Put the file in WAL mode, retrying ``database is locked`` for ``patience_s``: several
    processes opening one fresh file at once (cluster members on one root open the same
    ``cell.db``) make SQLite refuse the switch at once, without its busy handler, to the ones
    that would otherwise deadlock on the lock it needs."""
    deadline = time.monotonic() + patience_s
    pause = 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            busy = (getattr(exc, "sqlite_errorcode", 0) & 0xFF) == sqlite3.SQLITE_BUSY
            if not busy or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def open_cell_db(
    folder: Path | None, *, busy_timeout_ms: int = BUSY_TIMEOUT_MS
) -> tuple[sqlite3.Connection, bool]:
    """The cell's connection, and whether the file is fresh (created by this call, or in
    memory): a fresh file is where a cell stores its seed."""
    target = cell_db_path(None if folder is None else own_folder(Path(folder)))
    fresh = target == MEMORY or not Path(target).exists()
    return connect(target, busy_timeout_ms=busy_timeout_ms), fresh


@contextmanager
def bounded(conn: sqlite3.Connection, timeout_ms: int | None) -> Iterator[None]:
    """Statements run inside are interrupted once ``timeout_ms`` has passed (None: never),
    which raises :class:`QueryTimeoutError`; a write interrupted inside a transaction rolls that
    transaction back."""
    if not timeout_ms:
        yield
        return
    deadline = time.monotonic() + timeout_ms / 1000
    conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 1000)
    try:
        yield
    except sqlite3.OperationalError as exc:
        if "interrupted" in str(exc):
            raise QueryTimeoutError(f"query exceeded query_timeout_ms ({timeout_ms} ms)") from None
        raise
    finally:
        conn.set_progress_handler(None, 0)


class ParamsOverlay:
    """The runtime ``params`` updates of one cell, in a ``(key, value, updated_at)`` table of its
    cell.db. Values are stored as ASCII JSON (any string survives the trip); the caller
    validates an update before it saves it."""

    def __init__(self, conn: sqlite3.Connection, table: str) -> None:
        self.conn = conn
        self.table = table
        conn.execute(
            f'CREATE TABLE IF NOT EXISTS "{table}" '
            "(key TEXT PRIMARY KEY, value TEXT NOT NULL, updated_at INTEGER NOT NULL)"
        )

    def read(self) -> dict[str, Any]:
        """Every key updated so far, with its last value."""
        rows = self.conn.execute(f'SELECT key, value FROM "{self.table}"').fetchall()
        return {str(key): json.loads(value) for key, value in rows}

    def save(self, update: Mapping[str, Any]) -> None:
        """Store every key of ``update`` in one transaction: all of them or none."""
        now = int(time.time())
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(
                f'INSERT INTO "{self.table}" (key, value, updated_at) VALUES (?, ?, ?) '
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value, "
                "updated_at = excluded.updated_at",
                [(key, json.dumps(value), now) for key, value in update.items()],
            )
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
