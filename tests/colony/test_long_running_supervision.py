"""A long-running cell's messages in hand across a crash of its I/O loop, a restart and a stop,
and the pauses between its restarts (colony/runner.py), with both intakes: one message at a
time and ``handles_concurrently``."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from colony import runner as runner_module
from colony.cell import CellClass, CellContext, CellSpec, CellType
from colony.envelope import Envelope
from colony.runner import CellRunner, _RestartPause
from colony.testing import ColonyHarness
from tests.conformance.cells import TEST_TYPES, user
from tests.conftest import TreeFactory, cell, hive

INTAKES = pytest.mark.parametrize("concurrent", [False, True], ids=["serial", "concurrent"])


async def _park() -> None:
    await asyncio.Event().wait()


@dataclass
class Script:
    """What the probe cell does, and what it went through."""

    io: Callable[[int], Awaitable[None]] | None = None
    """The I/O loop of the n-th instance (0 first); None: it parks."""
    hold: Callable[[], Awaitable[object]] | None = None
    """What ``handle`` waits for before it answers; None: nothing."""
    handled: list[str] = field(default_factory=list)
    """Trace ids of the messages handed to ``handle``."""
    events: list[str] = field(default_factory=list)
    handling: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    go: asyncio.Event = field(default_factory=asyncio.Event)
    runner: CellRunner | None = None


def _fails_once_a_message_is_in_hand(
    script: Script, first: Callable[[], None] | None = None
) -> Callable[[int], Awaitable[None]]:
    """An I/O loop whose first instance fails once the cell is handling a message (``first``
    run just before); later instances run until stopped."""

    async def io(instance: int) -> None:
        if instance > 0:
            await _park()
        await script.handling.wait()
        if first is not None:
            first()
        raise RuntimeError("the I/O loop fails")

    return io


class _Probe:
    def __init__(self, script: Script, instance: int) -> None:
        self.script = script
        self.instance = instance

    async def handle(self, message: Envelope) -> list[Any]:
        script = self.script
        script.handled.append(message.trace_id)
        script.events.append("handle")
        script.handling.set()
        if script.hold is not None:
            try:
                await script.hold()
            except asyncio.CancelledError:
                script.events.append("cancelled")
                raise
        script.events.append("handled")
        return [{"messages": []}]

    async def run(self, ctx: CellContext) -> None:
        io = self.script.io
        await (_park() if io is None else io(self.instance))

    async def close(self) -> None:
        runner = self.script.runner
        settled = "?" if runner is None else runner.handled
        self.script.events.append(f"closed ({settled} settled)")


@dataclass
class Letters:
    """A probe whose messages say what they do: each waits for the gate named by its text, and
    one whose text is in ``crash`` then raises. Its I/O loop parks, and takes ``io_cleanup_s``
    to end once cancelled."""

    crash: set[str] = field(default_factory=set)
    io_cleanup_s: float = 0.0
    events: list[str] = field(default_factory=list)
    """``<instance>:<what> <text>``, e.g. ``0:start A``."""
    gates: dict[str, asyncio.Event] = field(default_factory=dict)

    def gate(self, text: str) -> asyncio.Event:
        return self.gates.setdefault(text, asyncio.Event())


class _Lettered:
    def __init__(self, script: Letters, instance: int) -> None:
        self.script = script
        self.instance = instance
        self.io_alive = False

    async def handle(self, message: Envelope) -> list[Any]:
        script, n = self.script, self.instance
        text = message.body["messages"][0]["text"]
        script.events.append(f"{n}:start {text}")
        await script.gate(text).wait()
        if text in script.crash:
            raise RuntimeError(f"{text} crashes")
        script.events.append(f"{n}:end {text} io_alive={self.io_alive}")
        return [{"messages": []}]

    async def run(self, ctx: CellContext) -> None:
        self.io_alive = True
        try:
            await _park()
        finally:
            self.script.events.append(f"{self.instance}:io cancelled")
            await asyncio.sleep(self.script.io_cleanup_s)
            self.io_alive = False


def _harness(
    make_tree: TreeFactory,
    script: Script | Letters,
    *,
    concurrent: bool,
    max_concurrency: int = 4,
    **kwargs: Any,
) -> ColonyHarness:
    instances = itertools.count()

    def build(spec: CellSpec) -> _Probe | _Lettered:
        if isinstance(script, Script):
            return _Probe(script, next(instances))
        return _Lettered(script, next(instances))

    probe = CellType("probe", CellClass.LONG_RUNNING, build, handles_concurrently=concurrent)
    restart_limit = kwargs.pop("restart_limit", 20)
    params = {"max_concurrency": max_concurrency}
    tree = {
        "main/config.json": hive({"from": ".", "to": "./a"}, {"from": "./a", "to": "/sink"}),
        "main/a/config.json": cell("probe", params, restart_limit=restart_limit),
    }
    return ColonyHarness(
        make_tree(tree), capture=["/sink"], cell_types={**TEST_TYPES, "probe": probe}, **kwargs
    )


async def _until(condition: Callable[[], object], seconds: float = 5) -> None:
    async with asyncio.timeout(seconds):
        while not condition():  # noqa: ASYNC110 (log lines and restarts have no event)
            await asyncio.sleep(0.01)


def _state(runner: CellRunner) -> str:
    return str(runner.state.value)


@INTAKES
@pytest.mark.parametrize("turns", range(4))
async def test_a_message_taken_as_the_io_loop_crashes_is_handled_once_and_counted_out(
    make_tree: TreeFactory, concurrent: bool, turns: int
) -> None:
    # The I/O loop puts a message into its own cell's mailbox and crashes ``turns`` loop turns
    # later: whichever turn the intake takes it in, it is handled once, and wait_idle returns.
    script = Script()
    sent: list[str] = []

    async def io(instance: int) -> None:
        if instance > 0:
            await _park()
        await script.go.wait()
        sent.append(await colony.send("/a", user()))
        for _ in range(turns):
            await asyncio.sleep(0)
        raise RuntimeError("the I/O loop fails")

    script.io = io
    async with _harness(make_tree, script, concurrent=concurrent) as colony:
        runner = colony.colony.runners["/a"]
        script.go.set()
        await colony.settle(timeout=5)
        assert script.handled == sent
        assert runner.restarts == 1
        assert len(colony.captured("/sink")) == 1
        assert colony.colony.in_flight.count == 0


@INTAKES
@pytest.mark.parametrize("turns", range(4))
async def test_a_message_taken_as_a_stop_comes_is_counted_out_and_kept_for_the_next_boot(
    make_tree: TreeFactory, tmp_path: Path, concurrent: bool, turns: int
) -> None:
    script = Script(hold=_park)
    stopping: list[asyncio.Task[None]] = []
    sent: list[str] = []

    async def io(instance: int) -> None:
        await script.go.wait()
        sent.append(await colony.send("/a", user()))
        for _ in range(turns):
            await asyncio.sleep(0)
        assert script.runner is not None
        stopping.append(asyncio.create_task(script.runner.stop()))
        await _park()

    script.io = io
    async with _harness(
        make_tree, script, concurrent=concurrent, workdir=tmp_path / "run"
    ) as colony:
        script.runner = runner = colony.colony.runners["/a"]
        script.go.set()
        await _until(lambda: stopping)
        await stopping[0]
        # queued messages stay counted in; one taken into the cell is counted out
        assert colony.colony.in_flight.count == runner.mailbox.qsize()
        # whether or not its handling had begun, the cell was closed, nothing settled
        assert script.events in (
            ["closed (0 settled)"],
            ["handle", "cancelled", "closed (0 settled)"],
        )
    again = Script()
    async with _harness(
        make_tree, again, concurrent=concurrent, workdir=tmp_path / "run"
    ) as colony:
        await colony.settle(timeout=5)
        assert again.handled == sent  # at-least-once: the journal kept it
        assert len(colony.captured("/sink")) == 1


@INTAKES
async def test_a_stop_cancels_a_slow_handling_at_once_closes_the_cell_and_keeps_the_message(
    make_tree: TreeFactory, tmp_path: Path, concurrent: bool
) -> None:
    script = Script(hold=lambda: asyncio.sleep(3))
    async with _harness(
        make_tree, script, concurrent=concurrent, workdir=tmp_path / "run"
    ) as colony:
        trace = await colony.send("/a", user())
        async with asyncio.timeout(5):
            await script.handling.wait()
        began = time.monotonic()
    assert time.monotonic() - began < 1
    assert script.events == ["handle", "cancelled", "closed (? settled)"]
    again = Script()
    async with _harness(
        make_tree, again, concurrent=concurrent, workdir=tmp_path / "run"
    ) as colony:
        await colony.settle(timeout=5)
        assert again.handled == [trace]
        assert len(colony.captured("/sink")) == 1


@INTAKES
async def test_a_restart_lets_the_message_in_hand_finish_and_settle_before_the_cell_closes(
    make_tree: TreeFactory, concurrent: bool
) -> None:
    script = Script()
    script.hold = script.release.wait

    script.io = _fails_once_a_message_is_in_hand(script)
    async with _harness(make_tree, script, concurrent=concurrent) as colony:
        script.runner = runner = colony.colony.runners["/a"]
        await colony.send("/a", user())
        await _until(lambda: colony.logs("cell_io_crashed"))
        await asyncio.sleep(0.05)
        assert script.events == ["handle"]  # the instance waits for it
        script.release.set()
        await colony.settle(timeout=5)
        assert script.events == ["handle", "handled", "closed (1 settled)"]
        assert len(colony.captured("/sink")) == 1
        assert runner.restarts == 1
        assert _state(runner) == "awake"


@INTAKES
async def test_a_message_still_in_hand_when_the_restart_drain_ends_settles_as_a_timeout(
    make_tree: TreeFactory, monkeypatch: pytest.MonkeyPatch, concurrent: bool
) -> None:
    monkeypatch.setattr(runner_module, "RESTART_DRAIN_S", 0.1)
    script = Script(hold=_park)

    script.io = _fails_once_a_message_is_in_hand(script)
    async with _harness(make_tree, script, concurrent=concurrent) as colony:
        script.runner = runner = colony.colony.runners["/a"]
        await colony.send("/a", user())
        await colony.settle(timeout=5)
        assert script.events == ["handle", "cancelled", "closed (1 settled)"]
        [letter] = await colony.dead_letters()
        assert letter.error_code == "message_timeout"
        [line] = colony.logs("message_timeout")
        assert "restart drain" in line["detail"]
        assert runner.restarts == 1


async def test_a_message_of_a_lost_partition_still_in_hand_when_the_drain_ends_is_said_dropped(
    make_tree: TreeFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # In a cluster, settle drops a message whose partition this node lost (hand_off_dropped):
    # the line on its drain's end must not say it is settled as a backstop expiry.
    monkeypatch.setattr(runner_module, "RESTART_DRAIN_S", 0.1)
    script = Script(hold=_park)

    def moved() -> None:
        assert script.runner is not None
        script.runner.stale = lambda message: True  # the partition moved to another node

    script.io = _fails_once_a_message_is_in_hand(script, first=moved)
    async with _harness(make_tree, script, concurrent=True) as colony:
        script.runner = colony.colony.runners["/a"]
        await colony.send("/a", user())
        await _until(lambda: colony.logs("message_timeout"))
        [line] = colony.logs("message_timeout")
        assert "settled as a backstop expiry" not in line["detail"]
        assert "no longer owns" in line["detail"]


async def test_a_long_running_cell_that_keeps_failing_pauses_longer_before_each_restart(
    make_tree: TreeFactory,
) -> None:
    script = Script()
    starts: list[float] = []

    async def io(instance: int) -> None:
        starts.append(time.monotonic())
        raise RuntimeError("the outside server is not up yet")

    script.io = io
    async with _harness(make_tree, script, concurrent=True, restart_limit=4) as colony:
        runner = colony.colony.runners["/a"]
        await _until(lambda: _state(runner) == "failed")
        pauses = [line["pause_ms"] for line in colony.logs("cell_restarting")]
        assert pauses == [0, 100, 200, 400]
        gaps = [b - a for a, b in itertools.pairwise(starts)]
        assert len(gaps) == 4
        assert gaps[0] < 0.1
        assert [gap >= pause / 1000 for gap, pause in zip(gaps, pauses, strict=True)] == [True] * 4


async def test_a_stop_during_a_restart_pause_returns_at_once(
    make_tree: TreeFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner_module, "RESTART_PAUSE_FIRST_S", 3.0)
    script = Script()

    async def io(instance: int) -> None:
        raise RuntimeError("the outside server is not up yet")

    script.io = io
    async with _harness(make_tree, script, concurrent=False) as colony:
        runner = colony.colony.runners["/a"]
        await _until(lambda: runner.restarts == 2)  # now in a pause of 3 s
        began = time.monotonic()
    assert time.monotonic() - began < 1
    assert _state(runner) == "stopped"


@INTAKES
async def test_a_stop_while_a_restarting_instance_winds_down_stops_the_cell_for_good(
    make_tree: TreeFactory, concurrent: bool
) -> None:
    # A crash aborts the instance's task group, which waits for the I/O loop to clean up;
    # a stop that comes then must not be taken for the group's own cancel (Python 3.11's
    # TaskGroup swallows it): no drain, no new instance, and stop() returns.
    script = Letters(crash={"A"}, io_cleanup_s=0.3)
    script.gate("A").set()
    async with _harness(make_tree, script, concurrent=concurrent) as colony:
        runner = colony.colony.runners["/a"]
        await colony.send("/a", user("A"))
        await _until(lambda: "0:io cancelled" in script.events)
        stopping = asyncio.create_task(runner.stop())
        done, _ = await asyncio.wait({stopping}, timeout=2)
        assert done, "runner.stop() did not return"
        assert _state(runner) == "stopped"
        assert runner.restarts == 0
        assert script.events == ["0:start A", "0:io cancelled"]


async def test_a_message_that_restarts_the_cell_lets_the_others_in_hand_finish_beside_the_io_loop(
    make_tree: TreeFactory,
) -> None:
    # An mcp or subcolony cell's replies come through its I/O loop: the messages in hand when
    # another one's crash restarts the cell must finish before that loop is cancelled.
    script = Letters(crash={"A"})
    async with _harness(make_tree, script, concurrent=True) as colony:
        runner = colony.colony.runners["/a"]
        await colony.send("/a", user("A"))
        await colony.send("/a", user("B"))
        await _until(lambda: "0:start B" in script.events)
        script.gate("A").set()
        await _until(lambda: colony.logs("cell_crashed"))
        await asyncio.sleep(0.05)
        script.gate("B").set()
        await colony.settle(timeout=5)
        assert script.events == [
            "0:start A",
            "0:start B",
            "0:end B io_alive=True",
            "0:io cancelled",
        ]
        assert runner.restarts == 1


async def test_a_crash_that_frees_the_last_slot_leaves_the_next_message_to_the_new_instance(
    make_tree: TreeFactory,
) -> None:
    script = Letters(crash={"A"})
    script.gate("B").set()
    async with _harness(make_tree, script, concurrent=True, max_concurrency=1) as colony:
        runner = colony.colony.runners["/a"]
        await colony.send("/a", user("A"))
        await colony.send("/a", user("B"))
        await _until(lambda: "0:start A" in script.events and runner.mailbox.qsize() == 1)
        script.gate("A").set()  # A's slot frees as A crashes; B waits for the next instance
        await colony.settle(timeout=5)
        assert script.events == [
            "0:start A",
            "0:io cancelled",
            "1:start B",
            "1:end B io_alive=True",
        ]


def _failing_settle(colony: ColonyHarness, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    """Settling the message whose text is ``text`` raises (a storage failure, say)."""
    host = colony.colony
    real = host.settle

    async def settle(runner: CellRunner, message: Envelope | None, *args: Any, **kw: Any) -> None:
        if message is not None and message.body["messages"][0]["text"] == text:
            raise RuntimeError(f"settling {text} failed")
        await real(runner, message, *args, **kw)

    monkeypatch.setattr(host, "settle", settle)


@INTAKES
async def test_a_message_in_hand_that_cannot_be_settled_is_logged_as_such_and_restarts_the_cell(
    make_tree: TreeFactory, monkeypatch: pytest.MonkeyPatch, concurrent: bool
) -> None:
    script = Letters()
    script.gate("B").set()
    async with _harness(make_tree, script, concurrent=concurrent) as colony:
        runner = colony.colony.runners["/a"]
        _failing_settle(colony, monkeypatch, "B")
        await colony.send("/a", user("B"))
        await _until(lambda: runner.restarts == 1)
        [line] = colony.logs("cell_settle_failed")
        assert line["error"] == "RuntimeError: settling B failed"
        assert "settle" in line["traceback"]
        assert colony.logs("cell_io_crashed") == []


@INTAKES
async def test_a_message_whose_settling_fails_while_the_cell_stops_is_logged(
    make_tree: TreeFactory, monkeypatch: pytest.MonkeyPatch, concurrent: bool
) -> None:
    # B ends while the stop waits for the I/O loop's cleanup, before the stop takes stock of
    # the messages in hand: its failure must still leave a line.
    script = Letters(io_cleanup_s=0.2)
    async with _harness(make_tree, script, concurrent=concurrent) as colony:
        runner = colony.colony.runners["/a"]
        _failing_settle(colony, monkeypatch, "B")
        await colony.send("/a", user("B"))
        await _until(lambda: "0:start B" in script.events)
        stopping = asyncio.create_task(runner.stop())
        await _until(lambda: "0:io cancelled" in script.events)
        script.gate("B").set()
        await stopping
        [line] = colony.logs("cell_settle_failed")
        assert line["error"] == "RuntimeError: settling B failed"


async def test_a_serial_long_running_cell_keeps_its_messages_in_order_across_a_crash(
    make_tree: TreeFactory,
) -> None:
    script = Letters(crash={"C"})
    async with _harness(make_tree, script, concurrent=False) as colony:
        for text in "ABCDEF":
            script.gate(text).set()
            await colony.send("/a", user(text))
        await colony.settle(timeout=5)
    handled = [event for event in script.events if ":start" in event or ":end" in event]
    assert handled == [
        *("0:start A", "0:end A io_alive=True", "0:start B", "0:end B io_alive=True"),
        "0:start C",  # it crashes: the next instance takes D
        *("1:start D", "1:end D io_alive=True", "1:start E", "1:end E io_alive=True"),
        *("1:start F", "1:end F io_alive=True"),
    ]


def test_restart_pauses_double_up_to_five_seconds_and_start_over_after_a_long_run() -> None:
    pause = _RestartPause()
    series = [pause.next(0.5) for _ in range(9)]
    assert series == pytest.approx([0, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0])
    assert pause.next(runner_module.RESTART_PAUSE_RESET_S) == 0
    assert pause.next(0.5) == pytest.approx(0.1)
