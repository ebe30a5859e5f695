"""``colony.db``: tables, pragmas, and the version check.

Dead letters and the message log are API: their columns follow meclaw's (``dead_letters`` adds
``detail``, a human-readable reason). ``seq`` columns keep insertion order. ``journal`` holds
every message sitting in (or being handled from) a cell mailbox under at-least-once delivery;
``ingress_keys`` remembers the idempotency keys of messages that entered the colony, so the
same outside event is taken in once. Both tables are additive: older files gain them on open.

``dead_letters`` gained columns the same way (added to older files on open): ``message_id``
(the stored envelope's id, so listing dead letters never reads a body), ``replayed_at`` and
``replayed_as`` (when a letter was re-driven, and as which message id). A daemon that predates
them leaves ``message_id`` NULL; readers then take it from the envelope. In a new file the body
(``message_json``) is the last column: SQLite reads a row's columns in order, so a column
stored after a 5 MB body costs a walk of its overflow pages (listing 100 such letters took
0.11 s with the body in the middle, 1 ms with it last); an older file keeps its order.
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
    detail TEXT,
    message_id TEXT,
    replayed_at INTEGER,
    replayed_as TEXT,
    message_json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS dead_letters_created ON dead_letters(created_at);
CREATE INDEX IF NOT EXISTS dead_letters_code ON dead_letters(error_code);
CREATE INDEX IF NOT EXISTS dead_letters_trace ON dead_letters(trace_id);
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


_DEAD_LETTER_COLUMNS = (
    ("message_id", "TEXT"),
    ("replayed_at", "INTEGER"),
    ("replayed_as", "TEXT"),
)

MESSAGE_ID_OF_ENVELOPE = (
    "CASE WHEN json_valid(message_json) THEN json_extract(message_json, '$.id') END"
)
"""SQL for the stored envelope's id (NULL for text SQLite cannot parse, e.g. a NaN a cell
emitted). It parses the whole body: only for rows whose ``message_id`` column is NULL."""


def dead_letter_columns(conn: sqlite3.Connection) -> set[str]:
    return {row[1] for row in conn.execute("PRAGMA table_info(dead_letters)")}


def _upgrade_dead_letters(conn: sqlite3.Connection) -> None:
    """Add the columns a file written before them lacks (additive, so an older daemon can
    still open the file) and fill ``message_id`` of the rows it holds (once)."""
    present = dead_letter_columns(conn)
    for name, kind in _DEAD_LETTER_COLUMNS:
        if name not in present:
            conn.execute(f"ALTER TABLE dead_letters ADD COLUMN {name} {kind}")
    if "message_id" not in present:
        conn.execute(
            f"UPDATE dead_letters SET message_id = {MESSAGE_ID_OF_ENVELOPE} "
            "WHERE message_id IS NULL"
        )


def migrate(conn: sqlite3.Connection) -> None:
    """Create the tables if needed and check the version."""
    conn.executescript(DDL)
    _upgrade_dead_letters(conn)
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is None:
        conn.execute("INSERT INTO meta(key, value) VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
    elif row[0] != SCHEMA_VERSION:
        raise SchemaError(
            f"colony.db has schema_version {row[0]}; this daemon reads {SCHEMA_VERSION}"
        )
