"""Backpressure without deadlock: a full mailbox overflows instead of making a cell wait, the
colony recovers when it drains, a cell that stops draining is reported by name, and a
wait-cycle (of outside senders) is reported instead of hanging."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from colony.observability import list_logger
from colony.testing import ColonyHarness
from colony.watchdog import WaitGraph, Watchdog, find_cycle
from tests.conformance.cells import TEST_TYPES, user
from tests.conftest import TreeFactory, cell, hive

FAST = {"watchdog_period_ms": 20, "watchdog_threshold": 3}


def has_cycle(edges: dict[str, set[str]]) -> bool:
    """Kahn's algorithm: a graph has a cycle iff some node is never freed of incoming edges."""
    nodes = set(edges) | {t for targets in edges.values() for t in targets}
    incoming = dict.fromkeys(nodes, 0)
    for targets in edges.values():
        for t in targets:
            incoming[t] += 1
    free = [n for n in nodes if incoming[n] == 0]
    seen = 0
    while free:
        node = free.pop()
        seen += 1
        for t in edges.get(node, ()):
            incoming[t] -= 1
            if incoming[t] == 0:
                free.append(t)
    return seen != len(nodes)


paths = st.sampled_from(["/a", "/b", "/c", "/d", "/e"])


@given(st.dictionaries(paths, st.sets(paths, max_size=3), max_size=5))
def test_find_cycle_finds_a_real_cycle_exactly_when_there_is_one(
    edges: dict[str, set[str]],
) -> None:
    cycle = find_cycle(edges)
    assert (cycle is not None) == has_cycle(edges)
    if cycle is not None:
        assert cycle[0] == min(cycle)  # stable: the same cycle reads the same every period
        assert len(set(cycle)) == len(cycle)
        for here, there in zip(cycle, [*cycle[1:], cycle[0]], strict=True):
            assert there in edges[here]


def test_a_cycle_whose_mailboxes_still_move_is_load_not_a_deadlock() -> None:
    graph, records, moved = WaitGraph(), list[dict[str, Any]](), [0]
    log = list_logger(records)
    dog = Watchdog(graph, lambda path: moved[0], period_s=0.01, threshold=3, log=log)
    with graph.waiting("/a", "/b"), graph.waiting("/b", "/a"):
        state = None
        for _ in range(10):
            moved[0] += 1  # a message went through somewhere in the cycle
            state = dog.check(state)
    assert dog.trips == []
    assert records == []


def test_a_stuck_cycle_trips_once_and_is_said_cleared_when_it_goes() -> None:
    graph, records = WaitGraph(), list[dict[str, Any]]()
    fatal: list[str] = []
    log = list_logger(records)
    dog = Watchdog(graph, lambda path: 0, period_s=0.01, threshold=3, log=log, on_trip=fatal.append)
    with graph.waiting("/b", "/a"), graph.waiting("/a", "/b"):
        state = None
        for _ in range(10):
            state = dog.check(state)
    state = dog.check(state)
    assert dog.trips == [["/a", "/b"]]
    assert [(r["level"], r["event"]) for r in records] == [
        ("error", "mailbox_wait_cycle"),
        ("info", "mailbox_wait_cycle_cleared"),
    ]
    assert "/a -> /b -> /a" in records[0]["detail"]
    assert len(fatal) == 1


def ping_pong_tree(make_tree: TreeFactory) -> Any:
    """/a and /b answer every message into each other, through one-slot mailboxes."""
    once = {"emit": [{"messages": user()["messages"]}]}
    return make_tree(
        {
            "main/config.json": hive(
                {"from": ".", "to": "./a"},
                {"from": "./a", "to": "./b"},
                {"from": "./b", "to": "./a"},
            ),
            "main/a/config.json": cell("stateful_echo", once, mailbox_size=1),
            "main/b/config.json": cell("stateful_echo", once, mailbox_size=1),
        }
    )


