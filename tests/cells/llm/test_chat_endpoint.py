"""``POST /llm/chat``'s handler: the loop-turn contract driven from outside the colony."""

from __future__ import annotations

from typing import Any

import pytest

from cells.llm.cell import LlmCell
from cells.llm.chat_endpoint import llm_chat
from colony.testing import ScriptedAnthropic, anthropic_text, anthropic_tool_use, spec_for

TOOLS = [{"name": "calc", "description": "Add.", "input_schema": {"type": "object"}}]


async def chat(
    script: list[Any], *payloads: dict[str, Any], chain: bool = True
) -> list[tuple[int, Any]]:
    async with ScriptedAnthropic(script) as model:
        cell = LlmCell(
            spec_for(
                "/brain", {"provider": "anthropic", "model": "claude-x", "base_url": model.url}
            )
        )
        try:
            out: list[tuple[int, Any]] = []
            for payload in payloads:
                if (
                    chain
                    and out
                    and out[-1][0] == 200
                    and "conversation" in payload
                    and payload["conversation"] is None
                ):
                    payload = {**payload, "conversation": out[-1][1]["conversation"]}
                out.append(await llm_chat(cell, payload))
            return out
        finally:
            await cell.close()


async def test_two_turns_run_a_loop_and_a_duplicate_resume_is_a_409() -> None:
    script = [anthropic_tool_use([("toolu_1", "calc", {"x": 1})]), anthropic_text("Done.")]
    first = {"prompt": "add", "tools": TOOLS, "system": "Be brief."}
    second = {
        "tools": TOOLS,
        "system": "Be brief.",
        "conversation": None,
        "turn": 1,
        "results": [{"id": "toolu_1", "output": 2}],
    }
    (s1, r1), (s2, r2) = await chat(script, first, second)
    assert (s1, r1["status"], r1["turn"], r1["calls"]) == (
        200,
        "tool_use",
        1,
        [{"id": "toolu_1", "name": "calc", "input": {"x": 1}}],
    )
    assert (s2, r2["status"], r2["turn"], r2["text"]) == (200, "done", 2, "Done.")
    assert set(r2["usage"]) == {
        "input_tokens",
        "output_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
    }


async def test_a_stale_turn_is_a_409_and_an_unknown_conversation_a_404() -> None:
    script = [
        anthropic_tool_use([("toolu_1", "calc", {"x": 1})]),
        anthropic_tool_use([("toolu_2", "calc", {"x": 2})]),
    ]
    first = {"prompt": "add", "tools": TOOLS}
    second = {
        "tools": TOOLS,
        "conversation": None,
        "turn": 1,
        "results": [{"id": "toolu_1", "output": 2}],
    }
    results = await chat(script, first, second, {**second, "conversation": None})
    assert [s for s, _ in results] == [200, 200, 409]
    [(status, body)] = await chat(
        script,
        {"tools": TOOLS, "conversation": "nope", "turn": 1, "results": [{"id": "x", "output": 1}]},
        chain=False,
    )
    assert status == 404
    assert "nope" in body["error"]


@pytest.mark.parametrize(
    ("payload", "needle"),
    [
        ({"prompt": "x", "tools": [{"name": "get.weather"}]}, "tools[0].name must match"),
        ({"prompt": "x", "tools": [*TOOLS, TOOLS[0]]}, "tools[1].name duplicates tools[0]"),
        (
            {"prompt": "x", "tools": [{**TOOLS[0], "cache_control": {}}]},
            "unsupported keys: cache_control",
        ),
        ({"prompt": "x", "conversation": "abc"}, "need(s) tools"),
        ({"prompt": "x", "tools": TOOLS, "ttl": "1w"}, "ttl must be seconds"),
        ({"prompt": "x", "params": {"temperature": 1}}, "unsupported params: temperature"),
        ({"tools": TOOLS}, "the first turn needs a prompt or messages"),
        ([1, 2], "JSON object"),
    ],
)
async def test_invalid_requests_are_400_naming_the_problem(payload: Any, needle: str) -> None:
    [(status, body)] = await chat([anthropic_text("never")], payload, chain=False)
    assert status == 400
    assert needle in body["error"]


async def test_without_tools_it_is_one_plain_call() -> None:
    [(status, body)] = await chat(
        [anthropic_text("Hi there.")],
        {"messages": [{"role": "user", "content": "hello"}]},
        chain=False,
    )
    assert status == 200
    assert body["text"] == "Hi there."
    assert body["stop_reason"] == "end_turn"
