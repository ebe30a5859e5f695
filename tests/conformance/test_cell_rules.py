"""runtime.md §11: mailboxes, the consumes gate, the backstop, supervision, restarts, boot."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from colony.cell import CellClass, CellContext, CellSpec, CellType
from colony.envelope import Envelope
from colony.errors import ConfigError
from colony.persist.records import read_registry
from colony.testing import ColonyHarness
from tests.conformance.cells import CALLS, TEST_TYPES, user
from tests.conftest import CONTRACT, TreeFactory, cell, hive


def harness(root: Any, **kwargs: Any) -> ColonyHarness:
    kwargs.setdefault("capture", ["/sink"])
    types = {**TEST_TYPES, **kwargs.pop("extra_types", {})}
    return ColonyHarness(root, cell_types=types, **kwargs)


def state_of(runner: Any) -> str:
    # A function, so mypy does not narrow the state across awaits that change it.
    return str(runner.state.value)


def chain(cell_type: str = "echo", params: Any = None, **cell_keys: Any) -> dict[str, Any]:
    return {
        "main/config.json": hive({"from": ".", "to": "./a"}, {"from": "./a", "to": "/sink"}),
        "main/a/config.json": cell(cell_type, params, **cell_keys),
    }


# -- rule 22: the consumes gate ---------------------------------------------------------------


def _consuming_tree() -> dict[str, Any]:
    tree = chain()
    doc = tree["main/a/config.json"]
    doc["contract"] = {**CONTRACT, "consumes": {"hop": {"operation": {"type": "string"}}}}
    return tree


async def test_a_missing_required_consumes_key_answers_reply_to_and_never_calls_the_cell(
    make_tree: TreeFactory,
) -> None:
    async with harness(make_tree(_consuming_tree())) as colony:
        await colony.send("/a", user(), context={"turn_id": "t"}, reply_to="/sink")
        await colony.settle()
        [reply] = colony.captured("/sink")
        assert reply.headers.hop == {"finish_reason": "error", "error_code": "consumes_violation"}
        assert reply.headers.context == {"turn_id": "t"}
        assert "operation" in reply.body["messages"][0]["text"]
        assert "/a" not in CALLS
        assert await colony.dead_letters() == []


async def test_a_missing_required_consumes_key_without_reply_to_is_a_dead_letter(
    make_tree: TreeFactory,
) -> None:
    async with harness(make_tree(_consuming_tree())) as colony:
        await colony.send("/a", user())
        await colony.send("/a", user(), hop={"operation": 5})  # wrong type
        await colony.send("/a", user(), hop={"operation": "select"})
        await colony.settle()
        assert [d.error_code for d in await colony.dead_letters()] == ["consumes_violation"] * 2
        assert len(CALLS["/a"]) == 1


# -- rule 23: mailbox capacity ----------------------------------------------------------------


async def test_mailbox_capacity_is_the_colony_default_unless_the_cell_sets_its_own(
    make_tree: TreeFactory,
) -> None:
    tree = chain()
    tree["main/b/config.json"] = cell("echo", mailbox_size=3)
    tree["main/config.json"]["params"]["graph"]["edges"].append({"from": "./b", "to": "/sink"})
    async with harness(make_tree(tree)) as colony:
        assert colony.colony.runners["/a"].mailbox.capacity == 1000
        assert colony.colony.runners["/b"].mailbox.capacity == 3
    async with harness(make_tree(tree), colony={"mailbox_default_capacity": 7}) as colony:
        assert colony.colony.runners["/a"].mailbox.capacity == 7


async def test_mailbox_size_zero_refuses_the_boot(make_tree: TreeFactory) -> None:
    with pytest.raises(ConfigError, match="mailbox_size_zero"):
        async with harness(make_tree(chain(mailbox_size=0))):
            pass


# -- rule 24: a full mailbox names itself -----------------------------------------------------


async def test_a_delivery_to_a_full_mailbox_warns_naming_the_mailbox_before_it_waits(
    make_tree: TreeFactory,
) -> None:
    tree = chain("stateful_echo", {"sleep": 0.05}, mailbox_size=1)
    async with harness(make_tree(tree)) as colony:
        await asyncio.gather(*(colony.send("/a", user(f"m{i}")) for i in range(4)))
        await colony.settle()
        warnings = colony.logs("mailbox_full", "warning")
        assert warnings
        assert {w["target"] for w in warnings} == {"/a"}
        assert warnings[0]["mailbox_capacity"] == 1
        assert len(colony.captured("/sink")) == 4  # blocked, never dropped


async def test_routing_normally_logs_no_mailbox_warning(make_tree: TreeFactory) -> None:
    async with harness(make_tree(chain())) as colony:
        for i in range(5):
            await colony.send("/", user(f"m{i}"))
        await colony.settle()
        assert colony.logs("mailbox_full") == []
        assert len(colony.captured("/sink")) == 5


# -- rule 25: a crash keeps the queued messages -----------------------------------------------


async def test_a_crashing_stateful_cell_gets_its_queued_messages_in_order_after_restart(
    make_tree: TreeFactory,
) -> None:
    tree = chain("stateful_echo", {"crash_on": "boom", "sleep": 0.02})
    async with harness(make_tree(tree)) as colony:
        for text in ("boom", "m1", "m2", "m3"):
            await colony.send("/a", user(text))
        await colony.settle()
        texts = [m.body["messages"][-1]["text"] for m in colony.captured("/sink")]
        assert texts == ["m1", "m2", "m3"]
        [letter] = await colony.dead_letters()
        assert letter.error_code == "cell_crashed"
        assert letter.message.body["messages"][-1]["text"] == "boom"
        assert colony.colony.runners["/a"].restarts == 1
        [line] = colony.logs("cell_crashed", "error")
        assert line["message_id"] == letter.message_id


async def test_a_crash_in_a_stateless_cell_loses_only_that_message_to_the_dead_letters(
    make_tree: TreeFactory,
) -> None:
    async with harness(make_tree(chain("echo", {"crash_on": "boom"}))) as colony:
        await colony.send("/a", user("boom"))
        await colony.send("/a", user("fine"))
        await colony.settle()
        assert [m.body["messages"][-1]["text"] for m in colony.captured("/sink")] == ["fine"]
        assert [d.error_code for d in await colony.dead_letters()] == ["cell_crashed"]


# -- rule 26: the message_timeout backstop ----------------------------------------------------


async def test_the_message_timeout_backstop_answers_reply_to_and_restarts_the_cell(
    make_tree: TreeFactory,
) -> None:
    tree = chain("stateful_echo", {"sleep": 5}, message_timeout=50)
    async with harness(make_tree(tree)) as colony:
        started = time.monotonic()
        await colony.send("/a", user(), context={"turn_id": "t"}, reply_to="/sink")
        await colony.settle()
        assert time.monotonic() - started < 2
        [reply] = colony.captured("/sink")
        assert reply.headers.hop == {"finish_reason": "error", "error_code": "message_timeout"}
        assert reply.headers.context == {"turn_id": "t"}
        assert reply.body["messages"][0]["text"] == "message_timeout backstop elapsed"
        assert colony.colony.runners["/a"].restarts == 1


async def test_a_backstop_expiry_nobody_awaits_is_a_dead_letter(make_tree: TreeFactory) -> None:
    tree = chain("echo", {"sleep": 5}, message_timeout=50)
    async with harness(make_tree(tree)) as colony:
        await colony.send("/a", user())
        await colony.settle()
        assert [d.error_code for d in await colony.dead_letters()] == ["message_timeout"]


@pytest.mark.parametrize("setting", [0, -1])
async def test_message_timeout_zero_or_negative_turns_the_backstop_off(
    make_tree: TreeFactory, setting: int
) -> None:
    tree = chain("stateful_echo", {"sleep": 0.2}, message_timeout=setting)
    async with harness(make_tree(tree), colony={"message_timeout_default_ms": 50}) as colony:
        await colony.send("/a", user())
        await colony.settle()
        assert len(colony.captured("/sink")) == 1
        assert await colony.dead_letters() == []


async def test_long_running_cells_ignore_the_backstop(make_tree: TreeFactory) -> None:
    tree = chain("looping_echo", {"sleep": 0.2})
    async with harness(make_tree(tree), colony={"message_timeout_default_ms": 50}) as colony:
        await colony.send("/a", user())
        await colony.settle()
        assert len(colony.captured("/sink")) == 1


# -- rule 27: restart_limit, then failed ------------------------------------------------------


async def test_a_cell_that_dies_past_its_restart_limit_is_failed_and_then_cell_inactive(
    make_tree: TreeFactory,
) -> None:
    tree = chain("stateful_echo", {"crash_on": "boom"}, restart_limit=1)
    async with harness(make_tree(tree)) as colony:
        await colony.send("/a", user("boom"))
        await colony.send("/a", user("boom"))
        await colony.settle()
        runner = colony.colony.runners["/a"]
        assert state_of(runner) == "failed"
        assert not runner.active
        await colony.send("/a", user("after"))
        await colony.settle()
        codes = [d.error_code for d in await colony.dead_letters()]
        assert codes == ["cell_crashed", "cell_crashed", "cell_inactive"]
        assert colony.logs("cell_failed", "error")
        assert read_registry(colony.colony.db.source)["/a"].status == "failed"


# -- stateless concurrency --------------------------------------------------------------------


class _Gauge:
    running = 0
    peak = 0

    def __init__(self, spec: CellSpec) -> None:
        pass

    async def handle(self, message: Envelope) -> list[Any]:
        _Gauge.running += 1
        _Gauge.peak = max(_Gauge.peak, _Gauge.running)
        await asyncio.sleep(0.05)
        _Gauge.running -= 1
        return [{"messages": []}]


async def test_a_stateless_cell_runs_up_to_max_concurrency_messages_at_once(
    make_tree: TreeFactory,
) -> None:
    _Gauge.peak = 0
    gauge = CellType("gauge", CellClass.STATELESS, _Gauge)
    async with harness(
        make_tree(chain("gauge", {"max_concurrency": 3})), extra_types={"gauge": gauge}
    ) as colony:
        for i in range(9):
            await colony.send("/a", user(f"m{i}"))
        await colony.settle()
        assert _Gauge.peak == 3
        assert len(colony.captured("/sink")) == 9


# -- long-running cells: their own emissions start new traces ---------------------------------


class _Ticker:
    def __init__(self, spec: CellSpec) -> None:
        pass

    async def handle(self, message: Envelope) -> None:
        return None

    async def run(self, ctx: CellContext) -> None:
        for n in range(2):
            await ctx.emit({"header": {"tick": n}, "messages": []})


async def test_a_long_running_cells_own_emissions_start_fresh_traces_with_the_default_ttl(
    make_tree: TreeFactory,
) -> None:
    ticker = CellType("ticker", CellClass.LONG_RUNNING, _Ticker)
    tree = {
        "main/config.json": hive({"from": "./t", "to": "/sink"}),
        "main/t/config.json": cell("ticker"),
    }
    async with harness(
        make_tree(tree), extra_types={"ticker": ticker}, colony={"message_default_ttl": 30}
    ) as colony:
        for _ in range(100):
            if len(colony.captured("/sink")) == 2:
                break
            await asyncio.sleep(0.01)
        await colony.settle()
        first, second = colony.captured("/sink")
        assert [first.headers.hop, second.headers.hop] == [{"tick": 0}, {"tick": 1}]
        assert first.trace_id != second.trace_id
        assert first.parent_message_id is None
        assert first.headers.context == {}
        assert first.ttl == 29
        log = await colony.message_log(first.trace_id)
        assert [(r.from_path, r.to_path) for r in log] == [("@external", "/sink")]


# -- boot and restarts ------------------------------------------------------------------------


async def test_a_dead_letter_written_before_a_restart_is_returned_after_it(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    root = make_tree({"main/config.json": hive()})
    async with harness(root, workdir=tmp_path / "run") as colony:
        await colony.send("/nowhere", user())
        await colony.settle()
    async with harness(root, workdir=tmp_path / "run") as colony:
        [letter] = await colony.dead_letters()
        assert (letter.error_code, letter.resolved_target) == ("unresolved_path", "/nowhere")


async def test_cell_ids_stay_the_same_across_restarts(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    root = make_tree(chain())
    async with harness(root, workdir=tmp_path / "run") as colony:
        first = colony.colony.runners["/a"].cell_id
    async with harness(root, workdir=tmp_path / "run") as colony:
        assert colony.colony.runners["/a"].cell_id == first


async def test_an_edge_to_a_path_nobody_registers_boots_and_its_traffic_is_unresolved(
    make_tree: TreeFactory,
) -> None:
    # --validate only warns about it (as meclaw's does), so the boot does not refuse it either.
    tree = {"main/config.json": hive({"from": ".", "to": "/sink"}, {"from": ".", "to": "/park"})}
    async with harness(make_tree(tree), capture=["/sink"]) as colony:
        await colony.send("/", user())
        await colony.settle()
        assert len(colony.captured("/sink")) == 1
        [letter] = await colony.dead_letters()
        assert (letter.error_code, letter.resolved_target) == ("unresolved_path", "/park")


@pytest.mark.parametrize(
    "colony_json",
    [{"no_such_key": 1}, {"schema_version": 2}, {"watchdog_threshold": 0}],
)
async def test_a_bad_colony_json_refuses_the_boot(
    make_tree: TreeFactory, colony_json: dict[str, Any]
) -> None:
    root = make_tree({"colony.json": colony_json, "main/config.json": hive()})
    with pytest.raises(ConfigError):
        async with harness(root):
            pass


async def test_an_unknown_cell_key_refuses_the_boot(make_tree: TreeFactory) -> None:
    with pytest.raises(ConfigError, match="unknown_key"):
        async with harness(make_tree(chain(mailbox_sise=4))):
            pass


async def test_a_missing_variable_refuses_the_boot_and_env_supplies_it(
    make_tree: TreeFactory,
) -> None:
    tree = chain("echo", {"key": "${MECLAW_HARNESS_KEY}"})
    with pytest.raises(ConfigError, match="env_var_missing"):
        async with harness(make_tree(tree)):
            pass
    async with harness(make_tree(tree), env={"MECLAW_HARNESS_KEY": "x"}) as colony:
        assert colony.colony.runners["/a"].spec.params == {"key": "x"}


async def test_the_harness_never_writes_the_original_tree(make_tree: TreeFactory) -> None:
    root = make_tree(chain())
    before = sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))
    async with harness(root, colony={"message_default_ttl": 9}, env={"A": "b"}) as colony:
        await colony.send("/", user())
        await colony.settle()
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) == before


# -- hot and cold stateful cells --------------------------------------------------------------


async def test_an_idle_stateful_cell_sleeps_and_the_next_message_wakes_it(
    make_tree: TreeFactory,
) -> None:
    async with harness(make_tree(chain("stateful_echo", idle_timeout_ms=30))) as colony:
        runner = colony.colony.runners["/a"]
        assert state_of(runner) == "not_yet_spawned"
        await colony.send("/a", user("one"))
        await colony.settle()
        assert state_of(runner) == "awake"
        for _ in range(100):
            if state_of(runner) == "asleep":
                break
            await asyncio.sleep(0.01)
        assert state_of(runner) == "asleep"
        await colony.send("/a", user("two"))
        await colony.settle()
        assert [m.body["messages"][-1]["text"] for m in colony.captured("/sink")] == ["one", "two"]


async def test_a_one_shot_stateful_cell_sleeps_after_every_message(make_tree: TreeFactory) -> None:
    async with harness(make_tree(chain("stateful_echo", timeout=1))) as colony:
        await colony.send("/a", user())
        await colony.settle()
        assert state_of(colony.colony.runners["/a"]) == "asleep"
