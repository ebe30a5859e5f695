"""Backpressure without deadlock: full mailboxes make producers wait, the colony recovers when
they drain, and a wait-cycle among full mailboxes is reported by name instead of hanging."""

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
    """/a and /b answer every message twice, into each other, through one-slot mailboxes."""
    twice = {"emit": [{"messages": user()["messages"]}] * 2}
    return make_tree(
        {
            "main/config.json": hive(
                {"from": ".", "to": "./a"},
                {"from": "./a", "to": "./b"},
                {"from": "./b", "to": "./a"},
            ),
            "main/a/config.json": cell("stateful_echo", twice, mailbox_size=1),
            "main/b/config.json": cell("stateful_echo", twice, mailbox_size=1),
        }
    )


async def test_a_wait_cycle_among_full_mailboxes_is_reported_by_name(
    make_tree: TreeFactory,
) -> None:
    root = ping_pong_tree(make_tree)
    colony_json = {**FAST, "watchdog_on_trip": "log-only", "message_default_ttl": 1000}
    async with ColonyHarness(root, cell_types=TEST_TYPES, colony=colony_json) as colony:
        senders = [asyncio.create_task(colony.send("/", user())) for _ in range(3)]
        for _ in range(100):
            if colony.logs("mailbox_wait_cycle"):
                break
            await asyncio.sleep(0.02)
        [trip] = colony.logs("mailbox_wait_cycle")
        assert trip["level"] == "error"
        assert trip["cells"] == ["/a", "/b"]
        assert "/a -> /b -> /a" in trip["detail"]
        assert "mailbox_size" in trip["detail"]  # and how to fix it
        full = {r["target"] for r in colony.logs("mailbox_full")}
        assert full <= {"/a", "/b"}
        assert full
        for sender in senders:
            sender.cancel()


async def test_under_on_trip_exit_the_trip_asks_the_daemon_to_stop(
    make_tree: TreeFactory,
) -> None:
    root = ping_pong_tree(make_tree)
    colony_json = {**FAST, "watchdog_on_trip": "exit", "message_default_ttl": 1000}
    async with ColonyHarness(root, cell_types=TEST_TYPES, colony=colony_json) as colony:
        asked: list[str] = []
        colony.colony.on_fatal = asked.append
        senders = [asyncio.create_task(colony.send("/", user())) for _ in range(3)]
        for _ in range(100):
            if asked:
                break
            await asyncio.sleep(0.02)
        assert len(asked) == 1
        assert "/a -> /b -> /a" in asked[0]
        for sender in senders:
            sender.cancel()


async def test_a_slow_cell_makes_producers_wait_and_the_colony_recovers_when_it_drains(
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
