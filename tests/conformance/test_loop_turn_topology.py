"""A transcript-backed tool loop on our own topology, fixtures/trees/loop-turn: the brain's loop
turns keep the conversation; the graph carries only its reference. Three rounds against a
scripted Anthropic server, parallel calls in the first."""

from __future__ import annotations

import json

from colony.testing import ColonyHarness, ScriptedAnthropic, anthropic_text, anthropic_tool_use
from tests.conftest import FIXTURES

TREE = FIXTURES / "trees" / "loop-turn"


async def test_three_loop_turns_end_at_the_sink_with_the_transcript_replayed_natively() -> None:
    script = [
        anthropic_tool_use(
            [("toolu_a", "calc", {"numbers": [2, 3]}), ("toolu_b", "calc", {"numbers": [10, 20]})],
            text="Two sums first.",
            thinking="split the work",
            signature="sig-round-1",
        ),
        anthropic_tool_use(
            [("toolu_c", "calc", {"numbers": [5, 30]})],
            thinking="now combine",
            signature="sig-round-2",
        ),
        anthropic_text("The total is 35."),
    ]
    async with ScriptedAnthropic(script) as model:
        async with ColonyHarness(TREE, capture=["/sink"], llm_base_url=model.url) as colony:
            await colony.send(
                "/",
                {"messages": [{"origin": "user", "type": "text", "text": "Add 2, 3, 10 and 20."}]},
            )
            await colony.settle(timeout=60)
            [answer] = colony.captured("/sink")
            assert answer.headers.hop["status"] == "done"
            assert answer.headers.hop["turn"] == 3
            assert answer.body["text"] == "The total is 35."
            assert await colony.dead_letters() == []
        assert len(model.requests) == 3
        last = model.requests[2]["messages"]
        assert [m["role"] for m in last] == ["user", "assistant", "user", "assistant", "user"]
        assert last[1]["content"] == script[0]["content"]  # thinking + signature, byte for byte
        assert last[3]["content"] == script[1]["content"]
        results = last[2]["content"]
        assert [r["tool_use_id"] for r in results] == ["toolu_a", "toolu_b"]
        assert [json.loads(r["content"]) for r in results] == [{"sum": 5}, {"sum": 30}]
        assert model.requests[0]["tools"] == model.requests[2]["tools"]
