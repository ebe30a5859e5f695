"""``colony.db``: tables, pragmas, and the version check.

Dead letters and the message log are API: their columns follow meclaw's (``dead_letters`` adds
``detail``, a human-readable reason). ``seq`` columns keep insertion order. ``journal`` holds
every message sitting in (or being handled from) a cell mailbox under at-least-once delivery;
``ingress_keys`` remembers the idempotency keys of messages that entered the colony, so the
same outside event is taken in once. Both tables are additive: older files gain them on open,
as they gain any index added since (``ingress_keys_created``, which retention searches by).

``dead_letters`` gained columns the same way (added to older files on open): ``message_id``
(the stored envelope's id, so listing dead letters never reads a body), ``replayed_at`` and
``replayed_as`` (when a letter was re-driven, and as which message id). A daemon that predates
them leaves ``message_id`` NULL; readers then take it from the envelope. In a new file the body
(``message_json``) is the last column: SQLite reads a row's columns in order, so a column
stored after a 5 MB body costs a walk of its overflow pages (listing 100 such letters took
0.11 s with the body in the middle, 1 ms with it last); an older file keeps its order.

``handling`` (one row per message a cell finished handling: when, how long, how it ended, an
LLM call's model, latency and tokens) is a view over a staged and an indexed table in the same
way, moved together with the message log: its rows arrive scattered across traces, and an
indexed table written per hand-off cost a tool-loop turn 8% (measured). Its rows are ordered
by ``started_ms``.

The message log is the view ``message_log`` over two tables with the same columns: the writer
appends each unit's rows to ``message_log_recent``, which has no index, and moves them in bulk
into ``message_log_indexed`` (five indexes) once a thousand or so have gathered (see
:mod:`colony.persist.rows`). A row keeps its ``seq`` when it moves, so the view reads as one
table in insertion order. Why: an index on a column whose values arrive scattered (``to_path``)
or interleaved (the ids) dirties its own pages in every transaction, and each dirty page is a
4 KB frame written to the WAL; with the rows written straight into the indexed table a
hand-off of six small rows wrote about 21 frames, staged about 6 (the move amortised). A row of
more than a couple of kilobytes is written straight into ``message_log_indexed``: moving it
would cost more than its index pages. The rows are still committed with the unit that made
them, so a crash keeps or loses both together. Schema
version 1 had ``message_log`` as an indexed table: opening such a file renames it to
``message_log_indexed`` (indexes and rows kept, no copy) and adds the rest; a daemon of
version 1 refuses a version 2 file instead of writing into the view.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

from colony.errors import ColonyError

SCHEMA_VERSION = "2"
UPGRADABLE = frozenset({"1"})
"""Versions this daemon opens and brings to :data:`SCHEMA_VERSION` (see :func:`migrate`)."""
READABLE = UPGRADABLE | {SCHEMA_VERSION}
"""Versions this daemon opens at all."""

WAL_LIMIT_BYTES = 64_000_000
"""What ``colony.db-wal`` is cut back to once a checkpoint has copied it all (SQLite's
``journal_size_limit``): a burst of writes grows it, and without a limit it stays that size."""

PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=NORMAL",
    "PRAGMA busy_timeout=30000",
    "PRAGMA foreign_keys=ON",
    # Debian's SQLite (the Docker image's) zeroes every page a delete frees, and writes each
    # to the WAL: pruning 50 MB of bodies wrote 50 MB. FAST zeroes only what costs no write.
    "PRAGMA secure_delete=FAST",
    f"PRAGMA journal_size_limit={WAL_LIMIT_BYTES}",
)

_DDL = """
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
CREATE TABLE IF NOT EXISTS message_log_indexed (
{message_log_columns});
CREATE INDEX IF NOT EXISTS message_log_trace ON message_log_indexed(trace_id);
CREATE INDEX IF NOT EXISTS message_log_parent ON message_log_indexed(parent_message_id);
CREATE INDEX IF NOT EXISTS message_log_to ON message_log_indexed(to_path);
CREATE INDEX IF NOT EXISTS message_log_created ON message_log_indexed(created_at);
CREATE INDEX IF NOT EXISTS message_log_id ON message_log_indexed(id);
CREATE INDEX IF NOT EXISTS message_log_at ON message_log_indexed(at_ms);
CREATE TABLE IF NOT EXISTS message_log_recent (
{message_log_columns});
CREATE VIEW IF NOT EXISTS message_log AS
    SELECT {message_log_names} FROM message_log_indexed
    UNION ALL
    SELECT {message_log_names} FROM message_log_recent;
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
    at_ms INTEGER,
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
CREATE INDEX IF NOT EXISTS journal_cell ON journal(cell, seq);
CREATE TABLE IF NOT EXISTS ingress_keys (
    key TEXT PRIMARY KEY,
    trace_id TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS ingress_keys_created ON ingress_keys(created_at);
CREATE TABLE IF NOT EXISTS handling_indexed (
{handling_columns});
CREATE INDEX IF NOT EXISTS handling_trace ON handling_indexed(trace_id);
CREATE INDEX IF NOT EXISTS handling_started ON handling_indexed(started_ms);
CREATE TABLE IF NOT EXISTS handling_recent (
{handling_columns});
CREATE VIEW IF NOT EXISTS handling AS
    SELECT {handling_names} FROM handling_indexed
    UNION ALL
    SELECT {handling_names} FROM handling_recent;
"""
_MESSAGE_LOG_TABLE = """\
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
    created_at INTEGER NOT NULL,
    at_ms INTEGER,
    edges TEXT
"""
"""The columns of both message-log tables (the staged one and the indexed one), written once."""


class ColonyDbError(ColonyError):
    """``colony.db`` cannot be used: the message names the file, what is wrong and the fix."""

    code = "colony_db_unusable"


class SchemaError(ColonyDbError):
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
    ("at_ms", "INTEGER"),
)

MESSAGE_LOG_COLUMNS = (
    "id",
    "trace_id",
    "parent_message_id",
    "correlation_id",
    "ttl",
    "from_path",
    "to_path",
    "reply_to",
    "headers",
    "body_kind",
    "body_payload",
    "created_at",
    "at_ms",
    "edges",
)
"""A ``message_log`` row's columns in the one order every insert and select uses. ``at_ms``
(when routing took the decision, epoch milliseconds) and ``edges`` (at a hive transit, the ids
of the out-edges that fired, comma-separated) are ours, not meclaw's: NULL in older rows."""

MESSAGE_LOG_SELECT = ", ".join(MESSAGE_LOG_COLUMNS)

HANDLING_COLUMNS = (
    "message_id",
    "trace_id",
    "cell",
    "cell_type",
    "started_ms",
    "duration_ms",
    "outcome",
    "error",
    "model",
    "llm_latency_ms",
    "tokens_prompt",
    "tokens_completion",
)
"""A ``handling`` row (one message a cell finished handling: how long, how it ended, and for
an LLM call its model, latency and tokens) in the one order every insert and select uses."""

HANDLING_SELECT = ", ".join(HANDLING_COLUMNS)

_HANDLING_TABLE = """\
    message_id TEXT NOT NULL,
    trace_id TEXT NOT NULL,
    cell TEXT NOT NULL,
    cell_type TEXT NOT NULL,
    started_ms INTEGER NOT NULL,
    duration_ms INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    error TEXT,
    model TEXT,
    llm_latency_ms INTEGER,
    tokens_prompt INTEGER,
    tokens_completion INTEGER
"""

DDL = _DDL.format(
    message_log_columns=_MESSAGE_LOG_TABLE,
    message_log_names="seq, " + MESSAGE_LOG_SELECT,
    handling_columns=_HANDLING_TABLE,
    handling_names=HANDLING_SELECT,
)
"""Every table, index and view of ``colony.db`` (schema version :data:`SCHEMA_VERSION`)."""

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


_LOG_ADDED = (("at_ms", "INTEGER"), ("edges", "TEXT"))
"""Message-log columns newer than the file may be (added in both tables, the view remade)."""


def _upgrade_message_log(conn: sqlite3.Connection) -> None:
    """Give an older file's message-log tables the columns added since (additive: an older
    daemon names its columns and keeps writing), and drop the view so the DDL remakes it
    with them."""
    remake = False
    for table in ("message_log_indexed", "message_log_recent"):
        present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        if not present:
            continue
        for name, kind in _LOG_ADDED:
            if name not in present:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")
                remake = True
    if remake:
        conn.execute("DROP VIEW IF EXISTS message_log")


def _statements(script: str) -> list[str]:
    return [part.strip() for part in script.split(";") if part.strip()]


def _kind(conn: sqlite3.Connection, name: str) -> str | None:
    row = conn.execute("SELECT type FROM sqlite_master WHERE name = ?", (name,)).fetchone()
    return None if row is None else str(row[0])


def migrate(conn: sqlite3.Connection) -> None:
    """Create the tables if needed, check the version and bring an older file up to date, in
    one transaction."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        has_meta = _kind(conn, "meta") == "table"
        row = (
            conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if has_meta
            else None
        )
        if row is not None and row[0] not in READABLE:
            raise SchemaError(
                f"colony.db has schema_version {row[0]}; this daemon reads {SCHEMA_VERSION}"
            )
        if _kind(conn, "message_log") == "table":  # version 1: the log was one table
            conn.execute("ALTER TABLE message_log RENAME TO message_log_indexed")
        _upgrade_message_log(conn)
        for statement in _statements(DDL):
            conn.execute(statement)
        _upgrade_dead_letters(conn)
        conn.execute(
            "INSERT INTO meta(key, value) VALUES ('schema_version', ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (SCHEMA_VERSION,),
        )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


_MAGIC = b"SQLite format 3\x00"
_ASIDE = (
    "move it aside (e.g. mv colony.db colony.db.bad; the daemon then starts with an empty "
    "one, without the journal, message log and dead letters it held) or restore it from a "
    "backup"
)


def probe(path: Path) -> str | None:
    """What is wrong with the ``colony.db`` at ``path``, or None when it is absent or usable.

    Read-only and cheap (the header, the schema and the ``meta`` version; no full integrity
    scan), so ``--validate`` may call it and boot calls it before opening the file for
    writing. The answer says what is wrong and how to fix it; the caller names the file."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc}); check its permissions"
    if not stat.S_ISREG(info.st_mode):
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        return f"is {kind}, not a SQLite database; {_ASIDE}"
    if info.st_size == 0:
        return None  # SQLite takes an empty file as an empty database
    try:
        with open(path, "rb") as file:
            header = file.read(100)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc}); check its permissions"
    if len(header) < 100 or not header.startswith(_MAGIC):
        return f"is not a SQLite database (it does not start with the SQLite header); {_ASIDE}"
    page = int.from_bytes(header[16:18], "big")
    page = 65536 if page == 1 else page
    if page < 512 or page & (page - 1):
        return f"has a damaged header (page size {page}); {_ASIDE}"
    pages = int.from_bytes(header[28:32], "big")
    valid = header[24:28] == header[92:96]
    wal = path.with_name(path.name + "-wal")
    wal_holds_pages = wal.exists() and wal.stat().st_size > 0
    if info.st_size % page or (valid and pages * page > info.st_size and not wal_holds_pages):
        return (
            f"is truncated ({info.st_size} bytes; its header says {pages * page}): it was cut "
            f"short by a copy, a full disk or a crash of the disk; {_ASIDE}"
        )
    # Without a -wal file (no daemon on it, or a clean stop), open it immutable: a plain
    # read-only open of a WAL database would create -wal and -shm, and a probe writes nothing.
    mode = "mode=ro" if wal.exists() else "immutable=1"
    try:
        conn = sqlite3.connect(f"file:{path}?{mode}", uri=True)
    except sqlite3.Error as exc:
        return f"cannot be opened ({exc}); {_ASIDE}"
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not tables:
            return None
        if "meta" not in tables:
            return (
                "is a SQLite database of something else (it has no meta table); point --root "
                f"at the colony's folder, or {_ASIDE}"
            )
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.Error as exc:
        return f"is damaged ({exc}); {_ASIDE}"
    finally:
        conn.close()
    if row is not None and row[0] not in READABLE:
        return (
            f"has schema_version {row[0]}, and this daemon reads {SCHEMA_VERSION} (and "
            f"upgrades {', '.join(sorted(UPGRADABLE))}): run the meclaw that wrote it, or "
            f"{_ASIDE}"
        )
    return None


BACKSTOP_PAGES = 8000
"""The writer's own checkpoint threshold (WAL pages): a :class:`colony.persist.checkpoint.
Checkpointer` keeps the WAL well below it, so the writer checkpoints only if that one stops."""


def open_for_writing(path: Path) -> sqlite3.Connection:
    """The writer's connection, tables created; :class:`ColonyDbError` (file, problem, fix)
    instead of a traceback when the file is not a usable ``colony.db``."""
    problem = probe(path)
    if problem is None:
        try:
            conn = connect(str(path))
        except sqlite3.Error as exc:
            problem = f"cannot be opened for writing ({exc}); check the folder's permissions"
        else:
            try:
                migrate(conn)
                conn.execute(f"PRAGMA wal_autocheckpoint={BACKSTOP_PAGES}")
                return conn
            except sqlite3.Error as exc:
                conn.close()
                problem = f"is damaged ({exc}); {_ASIDE}"
            except SchemaError as exc:
                conn.close()
                problem = f"{exc}; {_ASIDE}"
    raise ColonyDbError(f"{path}: {problem}")


def identity(path: Path) -> tuple[int, int] | None:
    """``(device, inode)`` of the file at ``path`` now, or None when there is none."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino)
