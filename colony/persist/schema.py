"""``colony.db``: tables, pragmas, and the version check.

Dead letters and the message log are API: their columns follow meclaw's (``dead_letters`` adds
``detail``, a human-readable reason). ``seq`` columns keep insertion order. ``journal`` holds
every message sitting in (or being handled from) a cell mailbox under at-least-once delivery;
``ingress_keys`` remembers the idempotency keys of messages that entered the colony, so the
same outside event is taken in once. Both tables are additive: older files gain them on open.
"""

from __future__ import annotations

import sqlite3

SCHEMA_VERSION = "1"

PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=NORMAL",
    "PRAGMA busy_timeout=30000",
    "PRAGMA foreign_keys=ON",
)

DDL = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS registry (
    path TEXT PRIMARY KEY,
    cell_id TEXT NOT NULL,
    cell_type TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS message_log (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL,
    trace_id TEXT NOT NULL,
    parent_message_id TEXT,
    correlation_id TEXT,
    ttl INTEGER NOT NULL,
    from_path TEXT NOT NULL,
    to_path TEXT NOT NULL,
    reply_to TEXT,
    headers TEXT NOT NULL,
    body_kind TEXT NOT NULL,
    body_payload TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS message_log_trace ON message_log(trace_id);
CREATE INDEX IF NOT EXISTS message_log_parent ON message_log(parent_message_id);
CREATE INDEX IF NOT EXISTS message_log_to ON message_log(to_path);
CREATE INDEX IF NOT EXISTS message_log_created ON message_log(created_at);
CREATE INDEX IF NOT EXISTS message_log_id ON message_log(id);
CREATE TABLE IF NOT EXISTS dead_letters (
    id INTEGER PRIMARY KEY,
    sender_path TEXT NOT NULL,
    original_target TEXT NOT NULL,
    resolved_target TEXT NOT NULL,
    error_code TEXT NOT NULL,
    trace_id TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    message_json TEXT NOT NULL,
    detail TEXT
);
CREATE INDEX IF NOT EXISTS dead_letters_created ON dead_letters(created_at);
CREATE INDEX IF NOT EXISTS dead_letters_code ON dead_letters(error_code);
CREATE TABLE IF NOT EXISTS journal (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL,
    cell TEXT NOT NULL,
    sender TEXT NOT NULL,
    envelope TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS journal_id ON journal(id);
CREATE TABLE IF NOT EXISTS ingress_keys (
    key TEXT PRIMARY KEY,
    trace_id TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
"""


class SchemaError(Exception):
    """``colony.db`` was written by a newer or foreign schema."""


def connect(path: str, *, readonly: bool = False) -> sqlite3.Connection:
    """A connection with the colony's pragmas; read-only connections never create the file."""
    if readonly:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout=30000")
        return conn
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    for pragma in PRAGMAS:
        conn.execute(pragma)
    return conn


def migrate(conn: sqlite3.Connection) -> None:
    """Create the tables if needed and check the version."""
    conn.executescript(DDL)
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is None:
        conn.execute("INSERT INTO meta(key, value) VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
    elif row[0] != SCHEMA_VERSION:
        raise SchemaError(
            f"colony.db has schema_version {row[0]}; this daemon reads {SCHEMA_VERSION}"
        )
