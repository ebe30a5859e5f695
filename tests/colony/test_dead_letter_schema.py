"""``dead_letters`` columns: a file written before them gains them on open, and readers cope
with a file no daemon has upgraded yet."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from colony.persist.db import ColonyDb
from colony.persist.records import claim_replay, read_dead_letter, read_dead_letters
from colony.persist.source import Source

OLD_TABLE = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta(key, value) VALUES ('schema_version', '1');
CREATE TABLE dead_letters (
    id INTEGER PRIMARY KEY, sender_path TEXT NOT NULL, original_target TEXT NOT NULL,
    resolved_target TEXT NOT NULL, error_code TEXT NOT NULL, trace_id TEXT NOT NULL,
    created_at INTEGER NOT NULL, message_json TEXT NOT NULL, detail TEXT
);
"""

ENVELOPE = {
    "id": "m-1",
    "trace_id": "t-1",
    "target": "/x",
    "ttl": 3,
    "headers": {"context": {}, "hop": {}},
    "body_payload": {"messages": []},
    "created_at": 7,
}


def old_file(tmp_path: Path) -> Path:
    path = tmp_path / "colony.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(OLD_TABLE)
        conn.execute(
            "INSERT INTO dead_letters(sender_path, original_target, resolved_target, error_code, "
            "trace_id, created_at, message_json, detail) VALUES ('/', '/x', '/x', "
            "'unresolved_path', 't-1', 7, ?, 'gone')",
            (json.dumps(ENVELOPE),),
        )
    return path


def test_an_older_colony_db_gains_the_dead_letter_columns_when_a_daemon_opens_it(
    tmp_path: Path,
) -> None:
    path = old_file(tmp_path)
    ColonyDb(path).close()
    with sqlite3.connect(path) as conn:
        columns = {row[1] for row in conn.execute("PRAGMA table_info(dead_letters)")}
        stored = conn.execute("SELECT message_id FROM dead_letters").fetchone()
    assert {"message_id", "replayed_at", "replayed_as"} <= columns
    assert stored == ("m-1",)  # filled from the envelope once
    assert claim_replay(Source.sqlite(path), 1, "m-2", force=False).granted
    [row] = read_dead_letters(Source.sqlite(path))
    assert (row.message_id, row.replayed_as, row.detail) == ("m-1", "m-2", "gone")


def test_a_colony_db_no_daemon_has_upgraded_is_still_readable(tmp_path: Path) -> None:
    path = old_file(tmp_path)
    [row] = read_dead_letters(Source.sqlite(path))
    assert (row.message_id, row.replayed_at) == ("m-1", None)
    letter = read_dead_letter(Source.sqlite(path), 1)
    assert letter is not None
    assert letter.message.target == "/x"
