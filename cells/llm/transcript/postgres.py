"""The PostgreSQL store: one table, ``llm_transcript``, so any number of daemons on one database
can serve any turn (the colony cluster's database, or any other).

The table is created when missing, in the first schema of the connection's ``search_path``.
Its name cannot meet a store cell's tables, which all begin with ``/`` (``/<cell path>:<table>``).
One row per conversation: ``turn`` (the compare-and-set field, as the Redis hash keeps it beside
the record), ``record`` (the JSON text) and ``expires_at`` on the server's clock, so daemons on
several machines agree on what has expired.

The compare-and-set is one short READ COMMITTED transaction. ``SELECT … FOR UPDATE`` locks the
conversation's row, so a concurrent writer waits and then sees the winner's turn; a create that
finds no row inserts with ``ON CONFLICT DO NOTHING``, so a concurrent creator's row turns it into
a lost race. The outcomes are the Redis script's: written, stale (409) or gone (404).

One connection per store (per llm cell), opened on first use, its transactions serialised by a
lock: an operation is a few round trips next to a model call of seconds, and a pool would be one
more dependency (``psycopg_pool``) and one more session per replica for nothing. A connection
the server dropped (a restart, ``pg_terminate_backend``, an idle timeout) is replaced on the next
operation, which is retried once on the new connection when nothing of it can have been
committed; a commit whose answer was lost is never retried: the turn may be stored, and a retry
would read its own write as a lost race.

Expired rows are read as absent (reads never extend the expiry; every write sets it) and swept
by a write at most every :attr:`PostgresStore.sweep_every_s`, a batch at a time, skipping rows
another writer holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from cells.llm.transcript.base import Record, StoreUnavailableError, WriteOutcome

if TYPE_CHECKING:
    from psycopg import AsyncConnection

TABLE = "llm_transcript"

_DDL = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (conversation text PRIMARY KEY, turn integer NOT NULL,"
    " record text NOT NULL, expires_at timestamptz NOT NULL)",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_expires_at ON {TABLE} (expires_at)",
)
_DDL_LOCK = 0x6C6C6D5F7478
"""An advisory lock key: two daemons creating the table at once would otherwise race on the
catalog (``CREATE TABLE IF NOT EXISTS`` is not atomic against itself)."""

_READ = f"SELECT record FROM {TABLE} WHERE conversation = %s AND expires_at > now()"
_LOCK = f"SELECT turn, expires_at > now() FROM {TABLE} WHERE conversation = %s FOR UPDATE"
_EXPIRES = "now() + make_interval(secs => %s)"
_INSERT = (
    f"INSERT INTO {TABLE} (conversation, turn, record, expires_at) VALUES (%s, %s, %s, {_EXPIRES})"
    " ON CONFLICT (conversation) DO NOTHING"
)
_UPDATE = (
    f"UPDATE {TABLE} SET turn = %s, record = %s, expires_at = {_EXPIRES} WHERE conversation = %s"
)
_DELETE = f"DELETE FROM {TABLE} WHERE conversation = %s"
_SWEEP = (
    f"DELETE FROM {TABLE} WHERE conversation IN (SELECT conversation FROM {TABLE}"
    " WHERE expires_at <= now() LIMIT %s FOR UPDATE SKIP LOCKED)"
)
SWEEP_BATCH = 500

CONNECT_TIMEOUT_S = 5
"""Unless the DSN sets ``connect_timeout``: a server that does not answer is a 503, not a hang."""
APPLICATION_NAME = "meclaw-llm-transcript"
"""Unless the DSN (or ``PGAPPNAME``) names one: how the sessions show in ``pg_stat_activity``."""

T = TypeVar("T")


def _unavailable(detail: str) -> StoreUnavailableError:
    return StoreUnavailableError(f"LLM transcript store unreachable - postgres: {detail}")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


class _Attempt:
    """How far one operation got: a failure after ``committing`` may have been committed."""

    committing = False


class PostgresStore:
    name = "postgres"

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        """Empty: no DSN was configured; every operation says so (and ``--validate`` does
        before anything starts)."""
        self.sweep_every_s = 60.0
        self._conn: AsyncConnection[Any] | None = None
        self._lock = asyncio.Lock()
        self._swept_at: float | None = None

    # -- the interface ------------------------------------------------------------------

    async def read(self, conversation: str) -> Record | None:
        async def read(conn: AsyncConnection[Any], attempt: _Attempt) -> str | None:
            cursor = await conn.execute(_READ, (conversation,))
            row = await cursor.fetchone()
            return None if row is None else str(row[0])

        text = await self._run(read)
        return Record.from_json(text) if text is not None else None

    async def write(
        self, conversation: str, expected_turn: int, record: Record | None, expire_s: int
    ) -> WriteOutcome:
        delete = record is None or expire_s <= 0

        async def cas(conn: AsyncConnection[Any], attempt: _Attempt) -> WriteOutcome:
            async with conn.transaction():
                cursor = await conn.execute(_LOCK, (conversation,))
                row = await cursor.fetchone()
                live = row is not None and bool(row[1])
                if expected_turn == 0:
                    if live:
                        return WriteOutcome.STALE
                elif not live:
                    return WriteOutcome.GONE
                elif row is not None and row[0] != expected_turn:
                    return WriteOutcome.STALE
                outcome = WriteOutcome.WRITTEN
                if delete:
                    if row is not None:
                        await conn.execute(_DELETE, (conversation,))
                elif row is not None:
                    assert record is not None
                    await conn.execute(
                        _UPDATE, (record.turn, record.to_json(), expire_s, conversation)
                    )
                else:
                    assert record is not None
                    cursor = await conn.execute(
                        _INSERT, (conversation, record.turn, record.to_json(), expire_s)
                    )
                    if cursor.rowcount == 0:  # another writer created it since our SELECT
                        outcome = WriteOutcome.STALE
                attempt.committing = True
            return outcome

        outcome = await self._run(cas)
        await self._sweep()
        return outcome

    async def close(self) -> None:
        async with self._lock:
            await self._drop()

    # -- the connection -----------------------------------------------------------------

    async def _run(self, op: Callable[[AsyncConnection[Any], _Attempt], Awaitable[T]]) -> T:
        """``op`` on the store's connection, retried once on a new one when the old one had
        died and nothing of ``op`` can have been committed."""
        import psycopg

        async with self._lock:
            while True:
                reused = self._conn is not None
                conn = await self._connection()
                attempt = _Attempt()
                try:
                    return await op(conn, attempt)
                except psycopg.Error as exc:
                    if not conn.broken and not conn.closed:
                        raise _unavailable(_one_line(exc)) from None
                    await self._drop()
                    if not reused or attempt.committing:
                        raise _unavailable(_one_line(exc)) from None

    async def _connection(self) -> AsyncConnection[Any]:
        if self._conn is not None:
            return self._conn
        if not self.dsn:
            raise _unavailable(
                'no DSN: set params.transcript.postgres.dsn (e.g. "${COLONY_PG_DSN}") or '
                "LLM_TRANSCRIPT_PG_DSN in the daemon's environment"
            )
        try:
            import psycopg
            from psycopg.conninfo import conninfo_to_dict
        except ImportError:  # pragma: no cover - the cluster extra is not installed
            raise _unavailable(
                "the psycopg package is missing; install the 'cluster' extra"
            ) from None
        try:
            given = conninfo_to_dict(self.dsn)
        except psycopg.Error:
            # The parser's message quotes the DSN, which may hold a password.
            raise _unavailable(
                "params.transcript.postgres.dsn is not a PostgreSQL connection string "
                "(postgresql://user@host:5432/db or 'host=… dbname=…')"
            ) from None
        options: dict[str, Any] = {}
        if "connect_timeout" not in given:
            options["connect_timeout"] = CONNECT_TIMEOUT_S
        if "application_name" not in given and "PGAPPNAME" not in os.environ:
            options["application_name"] = APPLICATION_NAME
        try:
            conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True, **options)
        except psycopg.Error as exc:
            raise _unavailable(_one_line(exc)) from None
        try:
            await conn.set_isolation_level(psycopg.IsolationLevel.READ_COMMITTED)
            cursor = await conn.execute("SELECT to_regclass(%s) IS NULL", (TABLE,))
            row = await cursor.fetchone()
            if row is not None and row[0]:
                # Only when missing: CREATE … IF NOT EXISTS needs the CREATE privilege even
                # when the table is there, and a DSN may rightly lack it.
                async with conn.transaction():
                    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK,))
                    for statement in _DDL:
                        await conn.execute(statement)
        except psycopg.Error as exc:
            await conn.close()
            raise _unavailable(_one_line(exc)) from None
        self._conn = conn
        return conn

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            # Closing a dead connection may fail; it is gone either way.
            with contextlib.suppress(Exception):
                await conn.close()

    async def _sweep(self) -> None:
        """Delete a batch of expired rows, at most every ``sweep_every_s``. Best effort: the
        write it follows has already been answered, so a failure here only waits for the next
        sweep (and a connection it found dead is replaced by the next operation)."""
        now = time.monotonic()
        if self._swept_at is not None and now - self._swept_at < self.sweep_every_s:
            return
        self._swept_at = now
        import psycopg

        async with self._lock:
            conn = self._conn
            if conn is None:
                return
            try:
                await conn.execute(_SWEEP, (SWEEP_BATCH,))
            except psycopg.Error:
                if conn.broken or conn.closed:
                    await self._drop()
