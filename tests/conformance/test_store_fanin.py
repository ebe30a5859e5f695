"""The store-backed fan-in (seed steps 3–5) on our own small topology, fixtures/trees/fanin.

The collector records the assistant turn and every tool result as rows, decides completeness
by the set of call ids of the round, claims the round with the store's guarded update, and
fires the rebuilt thread — exactly once, never early, whatever the arrival order.
"""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

from colony.testing import ColonyHarness
from tests.conftest import FIXTURES

TREE = FIXTURES / "trees" / "fanin"
CALLS = ["call-a", "call-b", "call-c"]


def assistant_turn() -> dict[str, Any]:
    return {
        "messages": [
            {
                "origin": "assistant",
                "type": "tool_call",
                "id": call,
                "text": json.dumps({"name": call}),
            }
            for call in CALLS
        ]
    }


def result(call: str) -> dict[str, Any]:
    return {
        "messages": [
            {"origin": "tool", "type": "tool_result", "id": call, "text": f"result of {call}"}
        ]
    }


async def deliver(
    colony: ColonyHarness, turn: str, sends: list[tuple[str, dict[str, Any]]]
) -> None:
    async def one(route: str, body: dict[str, Any]) -> None:
        await asyncio.sleep(random.random() / 200)
        await colony.send("/", body, hop={"route": route}, context={"turn_id": turn, "iter": "0"})

    await asyncio.gather(*(one(route, body) for route, body in sends))
    await colony.settle(timeout=60)


def fired(colony: ColonyHarness, turn: str) -> list[Any]:
    return [m for m in colony.captured("/sink") if m.headers.context["turn_id"] == turn]


async def test_three_results_in_random_order_fire_the_rebuilt_thread_once_per_round() -> None:
    rng = random.Random(7)
    async with ColonyHarness(TREE, capture=["/sink"]) as colony:
        for run in range(50):
            turn = f"t{run}"
            sends = [("c_asst", assistant_turn())] + [("c_res", result(c)) for c in CALLS]
            rng.shuffle(sends)  # the assistant turn may land after some of its results
            await deliver(colony, turn, sends)
            [thread] = fired(colony, turn)
            turns = thread.body["messages"]
            assert [t["type"] for t in turns] == ["tool_call"] * 3 + ["tool_result"] * 3
            assert {t["id"] for t in turns[3:]} == set(CALLS)  # never early: every result is in
            rows = [r for r in colony.rows("/memory", "thread") if r["turn_id"] == turn]
            assert sorted(r["role"] for r in rows) == ["assistant", "tool", "tool", "tool"]
            assert [r["fired"] for r in rows if r["role"] == "assistant"] == [1]
        assert await colony.dead_letters() == []


async def test_a_duplicated_result_id_never_completes_a_round_missing_another() -> None:
    async with ColonyHarness(TREE, capture=["/sink"]) as colony:
        await deliver(
            colony,
            "dup",
            [
                ("c_asst", assistant_turn()),
                ("c_res", result("call-a")),
                ("c_res", result("call-a")),
                ("c_res", result("call-b")),
            ],
        )
        assert fired(colony, "dup") == []
        await deliver(colony, "dup", [("c_res", result("call-c"))])
        [thread] = fired(colony, "dup")
        assert [t["id"] for t in thread.body["messages"] if t["type"] == "tool_result"].count(
            "call-a"
        ) == 2
        await deliver(colony, "dup", [("c_res", result("call-c"))])  # a late duplicate
        assert len(fired(colony, "dup")) == 1


async def test_results_without_their_assistant_turn_never_fire() -> None:
    async with ColonyHarness(TREE, capture=["/sink"]) as colony:
        await deliver(colony, "orphans", [("c_res", result(c)) for c in CALLS])
        assert fired(colony, "orphans") == []
        await deliver(colony, "orphans", [("c_asst", assistant_turn())])
        assert len(fired(colony, "orphans")) == 1
