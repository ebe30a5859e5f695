"""The same three-round tool loop on every wire shape (only ``provider`` and ``base_url``
change): two tool rounds and an answer, and the third request replays both earlier rounds'
calls in the provider's own shape, with its thinking/reasoning blocks exactly as it sent them."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import scripted as s
from colony.testing import ColonyHarness
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
ARGS1, ARGS2 = {"numbers": [2, 3]}, {"numbers": [5, 4]}


def openai_round(call_id: str, args: dict[str, Any], reasoning: str) -> dict[str, Any]:
    reply = s.tool_calls_reply([(call_id, "calc", args)])
    reply["choices"][0]["message"]["reasoning_content"] = reasoning
    return reply


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def contains_in_order(haystack: list[Any], needle: list[Any]) -> bool:
    text, part = compact(haystack), compact(needle)[1:-1]
    return part in text


Check = Callable[[list[Any], dict[str, Any]], None]


def check_openai(script: list[Any], last: dict[str, Any]) -> None:
    assistants = [m for m in last["messages"] if m["role"] == "assistant"]
    assert [m["reasoning_content"] for m in assistants] == ["think-1", "think-2"]
    assert [m["tool_calls"][0]["id"] for m in assistants] == ["call-1", "call-2"]


def check_anthropic(script: list[Any], last: dict[str, Any]) -> None:
    assistants = [m for m in last["messages"] if m["role"] == "assistant"]
    assert [compact(m["content"]) for m in assistants] == [
        compact(script[0]["content"]),
        compact(script[1]["content"]),
    ]


def check_responses(script: list[Any], last: dict[str, Any]) -> None:
    assert contains_in_order(last["input"], script[0]["output"])
    assert contains_in_order(last["input"], script[1]["output"])
    outputs = [i["call_id"] for i in last["input"] if i.get("type") == "function_call_output"]
    assert outputs == ["call-1", "call-2"]


def check_gemini(script: list[Any], last: dict[str, Any]) -> None:
    models = [c for c in last["contents"] if c["role"] == "model"]
    expected = [r["candidates"][0]["content"]["parts"] for r in script[:2]]
    assert [compact(c["parts"]) for c in models] == [compact(p) for p in expected]


def check_ollama(script: list[Any], last: dict[str, Any]) -> None:
    assistants = [m for m in last["messages"] if m["role"] == "assistant"]
    assert [m["thinking"] for m in assistants] == ["think-1", "think-2"]
    assert [m["tool_calls"][0]["function"]["arguments"] for m in assistants] == [ARGS1, ARGS2]
    assert [m["tool_name"] for m in last["messages"] if m["role"] == "tool"] == ["calc", "calc"]


PROVIDERS: dict[str, tuple[type[s.ScriptedServer], list[Any], Check]] = {
    "openai": (
        s.ScriptedOpenAI,
        [
            openai_round("call-1", ARGS1, "think-1"),
            openai_round("call-2", ARGS2, "think-2"),
            s.text_reply("It is 9."),
        ],
        check_openai,
    ),
    "anthropic": (
        s.ScriptedAnthropic,
        [
            s.anthropic_tool_use(
                [("toolu_1", "calc", ARGS1)], thinking="think-1", signature="sig-1"
            ),
            s.anthropic_tool_use(
                [("toolu_2", "calc", ARGS2)],
                text="Once more.",
                thinking="think-2",
                signature="sig-2",
            ),
            s.anthropic_text("It is 9."),
        ],
        check_anthropic,
    ),
    "openai-responses": (
        s.ScriptedResponses,
        [
            s.responses_calls([("call-1", "calc", ARGS1)], reasoning=("rs_1", "enc-1")),
            s.responses_calls(
                [("call-2", "calc", ARGS2)], text="Adding the rest.", reasoning=("rs_2", "enc-2")
            ),
            s.responses_text("It is 9."),
        ],
        check_responses,
    ),
    "gemini": (
        s.ScriptedGemini,
        [
            s.gemini_calls([("fc_1", "calc", ARGS1)], signature="sig-g1"),
            s.gemini_calls([("fc_2", "calc", ARGS2)], signature="sig-g2"),
            s.gemini_text("It is 9."),
        ],
        check_gemini,
    ),
    "ollama": (
        s.ScriptedOllama,
        [
            s.ollama_calls([("calc", ARGS1)], thinking="think-1"),
            s.ollama_calls([("calc", ARGS2)], thinking="think-2"),
            s.ollama_text("It is 9."),
        ],
        check_ollama,
    ),
}


def tree_for(provider: str, tmp_path: Path) -> Path:
    root = tmp_path / provider
    shutil.copytree(TREE, root)
    config = root / "main" / "brain" / "config.json"
    doc = json.loads(config.read_text())
    doc["params"]["provider"] = provider
    config.write_text(json.dumps(doc))
    return root


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_three_rounds_close_the_loop_and_replay_native_blocks(
    provider: str, tmp_path: Path
) -> None:
    server_class, script, check = PROVIDERS[provider]
    question = {"origin": "user", "type": "text", "text": "What is 2+3, plus 4?"}
    async with server_class(script) as server:
        async with ColonyHarness(
            tree_for(provider, tmp_path), capture=["/sink"], llm_base_url=server.url
        ) as colony:
            await colony.send(
                "/",
                {"system": {"tools": {"calc": {"text": json.dumps(CALC)}}}, "messages": [question]},
                context={"thread": json.dumps([question]), "iter": "0"},
            )
            await colony.settle(timeout=60)
            [answer] = colony.captured("/sink")
            assert answer.headers.hop["finish_reason"] == "stop", answer.body
            assert answer.body["messages"][-1]["text"] == "It is 9."
            assert answer.headers.context["iter"] == "2"
            assert await colony.dead_letters() == []
        assert server.served == 3
        assert len(server.requests) == 3  # nothing was refused by the provider's own rules
        check(script, server.requests[2])
