"""A store-free tool loop (llm → hive → dispatcher → tool → collector → llm) on our own
topology, fixtures/trees/tool-loop, against a scripted OpenAI server: two tool rounds, then an
answer at the capture cell."""

from __future__ import annotations

import json

from colony.testing import ColonyHarness, ScriptedOpenAI, text_reply, tool_calls_reply
from tests.conftest import FIXTURES

TREE = FIXTURES / "trees" / "tool-loop"
CALC = {
    "type": "function",
    "function": {
        "name": "calc",
        "description": "Add numbers.",
        "parameters": {"type": "object", "properties": {"numbers": {"type": "array"}}},
    },
}


async def test_two_tool_rounds_end_at_the_sink_with_finish_reason_stop() -> None:
    question = {"origin": "user", "type": "text", "text": "What is 2+3, plus 4?"}
    script = [
        tool_calls_reply([("call-1", "calc", {"numbers": [2, 3]})]),
        tool_calls_reply([("call-2", "calc", {"numbers": [5, 4]})]),
        text_reply("It is 9."),
    ]
    async with ScriptedOpenAI(script) as model:
        async with ColonyHarness(TREE, capture=["/sink"], llm_base_url=model.url) as colony:
            trace = await colony.send(
                "/",
                {"system": {"tools": {"calc": {"text": json.dumps(CALC)}}}, "messages": [question]},
                context={"thread": json.dumps([question]), "iter": "0"},
            )
            await colony.settle(timeout=60)
            [answer] = colony.captured("/sink")
            assert answer.headers.hop["finish_reason"] == "stop"
            assert answer.body["messages"][-1]["text"] == "It is 9."
            assert answer.headers.context["iter"] == "2"
            assert await colony.dead_letters() == []
            hops = [(r.from_path, r.to_path) for r in await colony.message_log(trace)]
        assert len(model.requests) == 3
        last = model.requests[2]["messages"]
        assert [m["role"] for m in last] == ["user", "assistant", "tool", "assistant", "tool"]
        assert [m["content"] for m in last if m["role"] == "tool"] == ["5", "9"]
        assert model.requests[0]["tools"] == [CALC]
    assert hops[:6] == [
        ("@external", "/"),
        ("/", "/brain"),
        ("/brain", "/tools"),
        ("/tools", "/tools/dispatcher"),
        ("/tools/dispatcher", "/tools/calc"),
        ("/tools/calc", "/tools/collector"),
    ]
    assert hops[-1] == ("/brain", "/sink")
