"""Tables a cell keeps in the colony's own database: the seam between a cell and the SQL.

A ``store`` cell's write, its receipt and the hand-off that answers it must commit as one
step. SQLite cannot commit across two files atomically in WAL mode, so a cell that wants that
keeps its tables in ``colony.db`` and runs its SQL through :class:`CellTables`: a write is a
function run on the colony's writer connection, inside the writer's current transaction (the
one that will carry the reply's hand-off); a read is a function run on a read connection, on
the event loop, that sees every write the cell made before.

The work functions take a DB-API connection: ``sqlite3.Connection`` where
:attr:`CellTables.dialect` is ``"sqlite"``, a ``psycopg.Connection`` (psycopg 3, sync) where it
is ``"postgres"`` (a cluster's database). A cell picks its SQL by that attribute; the store
keeps every difference in :mod:`cells.store.dialect`.

Each cell's tables are namespaced by its path: the table ``thread`` of the cell ``/memory`` is
``"/memory:thread"`` in ``colony.db`` (:func:`table_name`). No kernel table starts with ``/``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from colony.envelope import Envelope

T = TypeVar("T")

Work = Callable[[Any], T]
"""SQL run against the cell's tables (on the connection :attr:`CellTables.dialect` names);
returns what the cell needs of it."""


_STORAGE_CODES = frozenset(
    {
        5,  # SQLITE_BUSY
        6,  # SQLITE_LOCKED
        7,  # SQLITE_NOMEM
        8,  # SQLITE_READONLY
        10,  # SQLITE_IOERR
        11,  # SQLITE_CORRUPT
        13,  # SQLITE_FULL
        14,  # SQLITE_CANTOPEN
        15,  # SQLITE_PROTOCOL
        26,  # SQLITE_NOTADB
    }
)
"""SQLite primary result codes that blame the storage, not the data (the one list: the
colony.db writer's ``storage_trouble`` builds on :func:`storage_failure`)."""


_PG_STORAGE_CLASSES = frozenset({"08", "53", "58", "XX"})
"""PostgreSQL SQLSTATE classes that blame the server or the connection: connection exception,
insufficient resources (disk full, out of memory, too many connections), system error,
internal error (data or index corrupted)."""
_PG_STORAGE_STATES = frozenset({"40001", "40P01", "40003", "55P03"})
"""Serialization failure, deadlock, statement completion unknown, a lock not had within
``lock_timeout`` (SQLite's ``SQLITE_BUSY``): the transaction lost a race or its outcome is
unknown, not its data; run again, it goes through."""


def storage_failure(exc: BaseException) -> bool:
    """True when a work's SQL failed for the storage, not for what it asked: the work must let
    it through (the writer keeps the transaction and retries it), not answer it as a result."""
    if isinstance(exc, OSError):
        return True
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in _STORAGE_CODES
    return _pg_storage_failure(exc)


def _pg_storage_failure(exc: BaseException) -> bool:
    """The PostgreSQL half of :func:`storage_failure`. A psycopg error with no SQLSTATE was
    raised by the client (the connection is lost or closed) and blames the storage when it is
    an ``OperationalError``; one with an SQLSTATE blames it by class, plus the admin and crash
    shutdowns (``57P``) but not ``57014``, a cancelled statement (a query timeout), and none of
    the data's classes (integrity, syntax, data exceptions). psycopg is not imported here: an
    error of its can only exist once something else has imported it."""
    psycopg = sys.modules.get("psycopg")
    if psycopg is None or not isinstance(exc, psycopg.Error):
        return False
    state = exc.sqlstate
    if state is None:
        return isinstance(exc, psycopg.OperationalError)
    return (
        state[:2] in _PG_STORAGE_CLASSES or state.startswith("57P") or state in _PG_STORAGE_STATES
    )


def table_name(cell_path: str, table: str) -> str:
    """The name of the cell's ``table`` in the colony's database (unquoted)."""
    return f"{cell_path}:{table}"


def quoted(name: str) -> str:
    """``name`` as an SQL identifier (double quotes, inner ones doubled)."""
    return '"' + name.replace('"', '""') + '"'


class CellTables(Protocol):
    """One cell's tables and the two ways to reach them."""

    prefix: str
    """Put before a table's name to make its (logical) name in the database."""

    dialect: str
    """The SQL the work functions speak, and the connection they get: ``"sqlite"``
    (``sqlite3.Connection``) or ``"postgres"`` (``psycopg.Connection``, psycopg 3, sync). On
    ``"postgres"`` a write's connection is inside a transaction the caller commits (a work
    never commits nor rolls back; it may use savepoints), and a read's connection is in
    autocommit or ends its transaction after each work."""

    async def write(
        self,
        work: Work[T],
        *,
        ack: tuple[str, str] | None = None,
        handling: Envelope | None = None,
    ) -> T:
        """Run ``work`` on the writer's connection, in its current transaction, and return its
        result as soon as it ran (before the commit). ``ack`` is ``(message id, cell path)`` of
        the message being handled: the writer keeps the transaction open, briefly, for the
        hand-off that acknowledges it, so the write and its reply commit together. Nothing
        delivered after that hand-off can see the write uncommitted. A ``work`` that raises a
        storage error is retried with the rest of its transaction; any other exception is
        raised here, and nothing of that ``work`` is kept. ``handling`` is the message being
        handled: in a cluster, the write is refused (``UnitFenced``) once this node no longer
        owns that message's conversation, like the hand-off it belongs with."""
        ...

    async def committed(self) -> None:
        """Return once every write made so far is committed."""
        ...

    async def read(self, work: Work[T]) -> T:
        """Run ``work`` on a read connection, after every write made so far is committed."""
        ...

    async def close(self) -> None:
        """Release the read connection."""
        ...


class TablesHost(Protocol):
    """What the colony hands a cell spec: its database, for cells that keep tables there."""

    def tables(self, cell_path: str) -> CellTables:
        """The tables of the cell at ``cell_path`` (nothing is opened until first use)."""
        ...
