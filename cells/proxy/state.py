"""Where a ``proxy`` cell keeps its state: the update cursor, the parts already sent (so a
message redelivered after a crash is not sent twice) and the runtime params overlay.

Two places, one set of operations (:class:`ProxyState`): the cell's ``cell.db`` for a daemon
alone (:class:`CellDbState`, what the proxy always did), the cluster's database when the
colony has a ``cluster`` block (:class:`ClusterState`, tables ``"<cell path>:update_cursor"``,
``…:sent_parts``, ``…:proxy_params`` on a connection of the cell's own:
:mod:`cells.clusterstate`). In a cluster several nodes may save the cursor, so a save is a
compare-and-set: it moves the cursor only from the offset the poller read, and a poller that
finds it moved (another node polls now) learns it lost the race instead of overwriting it.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from cells.cellfile import ParamsOverlay, QueryTimeoutError, open_cell_db
from cells.clusterstate import (
    ROW_COLUMN,
    StateConnection,
    create_tables,
    overlay_ddl,
    read_overlay,
    save_overlay,
    state_table,
)

__all__ = ["CellDbState", "ClusterState", "ProxyState"]

SENT_PARTS_KEPT_S = 7 * 24 * 3600
"""How long a sent part is remembered (a redelivery comes within seconds of a crash)."""


class ProxyState(Protocol):
    """What the cell does with its state; every operation is bounded by ``timeout_ms`` and
    raises :class:`QueryTimeoutError` past it, or one of :attr:`errors`."""

    where: str
    """The store's name in messages (``cell.db``, ``the cluster database``)."""
    errors: tuple[type[Exception], ...]
    """What an operation raises when the database failed it."""

    async def read(self, timeout_ms: int) -> tuple[int, dict[str, Any]]:
        """The cursor's offset (0: none yet) and the params overlay."""
        ...

    async def save_offset(self, offset: int, timeout_ms: int, *, expected: int) -> bool:
        """Move the cursor from ``expected`` to ``offset``; False when another poller moved it
        since (only in a cluster; ``cell.db`` has one poller, whose save always holds)."""
        ...

    async def sent(self, message_id: str, timeout_ms: int) -> set[int]:
        """Parts of this message Telegram has already accepted."""
        ...

    async def mark_sent(self, message_id: str, part: int, timeout_ms: int) -> None: ...

    async def save_overlay(self, values: dict[str, Any], timeout_ms: int) -> None: ...

    async def close(self) -> None: ...


# -- cell.db -------------------------------------------------------------------------------------


class CellDbState:
    """``update_cursor(id=1, offset)``, ``sent_parts`` and the overlay in the cell's
    ``cell.db``, one writer at a time."""

    where = "cell.db"
    errors: tuple[type[Exception], ...] = (sqlite3.Error,)

    def __init__(self, folder: Path | None, query_timeout_ms: int) -> None:
        self.conn, _ = open_cell_db(folder, busy_timeout_ms=query_timeout_ms)
        self.lock = asyncio.Lock()
        self.guard = threading.Lock()
        """Held by the thread using the connection; close() takes it too."""
        try:
            self.conn.execute(
                "CREATE TABLE IF NOT EXISTS update_cursor "
                "(id INTEGER PRIMARY KEY CHECK (id = 1), offset INTEGER NOT NULL)"
            )
            self.conn.execute(
                "CREATE TABLE IF NOT EXISTS sent_parts (message_id TEXT NOT NULL, "
                "part INTEGER NOT NULL, at INTEGER NOT NULL, PRIMARY KEY (message_id, part))"
            )
            self.conn.execute(
                "DELETE FROM sent_parts WHERE at < ?", (int(time.time()) - SENT_PARTS_KEPT_S,)
            )
            self.params = ParamsOverlay(self.conn, "proxy_params")
        except sqlite3.Error:
            self.conn.close()
            raise

    def offset(self) -> int:
        row = self.conn.execute("SELECT offset FROM update_cursor WHERE id = 1").fetchone()
        return int(row[0]) if row else 0

    def overlay(self) -> dict[str, Any]:
        return self.params.read()

    async def _call(self, work: Callable[[], None], timeout_ms: int) -> None:
        def run() -> None:
            with self.guard:
                self.conn.execute(f"PRAGMA busy_timeout = {int(timeout_ms)}")
                work()

        async with self.lock:
            try:
                await asyncio.to_thread(run)
            except sqlite3.OperationalError as exc:
                text = str(exc).lower()
                if "locked" in text or "busy" in text:
                    raise QueryTimeoutError(
                        f"cell.db stayed locked for query_timeout_ms ({timeout_ms} ms)"
                    ) from exc
                raise

    async def read(self, timeout_ms: int) -> tuple[int, dict[str, Any]]:
        found: list[tuple[int, dict[str, Any]]] = []
        await self._call(lambda: found.append((self.offset(), self.overlay())), timeout_ms)
        return found[0]

    async def save_offset(self, offset: int, timeout_ms: int, *, expected: int) -> bool:
        def work() -> None:
            self.conn.execute(
                "INSERT INTO update_cursor (id, offset) VALUES (1, ?) "
                "ON CONFLICT (id) DO UPDATE SET offset = excluded.offset",
                (offset,),
            )

        await self._call(work, timeout_ms)
        return True

    async def sent(self, message_id: str, timeout_ms: int) -> set[int]:
        parts: set[int] = set()

        def work() -> None:
            rows = self.conn.execute(
                "SELECT part FROM sent_parts WHERE message_id = ?", (message_id,)
            ).fetchall()
            parts.update(int(r[0]) for r in rows)

        await self._call(work, timeout_ms)
        return parts

    async def mark_sent(self, message_id: str, part: int, timeout_ms: int) -> None:
        def work() -> None:
            self.conn.execute(
                "INSERT OR IGNORE INTO sent_parts (message_id, part, at) VALUES (?, ?, ?)",
                (message_id, part, int(time.time())),
            )

        await self._call(work, timeout_ms)

    async def save_overlay(self, values: dict[str, Any], timeout_ms: int) -> None:
        await self._call(lambda: self.params.save(values), timeout_ms)

    async def close(self) -> None:
        async with self.lock:
            # A cancelled _call releases ``lock`` while its thread still runs: wait for it.
            with self.guard:
                self.conn.close()


