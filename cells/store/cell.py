"""The ``store`` cell: SQLite tables in the cell's own ``cell.db``.

Stateful, so the colony hands it one message at a time: that single writer is what turns a
guarded update (``set fired=1 where … and fired=0``) into a compare-and-set exactly one racer
wins. Operations run on the event loop — each is one short statement, far cheaper than a
thread hop — and ``query_timeout_ms`` interrupts a long one through SQLite's progress handler.

A reply is one ``tool_result`` turn on the call's id with hop ``{operation, rows_affected,
duration_ms}``. SQL failures are ordinary results carrying ``hop.error_code``; a malformed call
(``invalid_input``), a timeout (``query_timeout``) or a refused write (``write_denied``) also
carries ``finish_reason: "error"``.

Writes are idempotent under redelivery: each write commits together with a receipt (the
message id and the reply) in ``store_receipts``, and a message seen again — the journal
redelivers what was in flight at a crash — gets its recorded reply instead of a second row.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from cells.cellfile import ParamsOverlay, QueryTimeoutError, bounded, open_cell_db
from cells.store.ops import WRITES, ArgsError, Plan, UnknownNameError, bind, parse_call, plan
from cells.store.params import SQL_TYPES, StoreParams, read_seed
from cells.text import dumps_sorted
from cells.toolcall import tool_error, tool_result
from colony.cell import CellSpec, Emission
from colony.crashpoints import crash_point
from colony.envelope import Envelope, JsonObject
from colony.paths import parent

_PARAMS_TABLE = "store_params"
_RECEIPTS_TABLE = "store_receipts"
_RECEIPTS_KEPT_S = 7 * 24 * 3600
"""Receipts older than this are dropped at open: a redelivery comes at the next boot."""
_INTERNAL = (_PARAMS_TABLE, _RECEIPTS_TABLE)
_MUTABLE_PARAMS = ("query_timeout_ms",)
_TYPE_BACK = {"INTEGER": "int", "TEXT": "text"}


def _read_back(value: Any) -> Any:
    if isinstance(value, bytes):
        return list(value)
    return value


def _inside(sender: str, scope: str) -> bool:
    if scope == "/":
        return True
    return sender == scope or sender.startswith(scope + "/")


class StoreCell:
    def __init__(self, spec: CellSpec) -> None:
        self.params = StoreParams.model_validate(spec.params)
        self.path = spec.path
        self.scope = parent(spec.path)
        self.schema: dict[str, dict[str, str]] = {
            t: dict(cols) for t, cols in self.params.schema_.items()
        }
        self.conn, fresh = open_cell_db(spec.folder)
        self.overlay = ParamsOverlay(self.conn, _PARAMS_TABLE)
        self.query_timeout_ms = self.params.query_timeout_ms
        self.receipts = spec.colony is None or spec.colony.delivery == "at_least_once"
        """Record a receipt per write (only redelivery needs them)."""
        self._prepare(fresh, spec.folder)

    # -- the database ---------------------------------------------------------------------

    def _prepare(self, fresh: bool, folder: Path | None) -> None:
        conn = self.conn
        conn.execute(
            f'CREATE TABLE IF NOT EXISTS "{_RECEIPTS_TABLE}" '
            "(message_id TEXT PRIMARY KEY, reply TEXT NOT NULL, at INTEGER NOT NULL)"
        )
        conn.execute(
            f'DELETE FROM "{_RECEIPTS_TABLE}" WHERE at < ?', (int(time.time()) - _RECEIPTS_KEPT_S,)
        )
        for table, columns in self.schema.items():
            self._ensure_table(table, columns)
        # Tables made at runtime by create_table are part of the schema too.
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        ).fetchall():
            if name in self.schema or name in _INTERNAL:
                continue
            info = conn.execute(f'PRAGMA table_info("{name}")').fetchall()
            self.schema[name] = {row[1]: _TYPE_BACK.get(row[2], "text") for row in info}
        self.query_timeout_ms = self.overlay.read().get("query_timeout_ms", self.query_timeout_ms)
        if fresh and folder is not None:
            self._seed(Path(folder))

    def _ensure_table(self, table: str, columns: dict[str, str]) -> None:
        conn = self.conn
        definition = ", ".join(f'"{c}" {SQL_TYPES[t]}' for c, t in sorted(columns.items()))
        conn.execute(f'CREATE TABLE IF NOT EXISTS "{table}" ({definition})')
        present = {row[1] for row in conn.execute(f'PRAGMA table_info("{table}")').fetchall()}
        for column, kind in sorted(columns.items()):
            if column not in present:
                conn.execute(f'ALTER TABLE "{table}" ADD COLUMN "{column}" {SQL_TYPES[kind]}')

    def _seed(self, folder: Path) -> None:
        for table, columns in self.params.schema_.items():
            file = folder / "seed" / f"{table}.jsonl"
            if not file.is_file():
                continue
            rows = read_seed(file, columns)
            names = sorted(columns)
            sql = (
                f'INSERT INTO "{table}" ({", ".join(f"{chr(34)}{c}{chr(34)}" for c in names)}) '
                f"VALUES ({', '.join('?' for _ in names)})"
            )
            self.conn.execute("BEGIN")
            self.conn.executemany(sql, [[bind(row.get(c)) for c in names] for row in rows])
            self.conn.execute("COMMIT")

    async def close(self) -> None:
        self.conn.close()

    # -- one message ----------------------------------------------------------------------

    async def handle(self, message: Envelope) -> list[Emission]:
        target = message.reply_to or self.path
        body = message.body if isinstance(message.body, dict) else {}
        if "params" in body:
            problem = self._update_params(body["params"])
            if problem is not None:
                return [Emission(_error("params_update", "invalid_input", problem, ""), target)]
            if not body.get("messages"):
                return []  # a params-only message is applied silently
        if not self.receipts:
            return [Emission(self._answer(message, body), target)]
        return [Emission(self._answer_once(message, body), target)]

    def _answer_once(self, message: Envelope, body: JsonObject) -> JsonObject:
        """The reply, a write and its receipt committed together; a message already answered
        gets the recorded reply."""
        conn = self.conn
        row = conn.execute(
            f'SELECT reply FROM "{_RECEIPTS_TABLE}" WHERE message_id = ?', (message.id,)
        ).fetchone()
        if row is not None:
            reply: JsonObject = json.loads(row[0])
            return reply
        conn.execute("BEGIN IMMEDIATE")
        try:
            reply = self._answer(message, body)
            if reply["header"].get("operation") in WRITES:
                conn.execute(
                    f'INSERT INTO "{_RECEIPTS_TABLE}"(message_id, reply, at) VALUES (?, ?, ?)',
                    (message.id, json.dumps(reply), int(time.time())),
                )
                crash_point("store.write")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        if conn.in_transaction:  # an interrupted write has rolled the transaction back
            conn.execute("COMMIT")
        return reply

    def _answer(self, message: Envelope, body: JsonObject) -> JsonObject:
        started = time.perf_counter()
        try:
            call_id, args = parse_call(body.get("messages"))
        except ArgsError as exc:
            return _error(exc.operation, "invalid_input", exc.text, "")
        operation = args.get("operation") if isinstance(args.get("operation"), str) else "error"
        if (
            self.params.write_surface == "internal"
            and operation in WRITES
            and not (message.reply_to and _inside(message.reply_to, self.scope))
        ):
            return _error(
                str(operation),
                "write_denied",
                f"{self.path} accepts writes only from inside {self.scope}",
                call_id,
            )
        try:
            step = plan(args, self.schema)
        except ArgsError as exc:
            return _error(exc.operation, "invalid_input", exc.text, "")
        except UnknownNameError as exc:
            return _result(str(operation), 0, started, exc.text, call_id, exc.code)
        try:
            rows_affected, payload = self._execute(step)
        except QueryTimeoutError:
            return _error(step.operation, "query_timeout", "query exceeded query_timeout_ms", "")
        except sqlite3.Error as exc:
            return _result(step.operation, 0, started, str(exc), call_id, _classify(exc))
        except OverflowError as exc:
            return _result(step.operation, 0, started, str(exc), call_id, "type_mismatch")
        return _result(step.operation, rows_affected, started, payload, call_id, None)

    def _execute(self, step: Plan) -> tuple[int, str]:
        """The step's rows affected and reply text; raises :class:`QueryTimeoutError` past
        ``query_timeout_ms``."""
        conn = self.conn
        with bounded(conn, self.query_timeout_ms):
            if step.operation == "create_table":
                self._ensure_table(step.table, step.new_columns)
                self.schema.setdefault(step.table, {}).update(step.new_columns)
                return 0, "null"
            cursor = conn.execute(step.sql, step.values)
            if step.operation == "select":
                rows = [
                    {name: _read_back(value) for name, value in zip(step.columns, row, strict=True)}
                    for row in cursor.fetchall()
                ]
                return len(rows), dumps_sorted(rows)
            return cursor.rowcount, "null"

    def _update_params(self, update: Any) -> str | None:
        if not isinstance(update, dict):
            return "params must be an object"
        for key, value in update.items():
            if key not in _MUTABLE_PARAMS:
                mutable = ", ".join(_MUTABLE_PARAMS)
                return f"params.{key} cannot be changed at runtime (mutable: {mutable})"
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 1
            ):
                return "params.query_timeout_ms must be an integer >= 1 or null"
        self.overlay.save(update)
        self.query_timeout_ms = update.get("query_timeout_ms", self.query_timeout_ms)
        return None


def _classify(exc: sqlite3.Error) -> str:
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
