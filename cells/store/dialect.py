"""The SQL a store speaks, per database: every difference between SQLite and PostgreSQL is here.

A store answers the same operations with the same guards, error codes and replies on either
database; what differs is how a statement is spelt, what a column can hold and how the driver
reports a failure. :func:`dialect_of` gives the dialect a
:class:`~colony.celltables.CellTables` names (its ``dialect``); the store's other modules run
their SQL only through it. On SQLite it is, byte for byte, the SQL the store always ran.

On PostgreSQL (a cluster's database; docs/cells/store.md, "On PostgreSQL"):

* **Names.** A table is named like on SQLite (``"<cell path>:<table>"``, an index
  ``"<cell path>:<table>:by:<columns>"``), through :func:`pg_identifier`: PostgreSQL cuts an
  identifier past 63 bytes, so a longer name becomes a readable start and a hash. Each table
  and index a store makes carries its full name as its ``COMMENT``, which is how a store finds
  its tables (those ``create_table`` made) and counts its indexes again.
* **Write order.** A hidden identity column, ``"~row"`` (no store column can be named so), does
  what SQLite's rowid does: it breaks every tie of a select, so rows come in write order.
* **Types.** ``text`` and ``json`` columns are ``text COLLATE "C"`` (byte order, as SQLite's
  BINARY; JSON stays the exact text written), ``int`` columns are ``bigint``.
* **Values** are converted as SQLite's column affinity converts them (a number into a text
  column is stored as its text, a numeric text into an int column as its number), so the same
  calls find the same rows. What PostgreSQL cannot hold is refused as :class:`ValueMismatchError`
  (``type_mismatch``), never changed silently: a fraction or a non-numeric text in an int
  column (SQLite keeps it as it came), and a text holding a NUL character.
* **A failed statement** aborts a PostgreSQL transaction, so each write statement runs in a
  savepoint: its failure is a reply, the receipt after it still commits, and the colony's
  transaction goes on.
* **The query timeout** is ``statement_timeout``, set for one select in a transaction (or a
  savepoint) that is then rolled back; SQLite interrupts through its progress handler.
* **NULLs** sort first ascending and last descending, as on SQLite; a ``distinct`` select keeps
  each distinct row where it first appears, as SQLite's table scan gives it.
* **Schema changes** (creating the tables, ``create_table``, an index) take an advisory lock
  per store: several daemons opening one store at once would otherwise race in the catalog.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from decimal import Decimal
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar

from cells.cellfile import QueryTimeoutError, bounded
from cells.text import dumps_sorted
from colony.celltables import quoted, storage_failure

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "POSTGRES_NAME_BYTES",
    "ROW",
    "PostgresDialect",
    "SqliteDialect",
    "StoreDialect",
    "ValueMismatchError",
    "ValueRefused",
    "bind",
    "dialect_of",
    "pg_identifier",
    "sqlite_number",
    "sqlite_real_text",
]

Connection = Any
"""``sqlite3.Connection`` or ``psycopg.Connection``, as the dialect says."""

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
TEXTUAL = frozenset({"text", "json"})
"""Column kinds stored as text (SQLite's TEXT affinity)."""


def bind(value: Any) -> Any:
    """A JSON value as an SQL parameter: bools as 1/0, objects and arrays as JSON text."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, dict | list):
        return dumps_sorted(value)
    return value


class ValueMismatchError(Exception):
    """A value the database cannot hold where the call puts it (``type_mismatch``)."""


class ValueRefused:
    """A value planned for a statement that the database cannot take; running the statement
    raises :class:`ValueMismatchError` with ``why`` (planning never fails for a value: a malformed
    call or an unknown name is reported first, as on SQLite, where the driver finds it)."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why


class StoreDialect(ABC):
    """What a store needs of its database. :class:`SqliteDialect` and
    :class:`PostgresDialect` are the two."""

    name: str
    mark: str
    """The placeholder of one bound value."""
    types: ClassVar[Mapping[str, str]]
    """A column kind (``text``, ``int``, ``json``) as the database's column type."""
    errors: tuple[type[Exception], ...]
    """What the driver raises for SQL that failed."""
    migrates_cell_db: bool
    """Whether an old ``cell.db`` beside the store is moved into these tables."""

    # -- names and SQL text (pure) ---------------------------------------------------------

    @abstractmethod
    def table(self, prefix: str, table: str) -> str:
        """The store table ``table`` as an SQL identifier (quoted)."""
        ...

    @abstractmethod
    def value(self, kind: Any, column: str | None, value: Any, *, stored: bool) -> Any:
        """A JSON value as the parameter for ``column`` of ``kind`` (None: no column, a
        limit): ``stored`` into it, or compared with it."""
        ...

    @abstractmethod
    def select(
        self,
        name: str,
        columns: Sequence[str],
        where: str,
        order: Sequence[tuple[str, str]],
        *,
        distinct: bool,
        table_columns: Mapping[str, str],
        limit: bool,
    ) -> str:
        """A select of ``columns`` (checked names) from the table ``name`` (quoted), with
        ``where`` (a clause or ""), ``order`` (``(column, "asc" | "desc")``), in write order
        for every tie; ``limit``: ends with a placeholder for the limit."""
        ...

    # -- running statements ----------------------------------------------------------------

    @abstractmethod
    def execute(self, conn: Connection, sql: str, values: Sequence[Any]) -> Any:
        """Run one planned statement; its cursor."""
        ...

    @abstractmethod
    def write(self, conn: Connection, sql: str, values: Sequence[Any]) -> int:
        """Run one planned write inside the current transaction; the rows it changed. A
        failure leaves the transaction as it was before the statement."""
        ...

    @abstractmethod
    def executemany(self, conn: Connection, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one statement once per row (seeds, params)."""
        ...

    @abstractmethod
    def bounded(self, conn: Connection, timeout_ms: int | None) -> Any:
        """A context in which statements past ``timeout_ms`` raise
        :class:`~cells.cellfile.QueryTimeoutError` (None: never)."""
        ...

    @abstractmethod
    def in_transaction(self, conn: Connection) -> bool: ...

    @abstractmethod
    def error_code(self, exc: Exception) -> str:
        """The reply's ``error_code`` for SQL that failed (one of :attr:`errors`)."""
        ...

    def error_text(self, exc: Exception) -> str:
        """The reply's text for SQL that failed: the database's one-line message."""
        return str(exc)

    @abstractmethod
    def read_failed_storage(self, exc: BaseException) -> bool:
        """A read that failed for the storage, not the query: raised, not answered."""
        ...

    # -- the store's tables ----------------------------------------------------------------

    @abstractmethod
    def lock(self, conn: Connection, prefix: str) -> None:
        """Hold the store's schema for the rest of the transaction (other daemons wait)."""
        ...

    @abstractmethod
    def tables_of(self, conn: Connection, prefix: str) -> list[str]:
        """The names (prefix removed) of the store's tables, sorted."""
        ...

    @abstractmethod
    def columns_of(self, conn: Connection, prefix: str, table: str) -> list[tuple[str, str]]:
        """``(column, kind)`` of a store table, in order (none: no such table)."""
        ...

    @abstractmethod
    def create(self, conn: Connection, prefix: str, table: str, columns: str) -> None:
        """Create a table of the store from its column definitions, unless it exists."""
        ...

    @abstractmethod
    def ensure_table(
        self, conn: Connection, prefix: str, table: str, columns: Mapping[str, str]
    ) -> None:
        """Create the table with ``columns`` (``{column: kind}``), or add those it lacks."""
        ...

    @abstractmethod
    def create_table(
        self, conn: Connection, prefix: str, table: str, columns: Mapping[str, str]
    ) -> None:
        """:meth:`ensure_table` for the ``create_table`` operation, on a store that is open."""
        ...

    @abstractmethod
    def make_index(
        self, conn: Connection, prefix: str, table: str, keys: Sequence[str], most: int
    ) -> None:
        """Index ``keys`` of the table unless it already has that index or ``most`` of its
        own indexes."""
        ...


def _listed(columns: Sequence[str]) -> str:
    """Checked column names, quoted and comma-separated (an identifier holds no quote)."""
    return '"' + '", "'.join(columns) + '"'


# -- SQLite -----------------------------------------------------------------------------------


def sqlite_tables(conn: sqlite3.Connection, prefix: str) -> list[str]:
    """The names (prefix removed) of the tables whose name starts with ``prefix``."""
    rows = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND substr(name, 1, ?) = ? "
        "AND name NOT LIKE 'sqlite!_%' ESCAPE '!' ORDER BY name",
        (len(prefix), prefix),
    ).fetchall()
    return [str(name)[len(prefix) :] for (name,) in rows]


def sqlite_columns(conn: sqlite3.Connection, name: str) -> list[tuple[str, str]]:
    """``(column, declared type)`` of the table ``name`` (full name), in order."""
    return [(str(r[1]), str(r[2])) for r in conn.execute(f"PRAGMA table_info({quoted(name)})")]


_SQLITE_KIND_BACK = {"INTEGER": "int", "TEXT": "text"}


def _sqlite_classify(exc: sqlite3.Error) -> str:
    text = str(exc).lower()
    if isinstance(exc, sqlite3.IntegrityError):
        return "constraint_violation"
    if "datatype mismatch" in text:
        return "type_mismatch"
    if "no such table" in text:
        return "unknown_table"
    if "has no column named" in text or "no such column" in text:
        return "unknown_column"
    return "sql_error"


def _sqlite_write_order(columns: Mapping[str, str]) -> str | None:
    """A name of the table's rowid that no column of it shadows (a column may be named
    ``rowid``), or None when all three are columns."""
    return next((name for name in ("rowid", "_rowid_", "oid") if name not in columns), None)


class SqliteDialect(StoreDialect):
    """SQLite: ``colony.db``, or a store's own ``cell.db``. Dynamic typing does the value
    conversions itself; a write is never interrupted inside ``colony.db``'s transaction."""

    name = "sqlite"
    mark = "?"
    types: ClassVar[Mapping[str, str]] = {"text": "TEXT", "int": "INTEGER", "json": "TEXT"}
    errors: tuple[type[Exception], ...] = (sqlite3.Error,)
    migrates_cell_db = True

    def table(self, prefix: str, table: str) -> str:
        return quoted(prefix + table)

    def value(self, kind: Any, column: str | None, value: Any, *, stored: bool) -> Any:
        return bind(value)

    def select(
        self,
        name: str,
        columns: Sequence[str],
        where: str,
        order: Sequence[tuple[str, str]],
        *,
        distinct: bool,
        table_columns: Mapping[str, str],
        limit: bool,
    ) -> str:
        # ``rowid`` breaks every tie, whatever index the store made; a distinct select (whose
        # rows have no one rowid) scans the table as it always did.
        sql = f"SELECT {'DISTINCT ' if distinct else ''}" + _listed(columns)
        sql += f" FROM {name} NOT INDEXED{where}" if distinct else f" FROM {name}{where}"
        terms = [f'"{column}" {direction.upper()}' for column, direction in order]
        written = _sqlite_write_order(table_columns)
        if not distinct and written is not None:
            terms.append(written)
        if terms:
            sql += " ORDER BY " + ", ".join(terms)
        if limit:
            sql += " LIMIT ?"
        return sql

    def execute(self, conn: sqlite3.Connection, sql: str, values: Sequence[Any]) -> Any:
        return conn.execute(sql, values)

    def write(self, conn: sqlite3.Connection, sql: str, values: Sequence[Any]) -> int:
        return conn.execute(sql, values).rowcount

    def executemany(
        self, conn: sqlite3.Connection, sql: str, rows: Sequence[Sequence[Any]]
    ) -> None:
        conn.executemany(sql, rows)

    def bounded(self, conn: sqlite3.Connection, timeout_ms: int | None) -> Any:
        return bounded(conn, timeout_ms)

    def in_transaction(self, conn: sqlite3.Connection) -> bool:
        return conn.in_transaction

    def error_code(self, exc: Exception) -> str:
        assert isinstance(exc, sqlite3.Error)
        return _sqlite_classify(exc)

    def read_failed_storage(self, exc: BaseException) -> bool:
        return False  # a local file: every read failure is answered, as it always was

    def lock(self, conn: sqlite3.Connection, prefix: str) -> None:
        return None  # one writer per file

    def tables_of(self, conn: sqlite3.Connection, prefix: str) -> list[str]:
        return sqlite_tables(conn, prefix)

    def columns_of(
        self, conn: sqlite3.Connection, prefix: str, table: str
    ) -> list[tuple[str, str]]:
        return [
            (column, _SQLITE_KIND_BACK.get(kind, "text"))
            for column, kind in sqlite_columns(conn, prefix + table)
        ]

    def create(self, conn: sqlite3.Connection, prefix: str, table: str, columns: str) -> None:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {self.table(prefix, table)} ({columns})")

    def ensure_table(
        self, conn: sqlite3.Connection, prefix: str, table: str, columns: Mapping[str, str]
    ) -> None:
        name = self.table(prefix, table)
        types = self.types
        definition = ", ".join(f'"{c}" {types[t]}' for c, t in sorted(columns.items()))
        conn.execute(f"CREATE TABLE IF NOT EXISTS {name} ({definition})")
        present = {column for column, _ in sqlite_columns(conn, prefix + table)}
        for column, kind in sorted(columns.items()):
            if column not in present:
                conn.execute(f'ALTER TABLE {name} ADD COLUMN "{column}" {types[kind]}')

    def create_table(
        self, conn: sqlite3.Connection, prefix: str, table: str, columns: Mapping[str, str]
    ) -> None:
        self.ensure_table(conn, prefix, table, columns)

    def make_index(
        self, conn: sqlite3.Connection, prefix: str, table: str, keys: Sequence[str], most: int
    ) -> None:
        name = f"{prefix}{table}:by:{','.join(keys)}"
        mine = f"{prefix}{table}:by:"
        made = (
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ? "
            "AND substr(name, 1, ?) = ?"
        )
        present = {row[0] for row in conn.execute(made, (prefix + table, len(mine), mine))}
        if name not in present and len(present) < most:
            create = (
                f"CREATE INDEX IF NOT EXISTS {quoted(name)} ON {self.table(prefix, table)} "
                f"({_listed(keys)})"
            )
            conn.execute(create).close()


# -- PostgreSQL -------------------------------------------------------------------------------

POSTGRES_NAME_BYTES = 63
"""PostgreSQL's longest identifier (NAMEDATALEN - 1); a longer one is cut, silently."""
_HASH_CHARS = 10
_HASHED = re.compile(rf"~[0-9a-f]{{{_HASH_CHARS}}}\Z")

ROW = '"~row"'
"""The hidden identity column that keeps write order (no store column can be named so)."""
_ROW_NAME = "~row"

_NUMERIC_TEXT = re.compile(
    r"[ \t\n\v\f\r]*([+-]?(?:[0-9]+(\.[0-9]*)?|(\.)[0-9]+)([eE][+-]?[0-9]+)?)[ \t\n\v\f\r]*"
)


def pg_identifier(name: str) -> str:
    """``name`` as PostgreSQL can keep it: itself when it fits 63 bytes of UTF-8, else a
    readable start and ``~`` and 10 hex digits of its SHA-256 (deterministic, unique but for a
    hash collision). A name holding ``%`` (psycopg's placeholder mark), a NUL or a character
    UTF-8 cannot encode is hashed too, with those characters shown as ``_``, and so are a name
    already ending like a hashed one (no two names meet) and the empty name (PostgreSQL
    refuses an empty identifier)."""
    try:
        raw = name.encode()
    except UnicodeEncodeError:
        raw = b""
    if (
        raw
        and len(raw) <= POSTGRES_NAME_BYTES
        and "%" not in name
        and "\x00" not in name
        and not _HASHED.search(name)
    ):
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_CHARS]
    shown = name.encode("utf-8", "replace").replace(b"%", b"_").replace(b"\x00", b"_")
    start = shown[: POSTGRES_NAME_BYTES - 1 - _HASH_CHARS].decode("utf-8", "ignore")
    return f"{start}~{digest}"


