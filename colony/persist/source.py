"""Where a colony's rows are read: its ``colony.db`` file or the cluster database.

The reads of the message log, the dead letters and the registry (:mod:`colony.persist.records`,
:mod:`colony.reads`) are written once, in SQLite's SQL with ``?`` placeholders, and run on
either engine through a :class:`Source`. A source opens a connection per call, as the reads
always did (a read needs no running colony and never shares the writer's connection), turns
``?`` into psycopg's ``%s`` for PostgreSQL, and its :class:`ReadDialect` holds the few expressions
the two engines spell differently. Which source a colony root reads is :func:`source_for_root`.

psycopg is imported only when a PostgreSQL source is used: without a ``cluster`` block the
``cluster`` extra need not be installed.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from colony.persist.schema import (
    MESSAGE_ID_OF_ENVELOPE,
    MESSAGE_LOG_COLUMNS,
    MESSAGE_LOG_SELECT,
    connect,
)

CONNECT_TIMEOUT_S = 10
"""How long a read waits for the cluster database to answer a connection (seconds)."""

_JSON_PATH = "pg_temp.colony_json_path"
_JSON_PATH_FUNCTION = rf"""
CREATE FUNCTION {_JSON_PATH}(doc text, path text[]) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN doc::json #>> path;
EXCEPTION WHEN others THEN
    BEGIN
        RETURN regexp_replace(
            doc, '\\u([dD][89a-fA-F][0-9a-fA-F]{{2}}|0000)', '\\ufffd', 'g'
        )::json #>> path;
    EXCEPTION WHEN others THEN
        RETURN NULL;
    END;
