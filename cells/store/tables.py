"""Where a store's tables live, and the SQL every store runs on them whatever the place.

In a colony the tables are in ``colony.db`` (:mod:`colony.celltables`: a write commits with the
hand-off that answers it). A store built without a colony (a unit test, code) keeps them in its
own ``cell.db``: :class:`OwnFile` runs each write in a transaction of its own.

An older daemon kept a colony's store in ``cell.db`` too: :func:`read_cell_db` and
:func:`copy_tables` move it into ``colony.db`` once, at the first start that finds ``cell.db``
and no table of the cell in ``colony.db`` yet (``cell.db`` is then renamed
``cell.db.migrated``).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from cells.cellfile import open_cell_db
from cells.store.dialect import sqlite_columns, sqlite_tables
from colony.celltables import CellTables, Work, quoted
from colony.envelope import Envelope

T = TypeVar("T")

MIGRATED_SUFFIX = ".migrated"


class OwnFile(CellTables):
    """A store's tables in its own ``cell.db`` (in memory without a folder)."""

    dialect = "sqlite"

    def __init__(self, folder: Path | None) -> None:
        self.prefix = ""
        self.conn, self.fresh = open_cell_db(folder)

    async def write(
        self,
        work: Work[T],
        *,
        ack: tuple[str, str] | None = None,
        handling: Envelope | None = None,
    ) -> T:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = work(conn)
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        if conn.in_transaction:  # an interrupted write has rolled the transaction back
            conn.execute("COMMIT")
        return result

    async def committed(self) -> None:
        return None

    async def read(self, work: Work[T]) -> T:
        return work(self.conn)

    async def close(self) -> None:
        self.conn.close()


@dataclass(frozen=True, slots=True)
class OldTable:
    """One table of an old ``cell.db``, read whole."""

    name: str
    columns: list[tuple[str, str]]
    rows: list[tuple[Any, ...]]


def read_cell_db(file: Path) -> list[OldTable]:
    """Every table of an old ``cell.db`` with its rows (blocking: run it in a thread)."""
    conn = sqlite3.connect(file, isolation_level=None)
    try:
        found: list[OldTable] = []
        for name in sqlite_tables(conn, ""):
            columns = sqlite_columns(conn, name)
            if not columns:
                continue
            names = ", ".join(quoted(c) for c, _ in columns)
            rows = conn.execute(f"SELECT {names} FROM {quoted(name)} ORDER BY rowid").fetchall()
            found.append(OldTable(name, columns, rows))
        return found
    finally:
        conn.close()  # the last connection: SQLite folds cell.db-wal back into the file


def copy_tables(conn: sqlite3.Connection, prefix: str, tables: list[OldTable]) -> int:
    """Create each old table under ``prefix`` and copy its rows; returns the rows copied."""
    copied = 0
    for table in tables:
        name = quoted(prefix + table.name)
        definition = ", ".join(f"{quoted(c)} {kind}".rstrip() for c, kind in table.columns)
        conn.execute(f"CREATE TABLE IF NOT EXISTS {name} ({definition})")
        if table.rows:
            marks = ", ".join("?" for _ in table.columns)
            names = ", ".join(quoted(c) for c, _ in table.columns)
            conn.executemany(f"INSERT INTO {name} ({names}) VALUES ({marks})", table.rows)
            copied += len(table.rows)
    return copied


def retire_cell_db(file: Path) -> Path:
    """Rename a migrated ``cell.db`` (and any ``-wal``/``-shm`` beside it) out of the way."""
    target = file.with_name(file.name + MIGRATED_SUFFIX)
    for suffix in ("-wal", "-shm"):
        side = file.with_name(file.name + suffix)
        if side.exists():
            side.rename(target.with_name(target.name + suffix))
    file.rename(target)
    return target
