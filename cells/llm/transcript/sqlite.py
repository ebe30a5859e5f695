"""The SQLite store: a table in the llm cell's own ``cell.db``. Survives restarts; one host.
The compare-and-set is one conditional statement, so concurrent writers through WAL are safe."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from cells.cellfile import connect
from cells.llm.transcript.base import Record, StoreUnavailableError, WriteOutcome

_DDL = """
CREATE TABLE IF NOT EXISTS transcript (conversation TEXT PRIMARY KEY, turn INTEGER NOT NULL,
                                       record TEXT NOT NULL, expires_at REAL NOT NULL)
"""


class SqliteStore:
    name = "sqlite"

    def __init__(self, path: Path | str) -> None:
        try:
            # FULL, not the cell file's NORMAL: a turn's compare-and-set is answered to a client
            # outside the colony, whose next call names that turn; a power cut must not take
            # the write back.
            self._conn = connect(path, synchronous="FULL")
            self._conn.execute(_DDL)
        except sqlite3.Error as exc:
            raise StoreUnavailableError(
                f"LLM transcript store unreachable - sqlite: {exc}"
            ) from None

    async def read(self, conversation: str) -> Record | None:
        try:
            row = self._conn.execute(
                "SELECT record FROM transcript WHERE conversation = ? AND expires_at > ?",
                (conversation, time.time()),
            ).fetchone()
        except sqlite3.Error as exc:
            raise StoreUnavailableError(
                f"LLM transcript store unreachable - sqlite: {exc}"
            ) from None
        return Record.from_json(row[0]) if row else None

    async def write(
        self, conversation: str, expected_turn: int, record: Record | None, expire_s: int
    ) -> WriteOutcome:
        now = time.time()
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute(
                    "SELECT turn FROM transcript WHERE conversation = ? AND expires_at > ?",
                    (conversation, now),
                ).fetchone()
                if expected_turn == 0:
                    if row is not None:
                        return WriteOutcome.STALE
                elif row is None:
                    return WriteOutcome.GONE
                elif row[0] != expected_turn:
                    return WriteOutcome.STALE
                if record is None or expire_s <= 0:
                    conn.execute("DELETE FROM transcript WHERE conversation = ?", (conversation,))
                else:
                    conn.execute(
                        "INSERT OR REPLACE INTO transcript VALUES (?, ?, ?, ?)",
                        (conversation, record.turn, record.to_json(), now + expire_s),
                    )
                return WriteOutcome.WRITTEN
            finally:
                conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise StoreUnavailableError(
                f"LLM transcript store unreachable - sqlite: {exc}"
            ) from None

    async def close(self) -> None:
        self._conn.close()