async def test_a_cycle_through_one_slot_mailboxes_never_stands_still(
    make_tree: TreeFactory,
) -> None:
    # Three messages bounce between /a and /b, whose mailboxes hold one each: a blocking
    # hand-off would deadlock at once. They overflow instead, and each bounces until its TTL
    # runs out.
    root = ping_pong_tree(make_tree)
    colony_json = {**FAST, "watchdog_on_trip": "log-only", "message_default_ttl": 40}
    async with ColonyHarness(root, cell_types=TEST_TYPES, colony=colony_json) as colony:
        await asyncio.gather(*(colony.send("/", user(f"m{i}")) for i in range(3)))
        await colony.settle(timeout=30)
        letters = await colony.dead_letters()
        assert [d.error_code for d in letters] == ["ttl_expired"] * 3
        assert colony.logs("mailbox_wait_cycle") == []
        assert colony.logs("mailbox_stalled") == []
        assert {r["target"] for r in colony.logs("mailbox_full")} <= {"/a", "/b"}


def slow_tree(make_tree: TreeFactory, sleep: float) -> Any:
    return make_tree(
        {
            "main/config.json": hive(
                {"from": ".", "to": "./slow"}, {"from": "./slow", "to": "/sink"}
            ),
            "main/slow/config.json": cell("stateful_echo", {"sleep": sleep}, mailbox_size=1),
        }
    )


async def test_a_cell_that_takes_nothing_while_messages_wait_is_reported_until_it_moves(
    make_tree: TreeFactory,
) -> None:
    colony_json = {**FAST, "watchdog_stall_ms": 200}
    async with ColonyHarness(
        slow_tree(make_tree, 1.0), cell_types=TEST_TYPES, capture=["/sink"], colony=colony_json
    ) as colony:
        asked: list[str] = []
        colony.colony.on_fatal = asked.append
        await asyncio.gather(*(colony.send("/", user(f"m{i}")) for i in range(3)))
        for _ in range(100):
            if colony.logs("mailbox_stalled"):
                break
            await asyncio.sleep(0.02)
        stall = colony.logs("mailbox_stalled")[0]
        assert stall["level"] == "error"
        assert stall["cell"] == "/slow"
        assert stall["waiting"] >= 1
        assert "/slow" in stall["detail"]
        await colony.settle(timeout=30)
        # Each stall is said once and said cleared once the cell takes its next message.
        stalls = [r["cell"] for r in colony.logs("mailbox_stalled")]
        assert stalls == [r["cell"] for r in colony.logs("mailbox_stall_cleared")]
        assert set(stalls) == {"/slow"}
        assert len(colony.captured("/sink")) == 3
        assert asked == []  # a stall is said, never fatal: a slow provider looks the same


async def test_a_busy_cell_that_keeps_taking_messages_is_never_called_stalled(
    make_tree: TreeFactory,
) -> None:
    colony_json = {**FAST, "watchdog_stall_ms": 200}
    async with ColonyHarness(
        slow_tree(make_tree, 0.02), cell_types=TEST_TYPES, capture=["/sink"], colony=colony_json
    ) as colony:
        await asyncio.gather(*(colony.send("/", user(f"m{i}")) for i in range(30)))
        await colony.settle(timeout=30)
        assert len(colony.captured("/sink")) == 30
        assert colony.logs("mailbox_stalled") == []


async def test_a_slow_cell_overflows_and_the_colony_recovers_in_order_when_it_drains(
    make_tree: TreeFactory,
) -> None:
    root = make_tree(
        {
            "main/config.json": hive(
                {"from": ".", "to": "./slow"}, {"from": "./slow", "to": "/sink"}
            ),
            "main/slow/config.json": cell("stateful_echo", {"sleep": 0.01}, mailbox_size=1),
        }
    )
    async with ColonyHarness(root, cell_types=TEST_TYPES, capture=["/sink"], colony=FAST) as colony:
        await asyncio.gather(*(colony.send("/", user(f"m{i}")) for i in range(12)))
        await colony.settle(timeout=30)
        assert [m.body["messages"][0]["text"] for m in colony.captured("/sink")] == [
            f"m{i}" for i in range(12)
        ]
        waits = colony.logs("mailbox_full")
        assert waits
        assert {w["target"] for w in waits} == {"/slow"}  # the WARN names the mailbox
        assert all(w["level"] == "warning" for w in waits)
        assert colony.logs("mailbox_wait_cycle") == []
        assert await colony.dead_letters() == []
