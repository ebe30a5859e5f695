"""The ``timer`` cell: cron and one-shot schedules that emit source messages.

Long-running. Two halves share one instance on one event loop:

* ``handle(message)`` takes schedule ops (``add``, ``modify``, ``remove``, ``trigger``) and
  keeps the database (``cell.db``) — the only truth — and the in-memory *plan* (the next due
  time of every active schedule) in step;
* ``run(ctx)`` sleeps until the earliest due time of the plan, or until an op changes the plan
  (an :class:`asyncio.Event`), and fires what is due.

A firing is a source emission (fresh trace, empty context) of the schedule's ``emit_body`` with
its ``emit_headers`` plus ``event_id``, ``schedule_id``, ``schedule_name``, ``scheduled_at``,
``fired_at`` and, for cron schedules, ``iteration_n``. The state change (``iteration_n + 1``, or
a one-shot ``completed``) is written before the emission. Missed firings are never caught up: a
cron schedule is planned strictly after *now*, and a one-shot whose time passed while the
daemon was down stays unplanned (logged) at the next start.

In a cluster the schedules are in the cluster's database (:mod:`cells.timer.schedules`): any
node takes ops, and only the holder of the leader lease ``timer:<path>`` fires, asking for it
again every tick; it plans again when an op taken in elsewhere moved the schedules' version.
A due time is claimed in the row before it fires, so it fires once whichever node fires it.

Time comes from a :class:`Clock`, so tests can drive the loop with a fake one. The ops are read
by :mod:`cells.timer.ops`, the params by :mod:`cells.timer.params`, the SQL is
:mod:`cells.timer.schedules`.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar

from cells.cellfile import ParamsOverlay, QueryTimeoutError, bounded, open_cell_db
from cells.clusterstate import (
    StateConnection,
    cluster_dsn,
    create_tables,
    read_overlay,
    save_overlay,
)
from cells.text import dumps_sorted
from cells.timer.cron import CronExpr
from cells.timer.ops import Op, TimerOpError, parse_at, parse_op, rfc3339
from cells.timer.params import TimerParams, update_problem
from cells.timer.schedules import SCHEMA, Query, Row, Schedules
from cells.toolcall import ToolCallError, parse_tool_call, result_turn
from colony.cell import CellContext, CellSpec, Emission
from colony.envelope import Envelope, JsonObject
from colony.ids import uuid7

__all__ = ["Clock", "SystemClock", "TimerCell"]

T = TypeVar("T")

TICK_S = 1.0
"""In a cluster, the longest the firing node sleeps between asks for its lease (a third of the
lease when that is shorter)."""


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
        self.leader = spec.leader
        """Who fires in a cluster (None: a daemon alone, which always does)."""
        self.lease = f"timer:{spec.path}"
        """The name of the leader lease whose holder fires the planned due times."""
        cluster = spec.colony.cluster
        self.tick_s = min(TICK_S, cluster.lease_ms / 3000) if cluster is not None else TICK_S
        """In a cluster, the longest the firing node sleeps before it asks for the lease again
        and looks for ops taken in by other nodes; how long another node waits between asks."""
        self._crons: dict[str, CronExpr] = {}
        self._plan: dict[str, _Planned] = {}
        self._changed = asyncio.Event()
        self._ctx: CellContext | None = None
        self._pending: list[str] = []
        """Triggers that arrived before the I/O loop started."""
        self._leading: bool | None = None
        self._seen: int | None = None
        """The plan version (:meth:`Schedules.version`) the plan was last read at."""
        dsn = cluster_dsn(spec)
        self.shared: StateConnection | None = None
        """The cluster database's connection (None: the schedules are in cell.db)."""
        self._db_errors: tuple[type[Exception], ...] = (QueryTimeoutError,)
        self._opening = asyncio.Lock()
        if dsn is not None:
            self.shared = StateConnection(dsn)
            self._db_errors = (QueryTimeoutError, *self.shared.errors)
            self.schedules = Schedules.postgres_for(spec.path)
            self.query_timeout_ms: int = self.params.query_timeout_ms
            self._opened = False
            try:  # ready at once, as on cell.db ...
                self._loaded(self.shared.call(self._prepare, None))
            except self._db_errors as exc:  # ... or before the first op or firing
                if self.log is not None:
                    self.log.warning(
                        "timer_state_deferred",
                        cell=self.path,
                        error=self.shared.describe(exc),
                        detail="the cluster database did not answer; the cell reads its "
                        "schedules again before its first op or firing",
                    )
            return
        self.schedules = Schedules.sqlite()
        self.conn, fresh = open_cell_db(spec.state)
        self.conn.executescript(SCHEMA)
        self.overlay = ParamsOverlay(self.conn, "timer_params")
        self.query_timeout_ms = self.overlay.read().get(
            "query_timeout_ms", self.params.query_timeout_ms
        )
        if fresh:
            self._seed()
        self._opened = True
        self._set_plan(self.schedules.active(self._unbounded), self.clock.now(), boot=True)

    def _seed(self) -> None:
        self.conn.execute("BEGIN")
        for entry in self.params.schedules:
            self.schedules.insert(self._query, parse_op(entry), self.clock.now())
        self.conn.execute("COMMIT")

    def _prepare(self, conn: Any) -> tuple[dict[str, Any], int | None, list[Any]]:
        """In a cluster: make the tables (the seeds go into fresh ones, as into a fresh
        cell.db) and read the overlay, the plan version and the active schedules."""
        schedules = self.schedules
        q = _pg_query(conn)
        if create_tables(conn, self.path, schedules.ddl, schedules.table):
            for entry in self.params.schedules:
                schedules.insert(q, parse_op(entry), self.clock.now())
        overlay = read_overlay(conn, schedules.params_table)
        return overlay, schedules.version(q), schedules.active(q)

    def _loaded(self, prepared: tuple[dict[str, Any], int | None, list[Any]]) -> None:
        overlay, version, rows = prepared
        self.query_timeout_ms = overlay.get("query_timeout_ms", self.params.query_timeout_ms)
        self._seen = version
        self._set_plan(rows, self.clock.now(), boot=True)
        self._opened = True

    async def _open(self) -> None:
        """In a cluster, when the tables could not be read as the cell was built: read them
        (once, before anything else touches them)."""
        shared = self.shared
        if self._opened or shared is None:
            return
        async with self._opening:
            if not self._opened:
                self._loaded(await shared.run(self._prepare, None))

    async def close(self) -> None:
        if self.leader is not None:  # a closed timer must not keep the cluster's firing
            await self.leader.resign(self.lease)
        if self.shared is not None:
            await self.shared.close()
        else:
            self.conn.close()

    def _note(self, event: str, **fields: Any) -> None:
        if self.log is not None:
            self.log.info(event, cell=self.path, **fields)

    # -- the database, under query_timeout_ms ------------------------------------------------

    def _query(self, sql: str, values: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        """One statement, interrupted past ``query_timeout_ms`` (:class:`QueryTimeoutError`)."""
        with bounded(self.conn, self.query_timeout_ms):
            return self.conn.execute(sql, values)

    def _unbounded(self, sql: str, values: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        return self.conn.execute(sql, values)

    async def _db(self, work: Callable[[Query], T], *, bounded: bool = True) -> T:
        """Run ``work`` on the schedules: on cell.db right here, statement by statement (as
        the timer always did); in a cluster as one transaction, off the event loop."""
        if self.shared is None:
            return work(self._query if bounded else self._unbounded)
        timeout_ms = self.query_timeout_ms if bounded else None
        return await self.shared.run(lambda conn: work(_pg_query(conn)), timeout_ms)

    # -- the plan ----------------------------------------------------------------------------

    def _expr(self, text: str) -> CronExpr:
        expr = self._crons.get(text)
        if expr is None:
            expr = self._crons[text] = CronExpr.parse(text)
        return expr

    async def _replan(self, now: datetime) -> None:
        """Rebuild the plan from the database. Not under ``query_timeout_ms``: a plan left
        stale would be worse than a slow op."""
        schedules = self.schedules

        def read(q: Query) -> tuple[int | None, list[Any]]:
            return schedules.version(q), schedules.active(q)

        version, rows = await self._db(read, bounded=False)
        self._seen = version
        self._set_plan(rows, now)

    def _set_plan(self, rows: list[Any], now: datetime, *, boot: bool = False) -> None:
        """The plan of the active schedules ``rows``, keeping the due time of every schedule
        whose moment did not change. In insertion order: schedules due at the same second
        fire in the order they were added."""
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

    # -- who fires (a cluster) ---------------------------------------------------------------

    async def _fires(self) -> bool:
        """Whether this node fires this round: always alone; in a cluster while it holds the
        leader lease (asked again every tick). A node that takes the lease over plans its cron
        schedules afresh from now: what came due while it did not fire was the old holder's
        (or, in the gap between the two, is skipped like the slots of a stall)."""
        leader = self.leader
        if leader is None:
            return True
        held = await leader.lead(self.lease)
        if held and not self._leading:
            try:
                self._plan = {sid: p for sid, p in self._plan.items() if p.moment[0] == "at"}
                await self._replan(self.clock.now())
            except self._db_errors as exc:
                self._note("timer_replan_failed", error=f"{type(exc).__name__}: {exc}")
                held = False
            else:
                self._note(
                    "timer_firing",
                    lease=self.lease,
                    detail="this node holds the timer's leader lease and fires its schedules",
                )
        elif not held and self._leading is not False:
            self._note(
                "timer_standby",
                lease=self.lease,
                detail="another node holds the timer's leader lease and fires the schedules; "
                "this node takes ops and asks for the lease again every "
                f"{self.tick_s:g} s",
            )
        self._leading = held
        if not held:
            await self.clock.wait(asyncio.Event(), self.tick_s)
        return held

    async def _follow(self) -> None:
        """Plan again when an op taken in by another node changed the schedules."""
        if self.shared is None:
            return
        version = await self._db(self.schedules.version)
        if version != self._seen:
            await self._replan(self.clock.now())

    # -- the I/O loop ------------------------------------------------------------------------

    async def run(self, ctx: CellContext) -> None:
        self._ctx = ctx
        while True:
            try:
                await self._open()
                break
            except self._db_errors as exc:  # the cluster database is out: try again
                self._note("timer_open_failed", error=f"{type(exc).__name__}: {exc}")
                await self.clock.wait(asyncio.Event(), self.tick_s)
        pending, self._pending = self._pending, []
        for schedule_id in pending:
            await self._fire(schedule_id, self.clock.now(), None)
        tick = None if self.leader is None else self.tick_s
        while True:
            if not await self._fires():
                continue
            self._changed.clear()
            try:
                await self._follow()
            except self._db_errors as exc:
                self._note("timer_replan_failed", error=f"{type(exc).__name__}: {exc}")
                await self.clock.wait(asyncio.Event(), self.tick_s)
                continue
            now = self.clock.now()
            due_at = min((p.due for p in self._plan.values() if p.due is not None), default=None)
            if due_at is None:
                await self.clock.wait(self._changed, tick)
                continue
            delay = (due_at - now).total_seconds()
            if delay > 0:
                await self.clock.wait(self._changed, delay if tick is None else min(delay, tick))
                continue
            batch = [(sid, planned) for sid, planned in self._plan.items() if planned.due == due_at]
            for schedule_id, planned in batch:
                if self.leader is not None and not self.leader.leads(self.lease):
                    break  # the lease moved: the new holder fires the rest
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
        schedules = self.schedules

        def work(q: Query) -> Row | str:
            row = schedules.load(q, schedule_id)
            if row is None or row.status != "active":
                return "inactive"  # removed (or completed) after it was planned
            if planned is not None and row.moment != planned.moment:
                return "modified"  # its new moment is planned already
            if planned is not None and not schedules.claim(q, schedule_id, scheduled_at):
                return "fired"  # by another node of the cluster
            schedules.fired(q, row)
            return row

        try:
            row = await self._db(work)
        except QueryTimeoutError:
            self._note("timer_fire_skipped", schedule_id=schedule_id, reason="query_timeout")
            return
        except self._db_errors as exc:
            self._note(
                "timer_fire_skipped",
                schedule_id=schedule_id,
                reason="database",
                error=f"{type(exc).__name__}: {exc}",
            )
            return
        if isinstance(row, str):
            if row == "fired":
                self._note(
                    "timer_fire_fenced",
                    schedule_id=schedule_id,
                    scheduled_at=rfc3339(scheduled_at),
                    detail="another node of the cluster fired this due time",
                )
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
        await self._open()
        target = message.reply_to or self.path
        content = await self._answer(message.body)
        return [] if content is None else [Emission(content, target)]

    async def _answer(self, body: Any) -> JsonObject | None:
        if not isinstance(body, dict):
            return _op_error("invalid_body", "the body must be a JSON object", None, None, False)
        if "params" in body:  # a runtime params update stands alone
            problem = await self._update_params(body["params"])
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
            await self._apply(op)
            if op.op == "trigger":
                await self._fire(op.schedule_id, self.clock.now(), None)
                await self._replan(self.clock.now())  # a triggered one-shot is done
        except TimerOpError as exc:
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

    async def _apply(self, op: Op) -> None:
        """Carry out ``op`` in the database and the plan (a trigger only checks); raises
        :class:`TimerOpError` or :class:`QueryTimeoutError`. In a cluster the op is one
        transaction."""
        now = self.clock.now()
        schedules = self.schedules

        def work(q: Query) -> bool:
            """The op's statements; False when nothing changed."""
            sid = op.schedule_id
            schedules.begin_op(q)
            if op.op == "add":
                self._refuse_past(op, now)
            current = schedules.load(q, sid)
            if op.op == "add":
                if current is None:
                    schedules.insert(q, op, self.clock.now())
                elif current.status == "removed":  # the same id ordered again: revive it
                    schedules.revive(q, op)
                elif current.status == "active" and current.moment == _moment_of(op):
                    return False  # a repeated order is one order
                else:
                    raise TimerOpError(
                        "schedule_id_exists",
                        f"add: schedule_id {sid} already names another schedule",
                    )
            elif current is None:
                raise TimerOpError("schedule_not_found", f"{op.op}: schedule {sid} is unknown")
            elif op.op == "modify":
                if (current.kind == "cron" and op.at is not None) or (
                    current.kind == "at" and op.cron is not None
                ):
                    runs = "a cron expression" if current.kind == "cron" else "a one-shot time (at)"
                    raise TimerOpError(
                        "kind_mismatch",
                        f"modify: schedule {sid} runs on {runs} and cannot switch kind "
                        "(remove it, then add a new one)",
                    )
                self._refuse_past(op, now)
                schedules.modify(q, op)
            elif current.status != "active":
                raise TimerOpError(
                    "schedule_not_found", f"{op.op}: schedule {sid} is {current.status}, not active"
                )
            elif op.op == "remove":
                schedules.remove(q, sid)
            return True

        changed = await self._db(work)
        if changed and op.op != "trigger":
            await self._replan(now)

    @staticmethod
    def _refuse_past(op: Op, now: datetime) -> None:
        if op.at is not None and op.at <= now:
            raise TimerOpError(
                "at_in_past",
                f"{op.op}: at {rfc3339(op.at, millis=True)} is not in the future (now "
                f"{rfc3339(now, millis=True)}); a one-shot in the past would never fire, so "
                "nothing was stored",
            )

    async def _update_params(self, update: Any) -> str | None:
        problem = update_problem(update)
        if problem is None:
            if self.shared is None:
                self.overlay.save(update)
            else:
                table = self.schedules.params_table  # unbounded, as in cell.db
                await self.shared.run(lambda conn: save_overlay(conn, table, update), None)
            self.query_timeout_ms = update.get("query_timeout_ms", self.query_timeout_ms)
        return problem


def _pg_query(conn: Any) -> Query:
    """A :data:`Query` on a psycopg connection (the statements are rendered for it)."""

    def query(sql: str, values: tuple[Any, ...] = ()) -> Any:
        return conn.execute(sql, values)

    return query


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