END $$
"""
"""SQLite's ``CASE WHEN json_valid(doc) THEN json_extract(doc, path) END`` for PostgreSQL 15,
which has no ``json_valid`` (``IS JSON`` is 16's) and whose cast fails the whole read on one
bad row. The columns hold JSON text written by :func:`colony.persist.escape.storable_json`;
two of its escapes SQLite reads and PostgreSQL refuses (a lone surrogate's ``\\udXXX``, and
``\\u0000`` where text is extracted): retried with U+FFFD in their place, so the same rows
match on both engines; text neither engine reads as JSON (``NaN``) is NULL. A temporary
function, defined on the connection that first needs it: the cluster schema stays the
writer's."""


@dataclass(frozen=True, slots=True)
class ReadDialect:
    """The SQL the two engines spell differently; everything else is written once."""

    name: str
    message_id_of_envelope: str
    """A dead letter's message id read from its stored envelope, for rows written without
    the ``message_id`` column (NULL when the envelope is not JSON)."""
    hop_error_code: str
    """A message-log row's ``hop.error_code`` (NULL when absent or the headers are not JSON)."""
    columns: str
    """The column names of a table (one ``?``: the table's name)."""
    collate: str
    """Appended to a text column so it compares by code point, as SQLite compares text. The
    cluster database's collation may be a language's (``en_US``: ``/a/b`` sorts between
    ``/ab`` and ``/ac``), which would break prefix ranges, cursors and the order of a list."""

    def text(self, column: str) -> str:
        """``column`` compared and ordered by code point."""
        return column + self.collate


SQLITE = ReadDialect(
    name="sqlite",
    message_id_of_envelope=MESSAGE_ID_OF_ENVELOPE,
    hop_error_code=(
        "CASE WHEN json_valid(headers) THEN json_extract(headers, '$.hop.error_code') END"
    ),
    columns="SELECT name FROM pragma_table_info(?)",
    collate="",
)

POSTGRES = ReadDialect(
    name="postgres",
    # The cluster schema had ``message_id`` from its first version and every writer fills it:
    # there is no older row whose id only the envelope holds.
    message_id_of_envelope="NULL",
    # strpos first: the function's exception block costs a subtransaction per call, so only
    # the rows that can carry an error code pay it.
    hop_error_code=(
        f"CASE WHEN strpos(headers, 'error_code') > 0 "
        f"THEN {_JSON_PATH}(headers, '{{hop,error_code}}') END"
    ),
    columns=(
        "SELECT attname FROM pg_attribute "
        "WHERE attrelid = to_regclass(?) AND attnum > 0 AND NOT attisdropped"
    ),
    collate=' COLLATE "C"',
)


class ResultRows(Protocol):
    """What a read does with a statement's result (sqlite3's and psycopg's cursors both)."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Session(Protocol):
    """One connection to a source, for the length of one read or edit."""

    def execute(self, sql: str, args: Sequence[Any] = ()) -> ResultRows: ...

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...

    def transaction(self) -> AbstractContextManager[Any]:
        """The statements inside commit together or not at all."""
        ...


class _SqliteSession:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def execute(self, sql: str, args: Sequence[Any] = ()) -> ResultRows:
        return self._conn.execute(sql, tuple(args))

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self._conn.executemany(sql, rows)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self._conn.execute("BEGIN IMMEDIATE")  # the write lock now, not at the first write
        try:
            yield
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")


def postgres_sql(sql: str) -> str:
    """``sql`` with psycopg's placeholders: ``?`` becomes ``%s`` and a literal ``%`` is
    doubled. The SQL of the reads holds no ``?`` other than placeholders (none in a literal)."""
    return sql.replace("%", "%%").replace("?", "%s")


class _PgSession:
    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._json_path = False

    def _prepare(self, sql: str) -> str:
        if not self._json_path and _JSON_PATH in sql:
            self._conn.execute(_JSON_PATH_FUNCTION)
            self._json_path = True
        return postgres_sql(sql)

    def execute(self, sql: str, args: Sequence[Any] = ()) -> ResultRows:
        cursor: ResultRows = self._conn.execute(self._prepare(sql), tuple(args))
        return cursor

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self._conn.cursor().executemany(self._prepare(sql), rows)

    def transaction(self) -> AbstractContextManager[Any]:
        # Row locks make a guarded UPDATE safe on its own; the transaction makes several
        # statements one, as BEGIN IMMEDIATE does on SQLite.
        transaction: AbstractContextManager[Any] = self._conn.transaction()
        return transaction


@dataclass(frozen=True, slots=True)
class Source:
    """Where a colony's rows are: a ``colony.db`` file (``path``) or the cluster database
    (``dsn``), exactly one of them. Hashable: rows remember the source they came from."""

    path: Path | None = None
    dsn: str | None = field(default=None, repr=False)  # it may hold a password

    def __post_init__(self) -> None:
        if (self.path is None) == (self.dsn is None):
            raise ValueError("a Source is a colony.db path or a cluster DSN, exactly one")

    @classmethod
    def sqlite(cls, path: Path) -> Source:
        return cls(path=path)

    @classmethod
    def postgres(cls, dsn: str) -> Source:
        return cls(dsn=dsn)

    @property
    def dialect(self) -> ReadDialect:
        return SQLITE if self.dsn is None else POSTGRES

    @property
    def errors(self) -> tuple[type[Exception], ...]:
        """What a read of this source raises when the database cannot be read (missing,
        locked past the busy timeout, unreachable, damaged): ``except source.errors``."""
        if self.dsn is None:
            return (sqlite3.Error,)
        import psycopg

        return (psycopg.Error,)

    def exists(self) -> bool:
        """Whether there is anything to read: the file exists (a read-only read never
        creates it). A server always exists; an outage is an error of the read."""
        return self.path.exists() if self.path is not None else True

    @contextmanager
    def connect(self, *, write: bool = False) -> Iterator[Session]:
        """A connection for one read (``write``: or edit), closed afterwards. Read-only on
        SQLite (it never creates the file); autocommit on PostgreSQL, where only
        :meth:`Session.transaction` groups statements."""
        if self.path is not None:
            conn = connect(str(self.path), readonly=not write)
            try:
                yield _SqliteSession(conn)
            finally:
                conn.close()
            return
        import psycopg

        assert self.dsn is not None
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as pg:
            yield _PgSession(pg)

    def log_select(self) -> str:
        """The message-log columns to select (:data:`MESSAGE_LOG_COLUMNS`): a ``colony.db`` an
        older daemon wrote and no daemon has upgraded yet lacks the newest; they read as NULL."""
        if self.path is None or not self.path.exists():
            return MESSAGE_LOG_SELECT
        with self.connect() as session:
            have = {r[1] for r in session.execute("PRAGMA table_info(message_log)").fetchall()}
        if not have or have.issuperset(MESSAGE_LOG_COLUMNS):
            return MESSAGE_LOG_SELECT
        return ", ".join(c if c in have else f"NULL AS {c}" for c in MESSAGE_LOG_COLUMNS)

    def select(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        """The rows of one statement, on a connection of its own."""
        with self.connect() as session:
            return session.execute(sql, args).fetchall()

    def __str__(self) -> str:
        """The file, or the server and database (never the DSN: it may hold a password)."""
        if self.path is not None:
            return str(self.path)
        return f"the cluster database ({_server(self.dsn or '')})"


def _server(dsn: str) -> str:
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts = conninfo_to_dict(dsn)
    except Exception:  # a DSN psycopg cannot parse: its connect names the problem
        return "unparsable DSN"
    host = parts.get("host") or "localhost"
    port = parts.get("port") or "5432"
    return f"{host}:{port}/{parts.get('dbname') or parts.get('user') or ''}"


def source_for_root(root: Path, dsn: str | None, state_dir: Path | None = None) -> Source:
    """The source the colony at ``root`` is read from: the cluster database when its
    ``colony.json`` has a ``cluster`` block (``dsn``, its variables substituted), else its
    ``colony.db`` (in ``state_dir``, the daemon's ``--state-dir``, when given:
    :mod:`colony.statedir`)."""
    if dsn is not None:
        return Source.postgres(dsn)
    from colony.statedir import StateDir

    return Source.sqlite(StateDir.of(root, state_dir).colony_db)
