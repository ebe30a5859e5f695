"""offer_tools: an llm cell wired to the mcp cell takes its tools in and offers them."""

from __future__ import annotations

from typing import Any

from colony.testing import ColonyHarness, ScriptedOpenAI, text_reply
from tests.cells.mcp.servers import OFFER, STDIO, until
from tests.conftest import CONTRACT, TreeFactory, hive


def offer_tree() -> dict[str, Any]:
    return {
        "main/config.json": hive(
            {"from": "./mcp", "to": "./brain", "condition": OFFER},
            {"from": "./brain", "to": "/sink"},
        ),
        "main/mcp/config.json": {
            "cell": {"type": "mcp", "timeout": -1},
            "params": {**STDIO, "offer_tools": True},
            "contract": CONTRACT,
        },
        "main/brain/config.json": {
            "cell": {"type": "llm"},
            "params": {"provider": "openai", "model": "gpt-test", "api_key": "k"},
            "contract": CONTRACT,
        },
    }


async def test_an_llm_cell_persists_the_offered_tools_silently_and_sends_them(
    make_tree: TreeFactory,
) -> None:
    async with (
        ScriptedOpenAI([text_reply("ok")]) as model,
        ColonyHarness(make_tree(offer_tree()), capture=["/sink"], llm_base_url=model.url) as colony,
    ):
        await until(lambda: colony.rows("/brain", "system"))
        await colony.settle()
        assert model.requests == []  # taking the tools in asked the model nothing
        assert colony.captured("/sink") == []
        await colony.send(
            "/brain", {"messages": [{"origin": "user", "type": "text", "text": "hi"}]}
        )
        await colony.settle()
    names = [t["function"]["name"] for t in model.requests[0]["tools"]]
    assert {"echo", "structured"} <= set(names)
    echo = next(t for t in model.requests[0]["tools"] if t["function"]["name"] == "echo")
    assert echo["function"]["parameters"]["required"] == ["text"]
