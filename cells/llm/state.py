"""An llm cell's ``cell.db``: the system slots, the last input, and the params overlay."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from cells.cellfile import ParamsOverlay, open_cell_db
from cells.llm.system import JsonObject, SystemWrite
from cells.text import dumps_sorted
from colony.config import reading

_DDL = """
CREATE TABLE IF NOT EXISTS system (slot_path TEXT PRIMARY KEY, value TEXT NOT NULL,
                                   updated_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS last_input (id INTEGER PRIMARY KEY CHECK (id = 1),
                                       message_json TEXT NOT NULL, received_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS native (call_key TEXT PRIMARY KEY, provider TEXT NOT NULL,
                                   value TEXT NOT NULL, updated_at INTEGER NOT NULL);
INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', '1');
"""


class SystemSeedError(Exception):
    """``seed/system.jsonl`` is malformed; the message names the line."""


def read_system_seed(file: Path) -> dict[str, JsonObject]:
    """``{"schema": {...}}`` then ``{"slot_path": "identity", "value": {"text": "…"}}`` lines."""
    out: dict[str, JsonObject] = {}
    header = False
    try:
        lines = list(reading.jsonl(file))  # a regular file, size-capped, each line checked
    except reading.ReadProblem as problem:
        raise SystemSeedError(problem.message) from None
    for number, doc in lines:
        if not header:
            if not isinstance(doc, dict) or "schema" not in doc:
                raise SystemSeedError(
                    f'line {number}: the first line must be {{"schema": {{...}}}}'
                )
            header = True
            continue
        path, value = (
            (doc.get("slot_path"), doc.get("value")) if isinstance(doc, dict) else (None, None)
        )
        if not isinstance(path, str) or not path or not isinstance(value, dict):
            raise SystemSeedError(
                f'line {number}: expected {{"slot_path": "...", "value": {{"text": ...}}}}'
            )
        if "text" not in value or not isinstance(value["text"], str):
            raise SystemSeedError(
                f"line {number}: value needs a text string (text_id is not allowed)"
            )
        if any(isinstance(v, dict | list) for v in value.values()):
            raise SystemSeedError(f"line {number}: value must be a flat leaf")
        out[path] = value
    return out


class LlmState:
    """One connection, owned by the cell's single task."""

    def __init__(self, folder: Path | None, state: Path | None = None) -> None:
        """``folder``: the cell's folder in the tree (its seed); ``state``: where its
        ``cell.db`` is (``folder`` when None)."""
        self.conn, fresh = open_cell_db(folder if state is None else state)
        self.conn.executescript(_DDL)
        self.params = ParamsOverlay(self.conn, "params")
        if fresh and folder is not None:
            seed = folder / "seed" / "system.jsonl"
            if seed.is_file():
                now = int(time.time())
                rows = [(p, dumps_sorted(v), now) for p, v in read_system_seed(seed).items()]
                self.conn.execute("BEGIN")
                self.conn.executemany("INSERT OR REPLACE INTO system VALUES (?, ?, ?)", rows)
                self.conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()

    def slots(self) -> dict[str, JsonObject]:
        return {
            p: json.loads(v) for p, v in self.conn.execute("SELECT slot_path, value FROM system")
        }

    def preview(self, write: SystemWrite) -> dict[str, JsonObject]:
        """The slots as they would be after ``write``, without storing anything: a loop turn
        that is refused must leave the cell's system prompt as it found it."""
        slots = self.slots()
        for path in write.replaces:
            if path == "":
                slots.clear()
            else:
                for key in [k for k in slots if k == path or k.startswith(path + ".")]:
                    del slots[key]
        slots.update(write.leaves)
        return slots

    def write(self, write: SystemWrite, messages: Any) -> None:
        """The system leaves and the last input, in one transaction."""
        now = int(time.time())
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            for path in write.replaces:
                if path == "":
                    conn.execute("DELETE FROM system")
                else:
                    conn.execute(
                        "DELETE FROM system WHERE slot_path = ? OR substr(slot_path, 1, ?) = ?",
                        (path, len(path) + 1, path + "."),
                    )
            conn.executemany(
                "INSERT INTO system(slot_path, value, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT(slot_path) DO UPDATE SET value = excluded.value, "
                "updated_at = excluded.updated_at",
                [(p, dumps_sorted(v), now) for p, v in write.leaves.items()],
            )
            if messages is not None:
                conn.execute(
                    "INSERT OR REPLACE INTO last_input(id, message_json, received_at) "
                    "VALUES (1, ?, ?)",
                    (dumps_sorted(messages), now),
                )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def keep_native(self, provider: str, calls: list[str], value: Any) -> None:
        """Provider blocks UBF cannot hold, kept under the call ids of the turn that made them."""
        self.conn.execute(
            "INSERT OR REPLACE INTO native(call_key, provider, value, updated_at) "
            "VALUES (?, ?, ?, ?)",
            (
                _call_key(calls),
                provider,
                json.dumps(value, separators=(",", ":"), ensure_ascii=False),
                int(time.time()),
            ),
        )

    def native(self, provider: str, calls: tuple[str, ...]) -> Any:
        row = self.conn.execute(
            "SELECT value FROM native WHERE call_key = ? AND provider = ?",
            (_call_key(calls), provider),
        ).fetchone()
        return json.loads(row[0]) if row else None

    def overlay(self) -> dict[str, Any]:
        return self.params.read()

    def save_overlay(self, update: dict[str, Any]) -> None:
        self.params.save(update)


def _call_key(calls: list[str] | tuple[str, ...]) -> str:
    return "\x1f".join(calls)
