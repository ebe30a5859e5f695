"""Backpressure never deadlocks a cycle: more conversations than a cycle's mailboxes hold still
all finish (issue 22).

Every mailbox is bounded and a sender waits while the mailbox it sends to is full. On a cycle
(the tool loop: llm → tools → collector ⇄ store → llm; or just a ⇄ b) enough conversations in
flight fill every mailbox on it, and then every cell waits on the next one for good. With
capacity 2 a handful of conversations is enough, so these run in seconds what ``make soak``
shows with 1,000 conversations and the default capacity of 1,000.

A run that stands still is cut short: when the journal has not moved for a few seconds (no
delivery made durable, none acknowledged) nothing will, and the test fails saying how many
conversations answered, instead of hanging the suite.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from colony.load import run_load
from colony.load.driver import until_quiet
from colony.load.watch import JournalWatch
from colony.testing import ColonyHarness
from tests.conformance.cells import TEST_TYPES, user
from tests.conftest import TreeFactory, cell, hive

CAPACITY = {"mailbox_default_capacity": 2}
STALL = 5.0
"""Seconds without a journal change that mean the colony stands still."""
DEADLINE = 30.0


ROUNDS = 5


def two_cell_cycle() -> dict[str, Any]:
    """a → b → a for ROUNDS rounds (``context.round`` counts them), then b → /sink."""
    return {
        "main/config.json": hive(
            {"from": "./a", "to": "./b"},
            {
                "from": "./b",
                "to": "./a",
                "condition": f"int(context.round) < {ROUNDS}",
                "modifier": {"set_context": {"round": "int(context.round) + 1"}},
            },
            {"from": "./b", "to": "/sink", "condition": f"int(context.round) >= {ROUNDS}"},
        ),
        "main/a/config.json": cell("stateful_echo"),
        "main/b/config.json": cell("stateful_echo"),
    }


async def test_a_tool_loop_fuller_than_its_mailboxes_answers_every_conversation_once() -> None:
    # six conversations in flight against mailboxes of two
    result = await run_load(6, rounds=3, tools=2, timeout=DEADLINE, stall=STALL, colony=CAPACITY)
    assert result.ok, result.summary()
    assert result.answered == 6
    assert result.duplicated == []
    assert result.dead_letters == 0
    assert result.watchdog_reports == 0
    assert result.model_calls == 6 * 4  # three tool rounds and the answer, once each


async def test_a_two_cell_cycle_fuller_than_its_mailboxes_brings_every_conversation_to_the_sink(
    make_tree: TreeFactory,
) -> None:
    conversations = [f"c{i}" for i in range(12)]
    harness = ColonyHarness(
        make_tree(two_cell_cycle()),
        cell_types=TEST_TYPES,
        capture=["/sink"],
        colony=CAPACITY,
        log_level="warning",
    )
    async with harness as colony:
        sends = (
            colony.send("/a", user(c), context={"conversation": c, "round": 0})
            for c in conversations
        )
        watch = JournalWatch(colony.root / "colony.db")
        stopped = await until_quiet(colony, sends, watch, timeout=DEADLINE, stall=STALL)
        arrived = Counter(m.headers.context["conversation"] for m in colony.captured("/sink"))
        answered = sum(1 for c in conversations if arrived[c] == 1)
        assert stopped is None, f"{stopped}; {answered}/{len(conversations)} reached the sink"
        assert arrived == Counter(conversations)  # every one once, none twice
        assert {m.headers.context["round"] for m in colony.captured("/sink")} == {ROUNDS}
        assert await colony.dead_letters() == []
        assert colony.logs("mailbox_stalled") == colony.logs("mailbox_wait_cycle") == []