# -- the cluster database --------------------------------------------------------------------


class ClusterState:
    """The same tables in the cluster's database, shared by every node. ``offset`` is a
    reserved word there, hence the quotes. :meth:`open` makes the tables (once, whichever node
    is first) before anything else runs."""

    where = "the cluster database"

    def __init__(self, dsn: str, cell_path: str) -> None:
        self.db = StateConnection(dsn)
        self.errors = self.db.errors
        self.cell_path = cell_path
        self.cursor = state_table(cell_path, "update_cursor")
        self.parts = state_table(cell_path, "sent_parts")
        self.params = state_table(cell_path, "proxy_params")

    def open_now(self, timeout_ms: int) -> tuple[int, dict[str, Any]]:
        """Make the tables where they are missing, forget old sent parts, and :meth:`read`;
        in the calling thread (a cell being built)."""
        return self.db.call(self._open, timeout_ms)

    async def open(self, timeout_ms: int) -> tuple[int, dict[str, Any]]:
        """:meth:`open_now`, off the event loop."""
        return await self.db.run(self._open, timeout_ms)

    def _open(self, conn: Any) -> tuple[int, dict[str, Any]]:
        create_tables(
            conn,
            self.cell_path,
            [
                f"CREATE TABLE IF NOT EXISTS {self.cursor} ({ROW_COLUMN}, "
                'id INTEGER PRIMARY KEY CHECK (id = 1), "offset" BIGINT NOT NULL)',
                f"CREATE TABLE IF NOT EXISTS {self.parts} ({ROW_COLUMN}, "
                "message_id TEXT NOT NULL, part INTEGER NOT NULL, at BIGINT NOT NULL, "
                "PRIMARY KEY (message_id, part))",
                overlay_ddl(self.params),
            ],
            first=self.cursor,
        )
        conn.execute(
            f'INSERT INTO {self.cursor} (id, "offset") VALUES (1, 0) ON CONFLICT (id) DO NOTHING'
        )
        conn.execute(
            f"DELETE FROM {self.parts} WHERE at < %s",
            (int(time.time()) - SENT_PARTS_KEPT_S,),
        )
        return self._read(conn)

    def _read(self, conn: Any) -> tuple[int, dict[str, Any]]:
        row = conn.execute(f'SELECT "offset" FROM {self.cursor} WHERE id = 1').fetchone()
        return (int(row[0]) if row else 0), read_overlay(conn, self.params)

    async def read(self, timeout_ms: int) -> tuple[int, dict[str, Any]]:
        return await self.db.run(self._read, timeout_ms)

    async def save_offset(self, offset: int, timeout_ms: int, *, expected: int) -> bool:
        def work(conn: Any) -> bool:
            cur = conn.execute(
                f'UPDATE {self.cursor} SET "offset" = %s WHERE id = 1 AND "offset" = %s',
                (offset, expected),
            )
            return bool(cur.rowcount == 1)

        return await self.db.run(work, timeout_ms)

    async def sent(self, message_id: str, timeout_ms: int) -> set[int]:
        def work(conn: Any) -> set[int]:
            rows = conn.execute(
                f"SELECT part FROM {self.parts} WHERE message_id = %s", (message_id,)
            ).fetchall()
            return {int(r[0]) for r in rows}

        return await self.db.run(work, timeout_ms)

    async def mark_sent(self, message_id: str, part: int, timeout_ms: int) -> None:
        def work(conn: Any) -> None:
            conn.execute(
                f"INSERT INTO {self.parts} (message_id, part, at) VALUES (%s, %s, %s) "
                "ON CONFLICT (message_id, part) DO NOTHING",
                (message_id, part, int(time.time())),
            )

        await self.db.run(work, timeout_ms)

    async def save_overlay(self, values: dict[str, Any], timeout_ms: int) -> None:
        await self.db.run(lambda conn: save_overlay(conn, self.params, values), timeout_ms)

    async def close(self) -> None:
        await self.db.close()