def sqlite_number(text: str) -> int | float | None:
    """What SQLite's INTEGER affinity makes of ``text``: an int when it is a well-formed
    integer or real literal with an integral value that fits 64 bits, a float for another
    well-formed literal, None (the text stays text) otherwise."""
    match = _NUMERIC_TEXT.fullmatch(text)
    if match is None:
        return None
    literal, fraction, dot, exponent = match.groups()
    if fraction is None and dot is None and exponent is None:
        number = int(literal)
        return number if INT64_MIN <= number <= INT64_MAX else float(number)
    real = float(literal)
    if real.is_integer() and INT64_MIN <= real < 2.0**63:
        return int(real)
    return real


def sqlite_real_text(value: float) -> str:
    """A float as SQLite stores it in a text column, asked of SQLite itself: its printf
    (``%!.15g``) rounds some numbers past 1e16 otherwise than a correctly rounded one would."""
    with _REAL_TEXT_LOCK:
        (text,) = _real_text_conn().execute("SELECT CAST(? AS TEXT)", (value,)).fetchone()
    return str(text)


_REAL_TEXT_LOCK = threading.Lock()


@cache
def _real_text_conn() -> sqlite3.Connection:
    return sqlite3.connect(":memory:", check_same_thread=False)


class PostgresDialect(StoreDialect):
    """PostgreSQL, through psycopg 3 (see the module docstring for every difference)."""

    name = "postgres"
    mark = "%s"
    types: ClassVar[Mapping[str, str]] = {
        "text": 'text COLLATE "C"',
        "int": "bigint",
        "json": 'text COLLATE "C"',
    }
    migrates_cell_db = False

    def __init__(self) -> None:
        try:
            import psycopg
        except ImportError:
            raise ImportError(
                "a store on PostgreSQL needs psycopg 3: pip install -e '.[cluster]'"
            ) from None
        self.errors = (psycopg.Error,)

    def table(self, prefix: str, table: str) -> str:
        return quoted(pg_identifier(prefix + table))

    def value(self, kind: Any, column: str | None, value: Any, *, stored: bool) -> Any:
        value = bind(value)
        if not isinstance(kind, str):
            kind = None  # no column to take the type of (planning against every name)
        where = f"column {column}" if column is not None else "limit"
        if isinstance(value, str):
            if "\x00" in value:
                return ValueRefused(
                    f"{where}: text holding a NUL character (\\u0000) cannot be kept on PostgreSQL"
                )
            if kind != "int":
                return value
            number = sqlite_number(value)
            if number is None:
                return ValueRefused(
                    f"{where}: {dumps_sorted(value)} is not a number; on PostgreSQL an int column "
                    "holds integers only"
                )
            value = number
        if isinstance(value, int):
            if not INT64_MIN <= value <= INT64_MAX:
                return ValueRefused(f"{where}: {value} does not fit a 64-bit integer")
            return str(value) if kind in TEXTUAL else value
        if isinstance(value, float):
            if kind in TEXTUAL:
                return sqlite_real_text(value)
            if kind == "int":
                if value.is_integer() and INT64_MIN <= value < 2.0**63:
                    return int(value)
                if stored:
                    return ValueRefused(
                        f"{where}: {dumps_sorted(value)} is not an integer; on PostgreSQL an "
                        "int column holds integers only"
                    )
                # Compared exactly, as SQLite compares an integer with a real (a float8 would
                # round the column's integers past 2**53 first).
                return Decimal(value)
        return value

    def select(
        self,
        name: str,
        columns: Sequence[str],
        where: str,
        order: Sequence[tuple[str, str]],
        *,
        distinct: bool,
        table_columns: Mapping[str, str],
        limit: bool,
    ) -> str:
        # SQLite sorts NULL before every value; PostgreSQL after, unless told.
        terms = [
            f'"{column}" {direction.upper()} NULLS {"FIRST" if direction == "asc" else "LAST"}'
            for column, direction in order
        ]
        terms.append(ROW)
        listed = _listed(columns)
        if not distinct:
            sql = f"SELECT {listed} FROM {name}{where} ORDER BY " + ", ".join(terms)
        else:
            # Each distinct row where it first appears (SQLite's scan), ordered by the call's
            # terms (taken from that first row), then by that appearance.
            inner = _listed(list(dict.fromkeys([*columns, *(c for c, _ in order)])))
            sql = (
                f"SELECT {listed} FROM (SELECT {inner}, {ROW}, row_number() OVER "
                f'(PARTITION BY {listed} ORDER BY {ROW}) AS "~n" FROM {name}{where}) AS "~d" '
                f'WHERE "~n" = 1 ORDER BY ' + ", ".join(terms)
            )
        if limit:
            sql += " LIMIT %s"
        return sql

    @staticmethod
    def _check(values: Sequence[Any]) -> None:
        for value in values:
            if type(value) is ValueRefused:
                raise ValueMismatchError(value.why)

    def execute(self, conn: psycopg.Connection[Any], sql: str, values: Sequence[Any]) -> Any:
        self._check(values)
        return conn.execute(sql, values)

    def write(self, conn: psycopg.Connection[Any], sql: str, values: Sequence[Any]) -> int:
        self._check(values)
        with conn.transaction():  # a savepoint: a failure must not abort the colony's
            return conn.execute(sql, values).rowcount

    def executemany(
        self, conn: psycopg.Connection[Any], sql: str, rows: Sequence[Sequence[Any]]
    ) -> None:
        for row in rows:
            self._check(row)
        with conn.cursor() as cursor:
            cursor.executemany(sql, rows)

    @contextmanager
    def bounded(self, conn: psycopg.Connection[Any], timeout_ms: int | None) -> Iterator[None]:
        """For reads only: what ran inside is rolled back (that is how the timeout goes)."""
        if not timeout_ms:
            yield
            return
        from psycopg import errors

        try:
            with conn.transaction(force_rollback=True):
                conn.execute("SELECT set_config('statement_timeout', %s, true)", (str(timeout_ms),))
                yield
        except errors.QueryCanceled:
            raise QueryTimeoutError(f"query exceeded query_timeout_ms ({timeout_ms} ms)") from None

    def in_transaction(self, conn: psycopg.Connection[Any]) -> bool:
        from psycopg.pq import TransactionStatus

        return conn.info.transaction_status == TransactionStatus.INTRANS

    def error_code(self, exc: Exception) -> str:
        import psycopg

        state = getattr(exc, "sqlstate", None)
        if isinstance(exc, psycopg.IntegrityError):
            return "constraint_violation"
        if state == "42P01":
            return "unknown_table"
        if state == "42703":
            return "unknown_column"
        if state in ("22P02", "22003", "22021", "22P05", "42804", "42883") or (
            state is None and isinstance(exc, psycopg.DataError)
        ):
            return "type_mismatch"
        return "sql_error"

    def error_text(self, exc: Exception) -> str:
        diag = getattr(exc, "diag", None)
        primary = diag.message_primary if diag is not None else None
        if primary:
            return str(primary)
        lines = str(exc).strip().splitlines()
        return lines[0] if lines else type(exc).__name__

    def read_failed_storage(self, exc: BaseException) -> bool:
        # A lost connection or a server going down: the cell's tables must reconnect.
        return storage_failure(exc)

    def lock(self, conn: psycopg.Connection[Any], prefix: str) -> None:
        digest = hashlib.sha256(b"colony store schema\x00" + prefix.encode("utf-8", "replace"))
        key = int.from_bytes(digest.digest()[:8], "big", signed=True)
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (key,))

    def tables_of(self, conn: psycopg.Connection[Any], prefix: str) -> list[str]:
        rows = conn.execute(
            "SELECT d.description FROM pg_class c JOIN pg_description d "
            "ON d.objoid = c.oid AND d.classoid = 'pg_class'::regclass AND d.objsubid = 0 "
            "WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p') "
            'AND starts_with(d.description, %s) ORDER BY d.description COLLATE "C"',
            (prefix,),
        ).fetchall()
        return [str(name)[len(prefix) :] for (name,) in rows]

    def columns_of(
        self, conn: psycopg.Connection[Any], prefix: str, table: str
    ) -> list[tuple[str, str]]:
        rows = conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped "
            "AND attname <> %s ORDER BY attnum",
            (self.table(prefix, table), _ROW_NAME),
        ).fetchall()
        return [(str(c), "int" if kind == "bigint" else "text") for c, kind in rows]

    def _exists(self, conn: psycopg.Connection[Any], name: str) -> bool:
        return conn.execute("SELECT to_regclass(%s)", (name,)).fetchone() != (None,)

    @staticmethod
    def _comment(conn: psycopg.Connection[Any], what: str, name: str, full: str) -> None:
        from psycopg import sql

        conn.execute(
            sql.SQL("COMMENT ON {} {} IS {}").format(
                sql.SQL(what), sql.SQL(name), sql.Literal(full)
            )
        )

    def create(self, conn: psycopg.Connection[Any], prefix: str, table: str, columns: str) -> None:
        self._create(conn, prefix, table, columns, "")

    def _create(
        self, conn: psycopg.Connection[Any], prefix: str, table: str, columns: str, row_key: str
    ) -> None:
        name = self.table(prefix, table)
        if self._exists(conn, name):
            return
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {name} "
            f"({ROW} bigint GENERATED ALWAYS AS IDENTITY{row_key}, {columns})"
        )
        self._comment(conn, "TABLE", name, prefix + table)

    def ensure_table(
        self, conn: psycopg.Connection[Any], prefix: str, table: str, columns: Mapping[str, str]
    ) -> None:
        types = self.types
        present = {column for column, _ in self.columns_of(conn, prefix, table)}
        if not present:
            definition = ", ".join(f'"{c}" {types[t]}' for c, t in sorted(columns.items()))
            # Keyed by "~row", as SQLite's table is by its rowid: a select in write order with
            # a limit reads the first rows, it does not sort the whole table.
            self._create(conn, prefix, table, definition, " PRIMARY KEY")
            return
        name = self.table(prefix, table)
        for column, kind in sorted(columns.items()):
            if column not in present:
                conn.execute(
                    f'ALTER TABLE {name} ADD COLUMN IF NOT EXISTS "{column}" {types[kind]}'
                )

    def create_table(
        self, conn: psycopg.Connection[Any], prefix: str, table: str, columns: Mapping[str, str]
    ) -> None:
        with conn.transaction():  # a savepoint, like a write
            self.lock(conn, prefix)
            self.ensure_table(conn, prefix, table, columns)

    def make_index(
        self,
        conn: psycopg.Connection[Any],
        prefix: str,
        table: str,
        keys: Sequence[str],
        most: int,
    ) -> None:
        full = f"{prefix}{table}:by:{','.join(keys)}"
        mine = f"{prefix}{table}:by:"
        self.lock(conn, prefix)
        present = {
            str(row[0])
            for row in conn.execute(
                "SELECT d.description FROM pg_index i JOIN pg_description d "
                "ON d.objoid = i.indexrelid AND d.classoid = 'pg_class'::regclass "
                "AND d.objsubid = 0 WHERE i.indrelid = to_regclass(%s) "
                "AND starts_with(d.description, %s)",
                (self.table(prefix, table), mine),
            )
        }
        if full not in present and len(present) < most:
            name = quoted(pg_identifier(full))
            conn.execute(
                f"CREATE INDEX IF NOT EXISTS {name} ON {self.table(prefix, table)} "
                f"({_listed(keys)})"
            )
            self._comment(conn, "INDEX", name, full)


SQLITE = SqliteDialect()


@cache
def dialect_of(name: str) -> StoreDialect:
    """The dialect a :class:`~colony.celltables.CellTables` names in its ``dialect``."""
    if name == "sqlite":
        return SQLITE
    if name == "postgres":
        return PostgresDialect()
    raise ValueError(f"no store dialect {name!r} (known: sqlite, postgres)")
