"""The ``store`` cell: typed SQL tables, kept in the colony's ``colony.db``.

Stateful, so the colony hands it one message at a time: that single writer is what turns a
guarded update (``set fired=1 where … and fired=0``) into a compare-and-set exactly one racer
wins.

In a colony the tables live in ``colony.db``, named ``"<cell path>:<table>"``
(:mod:`colony.celltables`). A write runs on the colony's writer thread inside its current
transaction, and the hand-off that answers it (the ack of the message that asked, the reply's
delivery) joins that transaction: the write, its receipt and the reply commit as one step,
group-committed with everything else. A read runs on the event loop on a read connection and
sees every write before it; ``query_timeout_ms`` interrupts a long one (a write inside the
colony's transaction is not interrupted: that would roll back other cells' hand-offs). A store
built without a colony keeps its own ``cell.db`` (:class:`cells.store.tables.OwnFile`); an old
``cell.db`` is moved into ``colony.db`` once.

The same store runs on a cluster's PostgreSQL when its tables say so
(:attr:`colony.celltables.CellTables.dialect`): every difference in the SQL, the types and the
errors is in :mod:`cells.store.dialect`, and this module runs its SQL only through it.

A reply is one ``tool_result`` turn on the call's id with hop ``{operation, rows_affected,
duration_ms}``. SQL failures are ordinary results carrying ``hop.error_code``; a malformed call
(``invalid_input``), a timeout (``query_timeout``) or a refused write (``write_denied``) also
carries ``finish_reason: "error"``.

Writes are idempotent under redelivery: each write commits together with a receipt (the
message id and the reply) in ``store_receipts``, and a message seen again — the journal
redelivers what was in flight at a crash — gets its recorded reply instead of a second row.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from cells import runtime_params
from cells.cellfile import CELL_DB, QueryTimeoutError
from cells.store.dialect import Connection, StoreDialect, ValueMismatchError, dialect_of
from cells.store.ops import (
    WRITES,
    ArgsError,
    Plan,
    Plans,
    UnknownNameError,
    call_text,
    parse_args,
    plan,
)
from cells.store.params import StoreParams, StoreSeedError, read_seed
from cells.store.tables import OldTable, OwnFile, copy_tables, read_cell_db, retire_cell_db
from cells.text import dumps_sorted
from cells.toolcall import tool_error, tool_result
from colony.cell import CellSpec, Emission
from colony.celltables import CellTables, quoted, storage_failure
from colony.crashpoints import crash_point
from colony.envelope import Envelope, JsonObject
from colony.paths import parent

_PARAMS_TABLE = "store_params"
_RECEIPTS_TABLE = "store_receipts"
_RECEIPTS_KEPT_S = 7 * 24 * 3600
"""Receipts older than this are dropped at open: a redelivery comes at the next boot."""
_INTERNAL = (_PARAMS_TABLE, _RECEIPTS_TABLE)
_MUTABLE_PARAMS = ("query_timeout_ms",)


def _read_back(value: Any) -> Any:
    if isinstance(value, bytes):
        return list(value)
    return value


def _rows_json(columns: list[str], rows: list[tuple[Any, ...]]) -> str:
    """A select's rows as sorted JSON objects. A row built by ``dict(zip(…))`` is a C call;
    the one value SQLite returns that JSON cannot hold is a BLOB (``bytes``), which makes the
    encoder raise: only then are the rows built again with each BLOB read back as its bytes."""
    try:
        return dumps_sorted([dict(zip(columns, row, strict=True)) for row in rows])
    except TypeError:
        return dumps_sorted(
            [
                {name: _read_back(value) for name, value in zip(columns, row, strict=True)}
                for row in rows
            ]
        )


def _inside(sender: str, scope: str) -> bool:
    if scope == "/":
        return True
    return sender == scope or sender.startswith(scope + "/")


async def open_store(spec: CellSpec) -> StoreCell:
    """A store cell with its tables ready (the cell type's factory)."""
    cell = StoreCell(spec)
    try:
        await cell.open()
    except BaseException:
        await cell.close()
        raise
    return cell


AUTO_INDEXES = 4
"""Indexes a store makes of its own accord per table, at most (:meth:`StoreCell._index`)."""


class StoreCell:
    def __init__(self, spec: CellSpec) -> None:
        self.params = StoreParams.model_validate(spec.params)
        self.path = spec.path
        self.scope = parent(spec.path)
        self.folder = spec.folder
        """The cell's folder in the tree: its seeds."""
        self.own = spec.state
        """Where its own ``cell.db`` is (an old one is moved into colony.db from there)."""
        self.log = spec.log
        self.schema: dict[str, dict[str, str]] = {
            t: dict(cols) for t, cols in self.params.schema_.items()
        }
        self.query_timeout_ms = self.params.query_timeout_ms
        self.receipts = spec.colony is None or spec.colony.delivery == "at_least_once"
        """Record a receipt per write (only redelivery needs them)."""
        self.shared = spec.tables is not None
        """The tables are in colony.db (else in the cell's own cell.db)."""
        self.tables: CellTables = (
            spec.tables.tables(spec.path) if spec.tables is not None else OwnFile(spec.state)
        )
        self.prefix = self.tables.prefix
        self.dialect: StoreDialect = dialect_of(self.tables.dialect)
        self._failed: tuple[type[Exception], ...] = (
            QueryTimeoutError,
            OverflowError,
            ValueMismatchError,
            *self.dialect.errors,
        )
        """What an operation's SQL can fail with and still be answered."""
        self.plans = Plans()
        self.indexed: set[tuple[str, tuple[str, ...]]] = set()
        """``(table, key columns)`` looked up by a call already (see :meth:`_index`)."""
        receipts, mark = self._name(_RECEIPTS_TABLE), self.dialect.mark
        self._receipt_sql = f"SELECT reply FROM {receipts} WHERE message_id = {mark}"
        self._keep_receipt_sql = (
            f"INSERT INTO {receipts}(message_id, reply, at) VALUES ({mark}, {mark}, {mark})"
        )

    def _name(self, table: str) -> str:
        return self.dialect.table(self.prefix, table)

    # -- the database ---------------------------------------------------------------------

    async def open(self) -> None:
        """Move an old ``cell.db`` in, or seed a fresh store; then create what the schema
        declares and read back what ``create_table`` and ``params`` left."""
        fresh = isinstance(self.tables, OwnFile) and self.tables.fresh
        if self.shared:
            present = await self.tables.write(
                lambda conn: self.dialect.tables_of(conn, self.prefix)
            )
            migrated = await self._migrate(present)
            fresh = not present and not migrated
        seed = self._read_seeds() if fresh else {}
        self.query_timeout_ms = await self.tables.write(lambda conn: self._prepare(conn, seed))
        await self.tables.committed()

    async def _migrate(self, present: list[str]) -> bool:
        """Copy an old ``cell.db`` into colony.db when colony.db holds none of this store's
        tables yet; True when there was one to copy. One found beside tables already moved is
        left alone, with a warning."""
        if self.own is None:
            return False
        file = Path(self.own) / CELL_DB
        if not file.is_file():
            return False
        if not self.dialect.migrates_cell_db:
            if self.log is not None:
                self.log.warning(
                    "store_cell_db_ignored",
                    cell=self.path,
                    file=str(file),
                    detail=f"this store's tables are on {self.dialect.name}; an old cell.db is "
                    "not moved there (copy its rows with an insert per row, then rename or "
                    "remove it)",
                )
            return False
        if present:
            if self.log is not None:
                self.log.warning(
                    "store_cell_db_ignored",
                    cell=self.path,
                    file=str(file),
                    detail="this store's tables are in colony.db; the cell.db beside it is not "
                    "read (rename or remove it)",
                )
            return True
        old: list[OldTable] = await asyncio.to_thread(read_cell_db, file)
        copied = await self.tables.write(lambda conn: copy_tables(conn, self.prefix, old))
        await self.tables.committed()
        moved = retire_cell_db(file)
        if self.log is not None:
            self.log.warning(
                "store_migrated",
                cell=self.path,
                tables=[t.name for t in old],
                rows=copied,
                moved_to=str(moved),
                detail="this store's tables moved from its cell.db into colony.db (tables "
                f'named "{self.prefix}<table>"); the old file was renamed',
            )
        return True

    def _read_seeds(self) -> dict[str, list[dict[str, Any]]]:
        if self.folder is None:
            return {}
        seeds: dict[str, list[dict[str, Any]]] = {}
        for table, columns in self.params.schema_.items():
            file = Path(self.folder) / "seed" / f"{table}.jsonl"
            if file.is_file():
                seeds[table] = read_seed(file, columns)
        return seeds

    def _prepare(self, conn: Connection, seed: dict[str, list[dict[str, Any]]]) -> Any:
        """Runs as one write: the receipts and params tables, the declared tables, seeds;
        returns the query timeout the params overlay holds."""
        dialect, prefix, mark = self.dialect, self.prefix, self.dialect.mark
        text, integer = dialect.types["text"], dialect.types["int"]
        dialect.lock(conn, prefix)
        if seed and self.shared and dialect.tables_of(conn, prefix):
            seed = {}  # another daemon made this store's tables since it looked: not fresh
        receipts, params = self._name(_RECEIPTS_TABLE), self._name(_PARAMS_TABLE)
        dialect.create(
            conn,
            prefix,
            _RECEIPTS_TABLE,
            f"message_id {text} PRIMARY KEY, reply {text} NOT NULL, at {integer} NOT NULL",
        )
        dialect.execute(
            conn,
            f"DELETE FROM {receipts} WHERE at < {mark}",
            (int(time.time()) - _RECEIPTS_KEPT_S,),
        )
        dialect.create(
            conn,
            prefix,
            _PARAMS_TABLE,
            f"key {text} PRIMARY KEY, value {text} NOT NULL, updated_at {integer} NOT NULL",
        )
        for table, columns in self.schema.items():
            dialect.ensure_table(conn, prefix, table, columns)
        # Tables made at runtime by create_table are part of the schema too.
        for name in dialect.tables_of(conn, prefix):
            if name in self.schema or name in _INTERNAL:
                continue
            self.schema[name] = dict(dialect.columns_of(conn, prefix, name))
        for table, rows in seed.items():
            kinds = self.params.schema_[table]
            names = sorted(kinds)
            try:
                dialect.executemany(
                    conn,
                    f"INSERT INTO {self._name(table)} ({', '.join(quoted(c) for c in names)}) "
                    f"VALUES ({', '.join(mark for _ in names)})",
                    [
                        [dialect.value(kinds[c], c, row.get(c), stored=True) for c in names]
                        for row in rows
                    ],
                )
            except ValueMismatchError as exc:
                raise StoreSeedError(f"seed/{table}.jsonl: {exc}") from None
        overlay = {
            str(k): json.loads(v)
            for k, v in dialect.execute(conn, f"SELECT key, value FROM {params}", ())
        }
        return overlay.get("query_timeout_ms", self.query_timeout_ms)

    async def close(self) -> None:
        await self.tables.close()

    # -- one message ----------------------------------------------------------------------

    async def handle(self, message: Envelope) -> list[Emission]:
        target = message.reply_to or self.path
        body = message.body if isinstance(message.body, dict) else {}
        if "params" in body:
            problem = await self._update_params(body["params"], message)
            if problem is not None:
                return [Emission(_error("params_update", "invalid_input", problem, ""), target)]
            if not body.get("messages"):
                return []  # a params-only message is applied silently
        return [Emission(await self._answer(message, body), target)]

    async def _answer(self, message: Envelope, body: JsonObject) -> JsonObject:
        started = time.perf_counter()
        try:
            call_id, text = call_text(body.get("messages"))
            step = self.plans.get(text)
            args = parse_args(text) if step is None else {}
        except ArgsError as exc:
            return _error(exc.operation, "invalid_input", exc.text, "")
        operation = step.operation if step is not None else args.get("operation")
        if not isinstance(operation, str):
            operation = "error"
        if (
            self.params.write_surface == "internal"
            and operation in WRITES
            and not (message.reply_to and _inside(message.reply_to, self.scope))
        ):
            return _error(
                operation,
                "write_denied",
                f"{self.path} accepts writes only from inside {self.scope}",
                call_id,
            )
        if step is None:
            try:
                step = plan(args, self.schema, self.prefix, self.dialect)
            except ArgsError as exc:
                return _error(exc.operation, "invalid_input", exc.text, "")
            except UnknownNameError as exc:
                return _result(operation, 0, started, exc.text, call_id, exc.code)
            self.plans.keep(text, step)
        if step.keys and (step.table, step.keys) not in self.indexed:
            await self._index(step.table, step.keys)
        if step.operation == "select":
            return await self.tables.read(lambda conn: self._select(conn, step, call_id, started))
        ack = (message.id, self.path) if self.receipts else None
        reply = await self.tables.write(
            lambda conn: self._write(conn, message.id, step, call_id, started),
            ack=ack,
            handling=message,
        )
        if ack is None:  # no unit commits with the write: the reply waits for its commit
            await self.tables.committed()
        if step.operation == "create_table" and "error_code" not in reply["header"]:
            self.schema.setdefault(step.table, {}).update(step.new_columns)
            self.plans.clear()
        return reply

    async def _index(self, table: str, keys: tuple[str, ...]) -> None:
        """Index ``keys`` of ``table``, the first time a call looks rows up by them: a table
        read and updated per conversation (a thread) is otherwise scanned whole by every call,
        and it grows for the life of the colony. At most ``AUTO_INDEXES`` per table, counting
        those made in earlier runs; one that cannot be made is logged and the call goes on
        without it."""
        self.indexed.add((table, keys))
        dialect, prefix = self.dialect, self.prefix

        def make(conn: Connection) -> None:
            dialect.make_index(conn, prefix, table, keys, AUTO_INDEXES)

        try:
            await self.tables.write(make)
        except dialect.errors as exc:
            if self.log is not None:
                self.log.warning(
                    "store_index_failed",
                    cell=self.path,
                    table=table,
                    columns=list(keys),
                    error=f"{type(exc).__name__}: {exc}",
                    detail="calls on this table still work, scanning it",
                )

    def _select(self, conn: Connection, step: Plan, call_id: str, started: float) -> JsonObject:
        dialect = self.dialect
        try:
            if self.query_timeout_ms:
                with dialect.bounded(conn, self.query_timeout_ms):
                    rows = dialect.execute(conn, step.sql, step.values).fetchall()
            else:
                rows = dialect.execute(conn, step.sql, step.values).fetchall()
        except self._failed as exc:
            if dialect.read_failed_storage(exc):
                raise  # the connection, not the query: the tables reconnect (or the cell restarts)
            return _failure(dialect, step.operation, exc, started, call_id)
        return _result(
            step.operation, len(rows), started, _rows_json(step.columns, rows), call_id, None
        )

    def _write(
        self, conn: Connection, message_id: str, step: Plan, call_id: str, started: float
    ) -> JsonObject:
        """One write and its receipt (run where the tables are: in colony.db, on the writer
        thread inside the transaction that will carry the reply); a message already answered
        gets the recorded reply."""
        dialect = self.dialect
        if self.receipts:
            row = dialect.execute(conn, self._receipt_sql, (message_id,)).fetchone()
            if row is not None:
                recorded: JsonObject = json.loads(row[0])
                return recorded
        try:
            # Own file: bounded like a read. colony.db: never interrupted (see the docstring).
            timeout_ms = None if self.shared else self.query_timeout_ms
            if step.operation == "create_table":
                with dialect.bounded(conn, timeout_ms):
                    dialect.create_table(conn, self.prefix, step.table, step.new_columns)
                rows_affected = 0
            elif timeout_ms:
                with dialect.bounded(conn, timeout_ms):
                    rows_affected = dialect.write(conn, step.sql, step.values)
            else:
                rows_affected = dialect.write(conn, step.sql, step.values)
        except QueryTimeoutError as exc:
            return _failure(dialect, step.operation, exc, started, call_id)  # no receipt: ask again
        except self._failed as exc:
            if storage_failure(exc):
                raise  # the storage's fault: the transaction is retried, with this write
            reply = _failure(dialect, step.operation, exc, started, call_id)
        else:
            reply = _result(step.operation, rows_affected, started, "null", call_id, None)
        if self.receipts and dialect.in_transaction(conn):
            dialect.execute(
                conn, self._keep_receipt_sql, (message_id, json.dumps(reply), int(time.time()))
            )
            crash_point("store.write")
        return reply

    async def _update_params(self, update: Any, message: Envelope) -> str | None:
        problem = runtime_params.update_problem(update, mutable=_MUTABLE_PARAMS, nullable=True)
        if problem is not None:
            return problem
        now = int(time.time())
        rows = [(key, json.dumps(value), now) for key, value in update.items()]
        dialect, mark = self.dialect, self.dialect.mark
        sql = (
            f"INSERT INTO {self._name(_PARAMS_TABLE)} (key, value, updated_at) "
            f"VALUES ({mark}, {mark}, {mark}) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value, "
            "updated_at = excluded.updated_at"
        )
        await self.tables.write(lambda conn: dialect.executemany(conn, sql, rows), handling=message)
        self.query_timeout_ms = update.get("query_timeout_ms", self.query_timeout_ms)
        return None


def _failure(
    dialect: StoreDialect, operation: str, exc: Exception, started: float, call_id: str
) -> JsonObject:
    """The reply to an operation whose SQL failed: timed out, refused by the database, or
    given a value the database cannot hold."""
    if isinstance(exc, QueryTimeoutError):
        return _error(operation, "query_timeout", "query exceeded query_timeout_ms", "")
    if isinstance(exc, OverflowError | ValueMismatchError):
        return _result(operation, 0, started, str(exc), call_id, "type_mismatch")
    return _result(operation, 0, started, dialect.error_text(exc), call_id, dialect.error_code(exc))


def _result(
    operation: str,
    rows_affected: int,
    started: float,
    text: str,
    call_id: str,
    error_code: str | None,
) -> JsonObject:
    header: JsonObject = {
        "operation": operation,
        "rows_affected": rows_affected,
        "duration_ms": int((time.perf_counter() - started) * 1000),
    }
    if error_code is not None:
        header["error_code"] = error_code
    return tool_result(text, call_id, header)


def _error(operation: str, code: str, text: str, call_id: str) -> JsonObject:
    header: JsonObject = {"operation": operation, "rows_affected": 0, "duration_ms": 0}
    return tool_error(code, text, call_id, header)
