"""The ``timer`` cell: cron and one-shot schedules that emit source messages.

Long-running. Two halves share one instance on one event loop:

* ``handle(message)`` takes schedule ops (``add``, ``modify``, ``remove``, ``trigger``) and
  keeps ``cell.db`` — the only truth — and the in-memory *plan* (the next due time of every
  active schedule) in step;
* ``run(ctx)`` sleeps until the earliest due time of the plan, or until an op changes the plan
  (an :class:`asyncio.Event`), and fires what is due.

A firing is a source emission (fresh trace, empty context) of the schedule's ``emit_body`` with
its ``emit_headers`` plus ``event_id``, ``schedule_id``, ``schedule_name``, ``scheduled_at``,
``fired_at`` and, for cron schedules, ``iteration_n``. The state change (``iteration_n + 1``, or
a one-shot ``completed``) is written before the emission. Missed firings are never caught up: a
cron schedule is planned strictly after *now*, and a one-shot whose time passed while the
daemon was down stays unplanned (logged) at the next start.

Time comes from a :class:`Clock`, so tests can drive the loop with a fake one. The ops are read
by :mod:`cells.timer.ops`, the params by :mod:`cells.timer.params`.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from cells.cellfile import ParamsOverlay, QueryTimeoutError, bounded, open_cell_db
from cells.text import dumps_sorted
from cells.timer.cron import CronExpr
from cells.timer.ops import Op, OpError, parse_at, parse_op, rfc3339
from cells.timer.params import TimerParams, update_problem
from cells.toolcall import ToolCallError, parse_tool_call, result_turn
from colony.cell import CellContext, CellSpec, Emission
from colony.envelope import Envelope, JsonObject
from colony.ids import uuid7

__all__ = ["Clock", "SystemClock", "TimerCell"]


# -- time ---------------------------------------------------------------------------------------


class Clock(Protocol):
    """Where the timer reads the time and how it sleeps."""

    def now(self) -> datetime:
        """The current time, aware, in UTC."""
        ...

    async def wait(self, event: asyncio.Event, seconds: float | None) -> bool:
        """Wait until ``event`` is set (True) or ``seconds`` have passed (False); None waits
        for the event alone."""
        ...


class SystemClock:
    """The wall clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def wait(self, event: asyncio.Event, seconds: float | None) -> bool:
        if seconds is None:
            await event.wait()
            return True
        try:
            async with asyncio.timeout(seconds):
                await event.wait()
        except TimeoutError:
            return False
        return True


# -- the database -------------------------------------------------------------------------------

_SCHEMA = """
CREATE TABLE IF NOT EXISTS schedules (
    schedule_id   TEXT PRIMARY KEY NOT NULL,
    schedule_name TEXT NOT NULL,
    kind          TEXT NOT NULL CHECK (kind IN ('cron', 'at')),
    cron          TEXT,
    at            TEXT,
    emit_to       TEXT NOT NULL,
    emit_body     TEXT NOT NULL,
    emit_headers  TEXT NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('active', 'completed', 'removed')),
    iteration_n   INTEGER NOT NULL DEFAULT 0,
    created_at    TEXT NOT NULL
);
"""


@dataclass(frozen=True, slots=True)
class Row:
    """One schedule as ``cell.db`` holds it."""

    schedule_id: str
    schedule_name: str
    kind: str
    cron: str | None
    at: str | None
    emit_to: str
    emit_body: Any
    emit_headers: JsonObject
    status: str
    iteration_n: int

    @property
    def moment(self) -> tuple[str, str]:
        """What decides when it fires: ``(kind, expression or time)``."""
        return (self.kind, (self.cron if self.kind == "cron" else self.at) or "")


_COLUMNS = (
    "schedule_id, schedule_name, kind, cron, at, emit_to, emit_body, emit_headers, status, "
    "iteration_n"
)


def _row(values: tuple[Any, ...]) -> Row:
    sid, name, kind, cron, at, emit_to, body, headers, status, iteration = values
    return Row(
        sid, name, kind, cron, at, emit_to, json.loads(body), json.loads(headers), status, iteration
    )


@dataclass(frozen=True, slots=True)
class _Planned:
    moment: tuple[str, str]
    due: datetime | None
    """None: never (a one-shot whose time passed while the daemon was down)."""


