"""The timer cell: ops, firings on a fake clock, cell.db, and a real colony on the wall clock."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import sqlite3
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from cells.timer import TIMER, TimerCell
from colony.cell import ParamProblem
from colony.envelope import JsonObject, source_message
from colony.testing import ColonyHarness, spec_for
from tests.conftest import CONTRACT, TreeFactory, hive

START = datetime(2026, 1, 1, 0, 0, 0, 500_000, tzinfo=UTC)
ID = "0190a3f2-0000-7000-8000-0000000000e1"
OTHER = "0190a3f2-0000-7000-8000-0000000000e2"
BODY = {"messages": [{"origin": "user", "type": "text", "text": "stretch your legs"}]}


class FakeClock:
    """Time moves only when a test says so; ``settle`` runs the loop until the cell sleeps."""

    def __init__(self, start: datetime) -> None:
        self.current = start
        self._sleepers: list[tuple[datetime | None, asyncio.Future[None], asyncio.Event]] = []

    def now(self) -> datetime:
        return self.current

    async def wait(self, event: asyncio.Event, seconds: float | None) -> bool:
        if event.is_set():
            return True
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        deadline = None if seconds is None else self.current + timedelta(seconds=seconds)
        entry = (deadline, future, event)
        self._sleepers.append(entry)
        watcher: asyncio.Future[Any] = asyncio.ensure_future(event.wait())
        waiting: set[asyncio.Future[Any]] = {future, watcher}
        try:
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._sleepers.remove(entry)
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        return event.is_set()

    def _parked(self) -> bool:
        return any(not f.done() and not e.is_set() for _, f, e in self._sleepers)

    async def settle(self) -> None:
        for _ in range(1000):
            await asyncio.sleep(0)
            if self._parked():
                return
        raise AssertionError("the timer loop never went back to sleep")

    async def advance(self, seconds: float) -> None:
        self.current += timedelta(seconds=seconds)
        for deadline, future, _ in self._sleepers:
            if deadline is not None and deadline <= self.current and not future.done():
                future.set_result(None)
        await self.settle()

    async def advance_to(self, text: str) -> None:
        target = datetime.fromisoformat(text.replace("Z", "+00:00"))
        await self.advance((target - self.current).total_seconds())


class Recorder:
    """The :class:`colony.cell.CellContext` of the I/O loop: keeps what it emits."""

    path = "/timer"

    def __init__(self) -> None:
        self.emitted: list[tuple[JsonObject, str | None]] = []

    async def emit(
        self, content: JsonObject, target: str | None = None, *, key: str | None = None
    ) -> None:
        self.emitted.append((content, target))


@dataclasses.dataclass
class Running:
    cell: TimerCell
    clock: FakeClock
    ctx: Recorder

    async def op(self, body: Any) -> list[JsonObject]:
        emissions = await self.cell.handle(source_message("/timer", body, ttl=8))
        await self.clock.settle()
        assert all(e.target == "/timer" for e in emissions)
        return [e.content for e in emissions]

    async def tool(self, args: Any, call_id: str = "call-1") -> JsonObject:
        [reply] = await self.op(tool_call(args, call_id))
        return reply

    @property
    def fired(self) -> list[JsonObject]:
        return [content for content, _ in self.ctx.emitted]


@contextlib.asynccontextmanager
async def running(
    params: Any = None, folder: Path | None = None, start: datetime = START
) -> AsyncIterator[Running]:
    spec = dataclasses.replace(spec_for("/timer", params), folder=folder)
    clock = FakeClock(start)
    cell = TimerCell(spec, clock=clock)
    ctx = Recorder()
    task = asyncio.create_task(cell.run(ctx))
    try:
        await clock.settle()
        yield Running(cell, clock, ctx)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await cell.close()


@pytest.fixture
async def timer() -> AsyncIterator[Running]:
    async with running() as t:
        yield t


def tool_call(args: Any, call_id: str = "call-1") -> JsonObject:
    text = args if isinstance(args, str) else json.dumps(args)
    return {"messages": [{"origin": "assistant", "type": "tool_call", "id": call_id, "text": text}]}


def add(schedule_id: str = ID, **fields: Any) -> JsonObject:
    order: JsonObject = {
        "op": "add",
        "schedule_id": schedule_id,
        "schedule_name": "reminder",
        "emit_to": "/notify",
        "emit_body": BODY,
    }
    order.update(fields)
    if "cron" not in order and "at" not in order:
        order["cron"] = "*/10 * * * * *"
    return order


def ack(op: str, schedule_id: str = ID, call_id: str = "call-1") -> JsonObject:
    text = json.dumps({"op": op, "schedule_id": schedule_id, "status": "ok"}, separators=(",", ":"))
    return {
        "header": {"msg_type": "timer_op_ack", "op": op, "schedule_id": schedule_id},
        "messages": [{"origin": "tool", "type": "tool_result", "text": text, "id": call_id}],
    }


def error_of(reply: JsonObject) -> tuple[str, str]:
    header = reply["header"]
    assert header["msg_type"] == "timer_op_error"
    detail: str = reply["meta"]["detail"]
    if header.get("finish_reason") == "error":
        [turn] = reply["messages"]
        assert (turn["origin"], turn["type"], turn["text"]) == ("tool", "tool_result", detail)
    else:
        assert reply["messages"] == []
    return header["error_code"], detail


# -- ops and firings --------------------------------------------------------------------------


async def test_an_added_cron_schedule_is_acked_then_fires_on_its_seconds(timer: Running) -> None:
    reply = await timer.tool(add(emit_headers={"route": "tick", "schedule_name": "spoof"}))
    assert reply == ack("add")
    assert timer.fired == []
    await timer.clock.advance_to("2026-01-01T00:00:09.9Z")
    assert timer.fired == []
    await timer.clock.advance_to("2026-01-01T00:00:10Z")
    [(fired, target)] = timer.ctx.emitted
    assert target == "/notify"
    content = dict(fired)
    header = dict(content.pop("header"))
    assert content == BODY
    assert uuid.UUID(header.pop("event_id"))
    assert header == {
        "route": "tick",
        "schedule_id": ID,
        "schedule_name": "reminder",  # the timer's own fields override emit_headers
        "scheduled_at": "2026-01-01T00:00:10Z",
        "fired_at": "2026-01-01T00:00:10Z",
        "iteration_n": 0,
    }
    await timer.clock.advance(10)
    assert [c["header"]["iteration_n"] for c in timer.fired] == [0, 1]
    assert timer.fired[1]["header"]["scheduled_at"] == "2026-01-01T00:00:20Z"


async def test_a_one_shot_fires_once_without_an_iteration_and_is_completed(
    timer: Running,
) -> None:
    assert await timer.tool(add(at="2026-01-01T00:01:00Z")) == ack("add")
    await timer.clock.advance(120)
    [content] = timer.fired
    assert "iteration_n" not in content["header"]
    assert content["header"]["scheduled_at"] == "2026-01-01T00:01:00Z"
    assert content["header"]["fired_at"] == "2026-01-01T00:02:00Z"  # the clock jumped past it
    await timer.clock.advance(3600)
    assert len(timer.fired) == 1
    assert timer.cell.conn.execute("SELECT status FROM schedules").fetchall() == [("completed",)]


async def test_missed_cron_firings_are_not_caught_up(timer: Running) -> None:
    await timer.tool(add())
    await timer.clock.advance_to("2026-01-01T00:01:05Z")  # six due times went by
    assert [c["header"]["scheduled_at"] for c in timer.fired] == ["2026-01-01T00:00:10Z"]
    await timer.clock.advance_to("2026-01-01T00:01:10Z")
    assert [c["header"]["scheduled_at"] for c in timer.fired][1:] == ["2026-01-01T00:01:10Z"]


async def test_schedules_due_at_the_same_second_all_fire_in_the_order_they_were_added(
    timer: Running,
) -> None:
    await timer.tool(add(OTHER, schedule_name="second", cron="*/5 * * * * *"))
    await timer.tool(add(ID, schedule_name="first"))
    await timer.clock.advance_to("2026-01-01T00:00:10Z")
    names = [c["header"]["schedule_name"] for c in timer.fired]
    assert names == ["second", "second", "first"]  # :05, then :10 for both, in rowid order


async def test_ops_on_the_body_top_level_are_applied_silently(timer: Running) -> None:
    assert await timer.op({"messages": [], **add()}) == []
    await timer.clock.advance(10)
    assert len(timer.fired) == 1
    assert await timer.op({"op": "remove", "schedule_id": ID}) == []
    await timer.clock.advance(60)
    assert len(timer.fired) == 1


async def test_a_tool_call_wins_over_top_level_fields(timer: Running) -> None:
    body = {**add(OTHER), **tool_call(add(ID))}
    [reply] = await timer.op(body)
    assert reply == ack("add", ID)


async def test_errors_on_the_body_top_level_have_no_turn_and_no_finish_reason(
    timer: Running,
) -> None:
    [reply] = await timer.op({"op": "remove", "schedule_id": ID})
    assert "finish_reason" not in reply["header"]
    assert reply["header"]["schedule_id"] == ID
    assert error_of(reply) == ("schedule_not_found", f"remove: schedule {ID} is unknown")


async def test_a_one_shot_in_the_past_is_refused_and_nothing_is_stored(timer: Running) -> None:
    reply = await timer.tool(add(at="2026-01-01T00:00:00Z"))
    assert reply["header"]["finish_reason"] == "error"
    assert reply["messages"][0]["id"] == "call-1"
    code, detail = error_of(reply)
    assert code == "at_in_past"
    assert detail.startswith(
        "add: at 2026-01-01T00:00:00.000Z is not in the future (now 2026-01-01T00:00:00.500Z)"
    )
    assert timer.cell.conn.execute("SELECT count(*) FROM schedules").fetchone() == (0,)


async def test_a_repeated_order_is_one_order_and_a_different_one_is_refused(
    timer: Running,
) -> None:
    assert await timer.tool(add()) == ack("add")
    assert await timer.tool(add(schedule_name="renamed")) == ack("add")  # same moment
    reply = await timer.tool(add(cron="0 * * * * *"))
    assert error_of(reply) == (
        "schedule_id_exists",
        f"add: schedule_id {ID} already names another schedule",
    )
    await timer.clock.advance(10)
    assert len(timer.fired) == 1


async def test_a_removed_schedule_can_be_added_again(timer: Running) -> None:
    await timer.tool(add())
    await timer.clock.advance(10)
    assert await timer.tool({"op": "remove", "schedule_id": ID}) == ack("remove")
    assert error_of(await timer.tool({"op": "remove", "schedule_id": ID}))[0] == (
        "schedule_not_found"
    )
    assert await timer.tool(add(cron="*/30 * * * * *")) == ack("add")
    await timer.clock.advance_to("2026-01-01T00:00:30Z")
    assert [c["header"]["iteration_n"] for c in timer.fired] == [0, 0]


async def test_modify_moves_a_schedule_but_never_switches_its_kind(timer: Running) -> None:
    await timer.tool(add())
    assert await timer.tool(
        {"op": "modify", "schedule_id": ID, "cron": "0 * * * * *", "emit_to": "/elsewhere"}
    ) == ack("modify")
    await timer.clock.advance(30)
    assert timer.fired == []
    await timer.clock.advance_to("2026-01-01T00:01:00Z")
    assert [target for _, target in timer.ctx.emitted] == ["/elsewhere"]
    reply = await timer.tool({"op": "modify", "schedule_id": ID, "at": "2099-01-01T00:00:00Z"})
    code, detail = error_of(reply)
    assert code == "kind_mismatch"
    assert "cannot switch kind" in detail
    reply = await timer.tool({"op": "modify", "schedule_id": OTHER, "schedule_name": "x"})
    assert error_of(reply) == ("schedule_not_found", f"modify: schedule {OTHER} is unknown")


async def test_modify_of_a_one_shot_to_the_past_is_refused(timer: Running) -> None:
    await timer.tool(add(at="2026-01-01T01:00:00Z"))
    reply = await timer.tool({"op": "modify", "schedule_id": ID, "at": "2025-01-01T00:00:00Z"})
    assert error_of(reply)[0] == "at_in_past"
    assert await timer.tool(
        {"op": "modify", "schedule_id": ID, "at": "2026-01-01T00:00:05Z"}
    ) == ack("modify")
    await timer.clock.advance(5)
    assert [c["header"]["scheduled_at"] for c in timer.fired] == ["2026-01-01T00:00:05Z"]


async def test_trigger_fires_now_and_keeps_the_cron_plan(timer: Running) -> None:
    await timer.tool(add())
    await timer.clock.advance(3)
    assert await timer.tool({"op": "trigger", "schedule_id": ID}, "t") == ack(
        "trigger", call_id="t"
    )
    [now] = timer.fired
    assert now["header"]["scheduled_at"] == now["header"]["fired_at"] == "2026-01-01T00:00:03Z"
    assert now["header"]["iteration_n"] == 0
    await timer.clock.advance_to("2026-01-01T00:00:10Z")
    assert [c["header"]["iteration_n"] for c in timer.fired] == [0, 1]


async def test_a_triggered_one_shot_is_done(timer: Running) -> None:
    await timer.tool(add(at="2026-01-01T00:00:30Z"))
    await timer.tool({"op": "trigger", "schedule_id": ID})
    await timer.clock.advance(60)
    assert len(timer.fired) == 1
    code, detail = error_of(await timer.tool({"op": "trigger", "schedule_id": ID}))
    assert (code, detail) == (
        "schedule_not_found",
        f"trigger: schedule {ID} is completed, not active",
    )


@pytest.mark.parametrize(
    ("body", "code", "detail"),
    [
        ({"op": "add"}, "parse_error", "schedule_id: required (a UUID string)"),
        (
            {"op": "remove", "schedule_id": "nope"},
            "parse_error",
            "schedule_id: 'nope' is not a UUID",
        ),
        (
            {"op": "pause", "schedule_id": ID},
            "parse_error",
            "op: unknown value 'pause' (use one of add, modify, remove, trigger)",
        ),
        (
            add(cron="* * * *"),
            "invalid_cron",
            "cron: invalid expression: expected 6 fields (second minute hour day-of-month month day-of-week), got 4",
        ),
        (
            add(at="tomorrow"),
            "parse_error",
            "at: 'tomorrow' is not an RFC 3339 time such as 2099-01-01T09:00:00Z",
        ),
        (
            {**add(), "at": "2099-01-01T00:00:00Z"},
            "parse_error",
            "exactly one of cron or at is required",
        ),
        ({k: v for k, v in add().items() if k != "emit_to"}, "parse_error", "emit_to: required"),
        (
            {k: v for k, v in add().items() if k != "emit_body"},
            "parse_error",
            "emit_body: required",
        ),
        (
            add(emit_body={}),
            "parse_error",
            "emit_body: the body needs at least one of system, messages, attachments",
        ),
        (add(emit_headers=[1]), "parse_error", "emit_headers: must be an object"),
        (
            {"reminder": "x"},
            "parse_error",
            "no op in the body: found reminder, but neither op nor schedule_id",
        ),
    ],
)
async def test_malformed_ops_are_answered_with_their_code(
    timer: Running, body: JsonObject, code: str, detail: str
) -> None:
    reply = await timer.tool(body)
    assert reply["header"]["finish_reason"] == "error"
    assert error_of(reply) == (code, detail)


async def test_a_body_of_carrier_slots_only_says_where_an_op_goes(timer: Running) -> None:
    [reply] = await timer.op({"messages": [{"origin": "user", "type": "text", "text": "hi"}]})
    code, detail = error_of(reply)
    assert code == "parse_error"
    assert detail.startswith("no op in the body: it carries only messages.")


async def test_a_tool_call_that_is_not_json_is_a_parse_error_on_its_id(timer: Running) -> None:
    reply = await timer.tool("{not json", "c7")
    assert reply["messages"][0]["id"] == "c7"
    code, detail = error_of(reply)
    assert code == "parse_error"
    assert detail.startswith("tool_call.text is not valid JSON")


async def test_a_body_that_is_not_an_object_is_invalid_body(timer: Running) -> None:
    [reply] = await timer.op(["not", "an", "object"])
    assert error_of(reply) == ("invalid_body", "the body must be a JSON object")


async def test_a_params_update_is_applied_silently_and_kept(tmp_path: Path) -> None:
    async with running(folder=tmp_path) as t:
        assert await t.op({"params": {"query_timeout_ms": 250}}) == []
        assert t.cell.query_timeout_ms == 250
        [reply] = await t.op({"params": {"schedules": []}})
        assert error_of(reply) == (
            "invalid_input",
            "params.schedules cannot be changed at runtime (mutable: query_timeout_ms)",
        )
    async with running(folder=tmp_path) as t:
        assert t.cell.query_timeout_ms == 250


# -- cell.db ----------------------------------------------------------------------------------


async def test_schedules_outlive_the_cell_and_seeds_apply_to_a_fresh_database_only(
    tmp_path: Path,
) -> None:
    seeds = {"schedules": [add(OTHER, schedule_name="seeded", cron="0 0 * * * *")]}
    async with running(seeds, folder=tmp_path) as t:
        await t.tool(add())
        await t.clock.advance(10)
    assert (tmp_path / "cell.db").exists()
    other_seeds = {"schedules": [add(str(uuid.uuid4()), cron="0 0 * * * *")]}
    async with running(other_seeds, folder=tmp_path, start=START + timedelta(seconds=15)) as t:
        rows = t.cell.conn.execute(
            "SELECT schedule_id, schedule_name, iteration_n FROM schedules ORDER BY rowid"
        ).fetchall()
        assert rows == [(OTHER, "seeded", 0), (ID, "reminder", 1)]
        await t.clock.advance_to("2026-01-01T00:00:20Z")
        assert [c["header"]["iteration_n"] for c in t.fired] == [1]


async def test_a_one_shot_whose_time_passed_while_stopped_never_fires(tmp_path: Path) -> None:
    async with running(folder=tmp_path) as t:
        await t.tool(add(at="2026-01-01T00:00:05Z"))
    async with running(folder=tmp_path, start=START + timedelta(seconds=10)) as t:
        await t.clock.advance(3600)
        assert t.fired == []
        await t.tool(add(OTHER, cron="0 0 * * * *"))  # a replan does not revive it either
        await t.clock.advance(1)
        assert t.fired == []


async def test_a_trigger_before_the_loop_starts_fires_when_it_does() -> None:
    clock = FakeClock(START)
    cell = TimerCell(spec_for("/timer", {"schedules": [add()]}), clock=clock)
    try:
        [reply] = [
            e.content
            for e in await cell.handle(
                source_message("/t", tool_call({"op": "trigger", "schedule_id": ID}), ttl=8)
            )
        ]
        assert reply == ack("trigger")
        ctx = Recorder()
        task = asyncio.create_task(cell.run(ctx))
        await clock.settle()
        assert len(ctx.emitted) == 1
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    finally:
        await cell.close()


# -- params -----------------------------------------------------------------------------------


def problems(params: Any) -> list[ParamProblem]:
    assert TIMER.check_params is not None
    return TIMER.check_params(params, None)


def test_params_and_seeds_are_checked_before_anything_starts() -> None:
    assert problems(None) == []
    assert problems({"schedules": [add()], "query_timeout_ms": 100}) == []
    [zero] = problems({"query_timeout_ms": 0})
    assert (zero.path, zero.code) == (("query_timeout_ms",), "out_of_range")
    [unknown] = problems({"tick": 1})
    assert unknown.code == "unknown_param"
    [bad_cron] = problems({"schedules": [add(cron="61 * * * * *")]})
    assert bad_cron.message == (
        "schedules[0]: cron: invalid expression: second: 61 is outside 0-59"
    )
    [twice] = problems({"schedules": [add(), add()]})
    assert twice.message == f"schedules[1]: schedule_id {ID} appears twice"
    [remove] = problems({"schedules": [{"op": "remove", "schedule_id": ID}]})
    assert remove.message == "schedules[0]: a seed must be an add op"


# -- through a colony, on the wall clock ------------------------------------------------------


def timer_tree(**params: Any) -> dict[str, Any]:
    return {
        "main/config.json": hive(
            {"from": ".", "to": "./remind"},
            {"from": "./remind", "to": "/sink", "condition": "has(hop.msg_type)"},
            {"from": "./remind", "to": "/fired", "condition": "has(hop.event_id)"},
        ),
        "main/remind/config.json": {
            "cell": {"type": "timer", "timeout": -1},
            "params": params,
            "contract": CONTRACT,
        },
    }


async def test_a_tool_lane_adds_triggers_and_is_told_about_unknown_ids(
    make_tree: TreeFactory,
) -> None:
    async with ColonyHarness(
        make_tree(timer_tree()), capture=["/sink", "/fired"], cell_types={"timer": TIMER}
    ) as colony:
        await colony.send("/remind", tool_call(add(at="2099-01-01T09:00:00Z"), "call-add"))
        await colony.settle()
        await colony.send("/remind", tool_call({"op": "trigger", "schedule_id": ID}, "call-trig"))
        await colony.settle()
        dead = "0190a3f2-0000-7000-8000-00000000dead"
        await colony.send("/remind", tool_call({"op": "remove", "schedule_id": dead}, "bogus"))
        await colony.settle()
        added, triggered, missing = colony.captured("/sink")
        [fired] = colony.captured("/fired")
    assert added.headers.hop == {"msg_type": "timer_op_ack", "op": "add", "schedule_id": ID}
    assert added.body["messages"][0]["id"] == "call-add"
    assert triggered.headers.hop["op"] == "trigger"
    assert missing.headers.hop["error_code"] == "schedule_not_found"
    assert missing.body["messages"][0]["id"] == "bogus"
    assert fired.headers.hop["schedule_name"] == "reminder"
    assert isinstance(fired.headers.hop["fired_at"], str)
    assert fired.body == BODY
    assert fired.parent_message_id is None
    assert fired.trace_id != triggered.trace_id  # a firing starts its own trace


@pytest.mark.sqlite_only  # reads the cell's cell.db
async def test_a_cron_every_second_fires_on_the_wall_clock_and_counts_in_cell_db(
    make_tree: TreeFactory,
) -> None:
    tree = timer_tree(schedules=[add(cron="* * * * * *")])
    async with ColonyHarness(
        make_tree(tree), capture=["/sink", "/fired"], cell_types={"timer": TIMER}
    ) as colony:
        for _ in range(50):
            if len(colony.captured("/fired")) >= 2:
                break
            await asyncio.sleep(0.1)
        fired = colony.captured("/fired")
        db = colony.root / "main" / "remind" / "cell.db"
        conn = sqlite3.connect(db)
        try:
            [(iterations,)] = conn.execute("SELECT iteration_n FROM schedules").fetchall()
        finally:
            conn.close()
    assert [m.headers.hop["iteration_n"] for m in fired[:2]] == [0, 1]
    first, second = (m.headers.hop["scheduled_at"] for m in fired[:2])
    assert first < second
    assert fired[0].trace_id != fired[1].trace_id
    assert iterations >= 2
