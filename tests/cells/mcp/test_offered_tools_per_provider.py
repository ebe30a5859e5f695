"""offer_tools, per provider: a model sees the MCP server's tools with their JSON schemas in its
provider's own wire shape, and its call reaches the server and comes back on the call id.

The fixture server (fixtures/mcp/server.py, stdio) offers its tools to an llm cell of each of
the five dialects, each talking to its scripted server on 127.0.0.1. The expected tools are
built from the server's own listing (the SDK server, in-process), so every name, description
and inputSchema is compared exactly, not against a copy.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from colony.testing import ColonyHarness
from scripted.anthropic import ScriptedAnthropic, anthropic_text
from scripted.core import ScriptedOpenAI, ScriptedServer, text_reply
from scripted.core import tool_calls_reply as calls
from scripted.gemini import ScriptedGemini, gemini_text
from scripted.ollama import ScriptedOllama, ollama_text
from scripted.responses import ScriptedResponses, responses_text
from tests.cells.mcp.servers import NOT_OFFER, OFFER, SERVER, STDIO, published, result, until
from tests.conftest import CONTRACT, TreeFactory, hive

TOOL_CALLS = "has(hop.finish_reason) && hop.finish_reason == 'tool_calls'"

Native = Callable[[dict[str, Any]], Any]
"""A published MCP tool (name, description, inputSchema) → its provider's tool object."""


def function_tool(tool: dict[str, Any]) -> Any:
    """OpenAI chat and Ollama: ``{type: function, function: {name, description, parameters}}``."""
    function = {
        "name": tool["name"],
        "description": tool["description"],
        "parameters": tool["inputSchema"],
    }
    return {"type": "function", "function": function}


def responses_tool(tool: dict[str, Any]) -> Any:
    return {
        "type": "function",
        "name": tool["name"],
        "description": tool["description"],
        "parameters": tool["inputSchema"],
    }


def anthropic_tool(tool: dict[str, Any]) -> Any:
    return {
        "name": tool["name"],
        "description": tool["description"],
        "input_schema": tool["inputSchema"],
    }


def gemini_declaration(tool: dict[str, Any]) -> Any:
    """Gemini takes the schema unconverted, as ``parametersJsonSchema`` (full JSON Schema),
    not as the OpenAPI-subset ``parameters``: ``title``, ``default`` and the like pass as is."""
    return {
        "name": tool["name"],
        "description": tool["description"],
        "parametersJsonSchema": tool["inputSchema"],
    }


@dataclass(frozen=True)
class Provider:
    name: str
    server: type[ScriptedServer]
    reply: Callable[[str], Any]
    native: Native

    def tools_sent(self, body: dict[str, Any]) -> Any:
        """The request's tools, unwrapped from Gemini's one ``functionDeclarations`` group."""
        if self.name == "gemini":
            (group,) = body["tools"]
            assert list(group) == ["functionDeclarations"]
            return group["functionDeclarations"]
        return body["tools"]


PROVIDERS = [
    Provider("openai", ScriptedOpenAI, text_reply, function_tool),
    Provider("openai-responses", ScriptedResponses, responses_text, responses_tool),
    Provider("anthropic", ScriptedAnthropic, anthropic_text, anthropic_tool),
    Provider("gemini", ScriptedGemini, gemini_text, gemini_declaration),
    Provider("ollama", ScriptedOllama, ollama_text, function_tool),
]


def offer_tree(provider: str) -> dict[str, Any]:
    return {
        "main/config.json": hive(
            {"from": "./mcp", "to": "./brain", "condition": OFFER},
            {"from": "./brain", "to": "./mcp", "condition": TOOL_CALLS},
            {"from": "./brain", "to": "/answers"},
            {"from": "./mcp", "to": "/results", "condition": NOT_OFFER},
        ),
        "main/mcp/config.json": {
            "cell": {"type": "mcp", "timeout": -1},
            "params": {**STDIO, "offer_tools": True},
            "contract": CONTRACT,
        },
        "main/brain/config.json": {
            "cell": {"type": "llm"},
            "params": {"provider": provider, "model": "model-test", "api_key": "k"},
            "contract": CONTRACT,
        },
    }


def offered(colony: ColonyHarness) -> set[str]:
    return {r["slot_path"] for r in colony.rows("/brain", "system")}


def user(text: str) -> dict[str, Any]:
    return {"origin": "user", "type": "text", "text": text}


@pytest.mark.parametrize("provider", PROVIDERS, ids=[p.name for p in PROVIDERS])
async def test_a_model_sees_the_mcp_servers_tools_with_their_schemas_in_its_wire_shape(
    make_tree: TreeFactory, provider: Provider
) -> None:
    listed = await published(SERVER)
    assert {"echo", "structured", "grow"} <= {t["name"] for t in listed}
    async with (
        provider.server([provider.reply("ok")]) as model,
        ColonyHarness(
            make_tree(offer_tree(provider.name)),
            capture=["/answers", "/results"],
            llm_base_url=model.url,
        ) as colony,
    ):
        await until(lambda: f"tools.mcp.{listed[0]['name']}" in offered(colony))
        await colony.settle()
        assert model.requests == []  # the offer asked the model nothing
        await colony.send("/brain", {"messages": [user("which tools do you have?")]})
        await colony.settle()
        assert colony.captured("/results") == []
        assert offered(colony) == {f"tools.mcp.{t['name']}" for t in listed}
    (request,) = model.requests
    assert provider.tools_sent(request) == [provider.native(t) for t in listed]


async def test_a_models_call_of_an_offered_tool_is_answered_on_its_call_id(
    make_tree: TreeFactory,
) -> None:
    script = [
        calls([("call-e1", "echo", {"text": "hello from the model"})]),
        text_reply("The server said: hello from the model"),
    ]
    async with (
        ScriptedOpenAI(script) as model,
        ColonyHarness(
            make_tree(offer_tree("openai")),
            capture=["/answers", "/results"],
            llm_base_url=model.url,
        ) as colony,
    ):
        await until(lambda: "tools.mcp.echo" in offered(colony))
        await colony.send("/brain", {"messages": [user("say hello through echo")]})
        await until(lambda: colony.captured("/results"))
        await colony.settle()
        (asked,) = colony.captured("/answers")
        assert asked.headers.hop["finish_reason"] == "tool_calls"
        (answered,) = colony.captured("/results")
        hop, text, call_id = result(answered)
        assert (hop["mcp_tool"], text, call_id) == ("echo", "hello from the model", "call-e1")
        assert "error_code" not in hop

        # the next round, as a fan-in would build it: the result goes back on call-e1
        thread = [user("say hello through echo"), *asked.body["messages"]]
        thread += answered.body["messages"]
        await colony.send("/brain", {"messages": thread})
        await until(lambda: len(colony.captured("/answers")) == 2)
        await colony.settle()
    first, second = model.requests
    assert [t["function"]["name"] for t in first["tools"]] == sorted(
        t["function"]["name"] for t in first["tools"]
    )
    assert second["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call-e1",
        "content": "hello from the model",
    }
    assert json.loads(second["messages"][-2]["tool_calls"][0]["function"]["arguments"]) == {
        "text": "hello from the model"
    }
    assert colony.captured("/answers")[1].headers.hop["finish_reason"] == "stop"