# -- the cell -----------------------------------------------------------------------------------


class TimerCell:
    def __init__(self, spec: CellSpec, clock: Clock | None = None) -> None:
        self.params = TimerParams.model_validate({} if spec.params is None else spec.params)
        self.path = spec.path
        self.log = spec.log
        self.clock: Clock = clock or SystemClock()
        self.conn, fresh = open_cell_db(spec.folder)
        self.conn.executescript(_SCHEMA)
        self.overlay = ParamsOverlay(self.conn, "timer_params")
        self.query_timeout_ms: int = self.overlay.read().get(
            "query_timeout_ms", self.params.query_timeout_ms
        )
        if fresh:
            self._seed()
        self._crons: dict[str, CronExpr] = {}
        self._plan: dict[str, _Planned] = {}
        self._changed = asyncio.Event()
        self._ctx: CellContext | None = None
        self._pending: list[str] = []
        """Triggers that arrived before the I/O loop started."""
        self._replan(self.clock.now(), boot=True)

    def _seed(self) -> None:
        self.conn.execute("BEGIN")
        for entry in self.params.schedules:
            self._insert(parse_op(entry))
        self.conn.execute("COMMIT")

    async def close(self) -> None:
        self.conn.close()

    def _note(self, event: str, **fields: Any) -> None:
        if self.log is not None:
            self.log.info(event, cell=self.path, **fields)

    # -- cell.db, under query_timeout_ms ---------------------------------------------------

    def _query(self, sql: str, values: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        """One statement, interrupted past ``query_timeout_ms`` (:class:`QueryTimeoutError`)."""
        with bounded(self.conn, self.query_timeout_ms):
            return self.conn.execute(sql, values)

    def _load(self, schedule_id: str) -> Row | None:
        found = self._query(
            f"SELECT {_COLUMNS} FROM schedules WHERE schedule_id = ?", (schedule_id,)
        ).fetchone()
        return None if found is None else _row(found)

    def _order_values(self, op: Op) -> tuple[Any, ...]:
        return (
            op.schedule_name,
            "cron" if op.cron is not None else "at",
            op.cron,
            None if op.at is None else rfc3339(op.at, millis=True),
            op.emit_to,
            dumps_sorted(op.emit_body),
            dumps_sorted(op.emit_headers or {}),
        )

    def _insert(self, op: Op) -> None:
        self._query(
            "INSERT INTO schedules (schedule_id, schedule_name, kind, cron, at, emit_to, "
            "emit_body, emit_headers, status, iteration_n, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'active', 0, ?)",
            (op.schedule_id, *self._order_values(op), rfc3339(self.clock.now())),
        )

    # -- the plan ----------------------------------------------------------------------------

    def _expr(self, text: str) -> CronExpr:
        expr = self._crons.get(text)
        if expr is None:
            expr = self._crons[text] = CronExpr.parse(text)
        return expr

    def _replan(self, now: datetime, *, boot: bool = False) -> None:
        """Rebuild the plan from cell.db, keeping the due time of every schedule whose moment
        did not change. In ``rowid`` order: schedules due at the same second fire in the order
        they were added. Not under ``query_timeout_ms``: a plan left stale would be worse than
        a slow op."""
        rows = self.conn.execute(
            "SELECT schedule_id, kind, cron, at FROM schedules WHERE status = 'active' "
            "ORDER BY rowid"
        ).fetchall()
        plan: dict[str, _Planned] = {}
        for schedule_id, kind, cron, at in rows:
            moment = (kind, (cron if kind == "cron" else at) or "")
            kept = self._plan.get(schedule_id)
            if kept is not None and kept.moment == moment:
                plan[schedule_id] = kept
                continue
            if kind == "cron":
                due = self._expr(cron).next_after(now)
            else:
                due = parse_at(at)
                if boot and due <= now:
                    self._note("timer_at_passed", schedule_id=schedule_id, at=at)
                    due = None
            plan[schedule_id] = _Planned(moment, due)
        self._plan = plan
        self._changed.set()

    # -- the I/O loop ------------------------------------------------------------------------

    async def run(self, ctx: CellContext) -> None:
        self._ctx = ctx
        pending, self._pending = self._pending, []
        for schedule_id in pending:
            await self._fire(schedule_id, self.clock.now(), None)
        while True:
            self._changed.clear()
            now = self.clock.now()
            due_at = min((p.due for p in self._plan.values() if p.due is not None), default=None)
            if due_at is None:
                await self.clock.wait(self._changed, None)
                continue
            delay = (due_at - now).total_seconds()
            if delay > 0:
                await self.clock.wait(self._changed, delay)
                continue
            batch = [(sid, planned) for sid, planned in self._plan.items() if planned.due == due_at]
            for schedule_id, planned in batch:
                await self._fire(schedule_id, due_at, planned)
            # The next slot is the first after the one just fired that is not over yet: after a
            # stall the slots in between are skipped, but the current second still fires.
            after = max(due_at, self.clock.now() - timedelta(seconds=1))
            for schedule_id, planned in batch:
                if self._plan.get(schedule_id) is not planned:
                    continue  # an op replanned it while we were firing
                kind, expression = planned.moment
                if kind == "cron":
                    due = self._expr(expression).next_after(after)
                    self._plan[schedule_id] = _Planned(planned.moment, due)
                else:
                    del self._plan[schedule_id]

    async def _fire(
        self, schedule_id: str, scheduled_at: datetime, planned: _Planned | None
    ) -> None:
        """Fire one schedule: ``planned`` is the plan entry that came due, None for a trigger."""
        ctx = self._ctx
        if ctx is None:
            self._pending.append(schedule_id)
            return
        try:
            row = self._load(schedule_id)
            if row is None or row.status != "active":
                return  # removed (or completed) after it was planned
            if planned is not None and row.moment != planned.moment:
                return  # modified after it was planned; its new moment is planned already
            if row.kind == "at":
                self._query(
                    "UPDATE schedules SET status = 'completed' WHERE schedule_id = ?",
                    (schedule_id,),
                )
            else:
                self._query(
                    "UPDATE schedules SET iteration_n = iteration_n + 1 WHERE schedule_id = ?",
                    (schedule_id,),
                )
        except QueryTimeoutError:
            self._note("timer_fire_skipped", schedule_id=schedule_id, reason="query_timeout")
            return
        header = dict(row.emit_headers)
        header.update(
            event_id=uuid7(),
            schedule_id=schedule_id,
            schedule_name=row.schedule_name,
            scheduled_at=rfc3339(scheduled_at),
            fired_at=rfc3339(self.clock.now()),
        )
        if row.kind == "cron":
            header["iteration_n"] = row.iteration_n
        content = dict(row.emit_body) if isinstance(row.emit_body, dict) else {}
        content["header"] = header
        await ctx.emit(content, target=row.emit_to)

    # -- ops ---------------------------------------------------------------------------------

    async def handle(self, message: Envelope) -> list[Emission]:
        target = message.reply_to or self.path
        content = await self._answer(message.body)
        return [] if content is None else [Emission(content, target)]

    async def _answer(self, body: Any) -> JsonObject | None:
        if not isinstance(body, dict):
            return _op_error("invalid_body", "the body must be a JSON object", None, None, False)
        if "params" in body:  # a runtime params update stands alone
            problem = self._update_params(body["params"])
            return (
                None if problem is None else _op_error("invalid_input", problem, None, None, False)
            )
        messages = body.get("messages")
        tool = isinstance(messages, list) and any(
            isinstance(t, dict) and t.get("type") == "tool_call" for t in messages
        )
        call_id: str | None = None
        value: Any = body
        if tool:
            try:
                value, call_id = parse_tool_call(body)
            except ToolCallError as failure:
                return _op_error("parse_error", failure.text, failure.call_id, None, True)
        named = value.get("schedule_id") if isinstance(value, dict) else None
        named = named if isinstance(named, str) else None
        try:
            op = parse_op(value)
            self._apply(op)
            if op.op == "trigger":
                await self._fire(op.schedule_id, self.clock.now(), None)
                self._replan(self.clock.now())  # a triggered one-shot is done
        except OpError as exc:
            return _op_error(exc.code, exc.detail, call_id, named, tool)
        except QueryTimeoutError:
            detail = f"{value.get('op', 'add')}: query exceeded query_timeout_ms"
            return _op_error("query_timeout", detail, call_id, named, tool)
        if not tool:
            return None  # ops on the body's top level are not acknowledged
        text = dumps_sorted({"op": op.op, "schedule_id": op.schedule_id, "status": "ok"})
        return {
            "header": {"msg_type": "timer_op_ack", "op": op.op, "schedule_id": op.schedule_id},
            "messages": [result_turn(text, call_id)],
        }

    def _apply(self, op: Op) -> None:
        """Carry out ``op`` in cell.db and the plan (a trigger only checks); raises
        :class:`OpError` or :class:`QueryTimeoutError`."""
        now = self.clock.now()
        sid = op.schedule_id
        if op.op == "add":
            self._refuse_past(op, now)
        current = self._load(sid)
        if op.op == "add":
            if current is None:
                self._insert(op)
            elif current.status == "removed":  # the same id ordered again: revive it
                self._query(
                    "UPDATE schedules SET schedule_name = ?, kind = ?, cron = ?, at = ?, "
                    "emit_to = ?, emit_body = ?, emit_headers = ?, status = 'active', "
                    "iteration_n = 0 WHERE schedule_id = ?",
                    (*self._order_values(op), sid),
                )
            elif current.status == "active" and current.moment == _moment_of(op):
                return  # a repeated order is one order
            else:
                raise OpError(
                    "schedule_id_exists", f"add: schedule_id {sid} already names another schedule"
                )
        elif current is None:
            raise OpError("schedule_not_found", f"{op.op}: schedule {sid} is unknown")
        elif op.op == "modify":
            if (current.kind == "cron" and op.at is not None) or (
                current.kind == "at" and op.cron is not None
            ):
                runs = "a cron expression" if current.kind == "cron" else "a one-shot time (at)"
                raise OpError(
                    "kind_mismatch",
                    f"modify: schedule {sid} runs on {runs} and cannot switch kind "
                    "(remove it, then add a new one)",
                )
            self._refuse_past(op, now)
            self._query(
                "UPDATE schedules SET schedule_name = COALESCE(?, schedule_name), "
                "cron = COALESCE(?, cron), at = COALESCE(?, at), "
                "emit_to = COALESCE(?, emit_to) WHERE schedule_id = ?",
                (
                    op.schedule_name,
                    op.cron,
                    None if op.at is None else rfc3339(op.at, millis=True),
                    op.emit_to,
                    sid,
                ),
            )
        elif current.status != "active":
            raise OpError(
                "schedule_not_found", f"{op.op}: schedule {sid} is {current.status}, not active"
            )
        elif op.op == "remove":
            self._query("UPDATE schedules SET status = 'removed' WHERE schedule_id = ?", (sid,))
        if op.op != "trigger":
            self._replan(now)

    @staticmethod
    def _refuse_past(op: Op, now: datetime) -> None:
        if op.at is not None and op.at <= now:
            raise OpError(
                "at_in_past",
                f"{op.op}: at {rfc3339(op.at, millis=True)} is not in the future (now "
                f"{rfc3339(now, millis=True)}); a one-shot in the past would never fire, so "
                "nothing was stored",
            )

    def _update_params(self, update: Any) -> str | None:
        problem = update_problem(update)
        if problem is None:
            self.overlay.save(update)
            self.query_timeout_ms = update.get("query_timeout_ms", self.query_timeout_ms)
        return problem


def _moment_of(op: Op) -> tuple[str, str]:
    if op.cron is not None:
        return ("cron", op.cron)
    return ("at", "" if op.at is None else rfc3339(op.at, millis=True))


def _op_error(
    code: str, detail: str, call_id: str | None, schedule_id: str | None, tool: bool
) -> JsonObject:
    """``timer_op_error``; on the tool lane (the op came as a tool_call) also a tool_result
    turn on the call's id and ``finish_reason: "error"``."""
    header: JsonObject = {"error_code": code, "msg_type": "timer_op_error"}
    if schedule_id is not None:
        header["schedule_id"] = schedule_id
    messages: list[JsonObject] = []
    if tool:
        header["finish_reason"] = "error"
        messages.append(result_turn(detail, call_id))
    return {"header": header, "messages": messages, "meta": {"detail": detail}}
