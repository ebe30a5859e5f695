"""The ``mcp`` cell's ``cell.db``: the tools of the last discovery and the runtime params
overlay. Every operation is bounded by ``query_timeout_ms`` (:class:`QueryTimeoutError`)."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from cells.cellfile import ParamsOverlay, bounded, open_cell_db
from colony.envelope import JsonObject

__all__ = ["ToolCache"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS mcp_tools (
    name TEXT PRIMARY KEY,
    tool TEXT NOT NULL,
    discovered_at INTEGER NOT NULL
)
"""


class ToolCache:
    def __init__(self, folder: Path | None) -> None:
        self.conn, _ = open_cell_db(folder)
        try:
            self.conn.execute(SCHEMA)
            self.overlay = ParamsOverlay(self.conn, "mcp_params")
        except sqlite3.Error:
            self.conn.close()
            raise

    def overlay_values(self) -> dict[str, Any]:
        return self.overlay.read()

    def save_overlay(self, update: dict[str, Any], timeout_ms: int) -> None:
        with bounded(self.conn, timeout_ms):
            self.overlay.save(update)

    def replace(self, tools: list[JsonObject], timeout_ms: int) -> None:
        """The cache becomes ``tools`` (in one transaction: all of them or the old list)."""
        now = int(time.time())
        rows = [(t["name"], json.dumps(t, ensure_ascii=True), now) for t in tools]
        with bounded(self.conn, timeout_ms):
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                self.conn.execute("DELETE FROM mcp_tools")
                self.conn.executemany(
                    "INSERT OR REPLACE INTO mcp_tools (name, tool, discovered_at) VALUES (?, ?, ?)",
                    rows,
                )
            except BaseException:
                with contextlib.suppress(sqlite3.Error):  # an interrupt rolled it back already
                    self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")

    def tools(self, timeout_ms: int) -> list[JsonObject]:
        with bounded(self.conn, timeout_ms):
            rows = self.conn.execute("SELECT tool FROM mcp_tools ORDER BY name").fetchall()
        return [json.loads(text) for (text,) in rows]

    def close(self) -> None:
        self.conn.close()
