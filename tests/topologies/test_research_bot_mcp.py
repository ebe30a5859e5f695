"""topologies/telegram-research with its search behind MCP (issue 21).

The shipped tree, booted as in test_research_bot.py against ScriptedTelegram and
ScriptedOpenAI, with one change: ``main/searcher`` is an ``mcp`` cell running
fixtures/mcp/search_server.py over stdio (an SDK server whose ``web_search`` tool asks
ScriptedSearch), prep no longer writes a web_search schema, and the model is offered the MCP
server's own schema instead, through the edge searcher -> planner.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from colony.testing import ColonyHarness
from scripted.core import ScriptedOpenAI, ScriptItem, text_reply
from scripted.core import tool_calls_reply as calls
from scripted.search import ScriptedSearch
from scripted.telegram import ScriptedTelegram
from tests.cells.mcp.servers import NOT_OFFER, OFFER, published
from tests.topologies.test_research_bot import (
    CHAT,
    OTTER_TOOLS,
    Bot,
    call_ids,
    research_env,
    research_tree,
    roles,
    tool_contents,
)

SEARCH_SERVER = Path(__file__).resolve().parents[2] / "fixtures" / "mcp" / "search_server.py"
OFFERED = "tools.searcher.web_search"
"""The planner's slot for the offered tool: the provider key is the searcher's path, /searcher."""
SEARCHER = {
    "cell": {"type": "mcp", "timeout": -1},
    "description": "web_search through an MCP server; offers the server's schema to the planner.",
    "params": {
        "transport": "stdio",
        "command": sys.executable,
        "args": [str(SEARCH_SERVER)],
        "env": {"SEARCH_ENDPOINT": "${SEARCH_ENDPOINT}"},
        "tool": "web_search",
        "offer_tools": True,
    },
    "contract": {"version": "1", "settings": {}, "consumes": {}},
}


async def published_tool() -> dict[str, Any]:
    """The ``web_search`` tool as the search server publishes it (built in-process with the
    SDK, so the test compares against the server's own schema, not a copy)."""
    (tool,) = await published(SEARCH_SERVER, "http://127.0.0.1:1/search")
    return {"name": tool["name"], "description": tool["description"], "schema": tool["inputSchema"]}


def mcp_search_tree(dest: Path) -> Path:
    """The offline research tree with the searcher swapped for the MCP one and wired to offer
    its tools to the planner."""
    tree = research_tree(dest)
    main = tree / "main"
    (main / "searcher" / "config.json").write_text(json.dumps(SEARCHER, indent=2))
    prep_file = main / "prep" / "config.json"
    prep = json.loads(prep_file.read_text())
    del prep["params"]["tools"]["web_search"]
    prep_file.write_text(json.dumps(prep, indent=2))
    hive_file = main / "config.json"
    hive = json.loads(hive_file.read_text())
    edges = hive["params"]["graph"]["edges"]
    (to_collector,) = [e for e in edges if (e["from"], e["to"]) == ("./searcher", "./collector")]
    to_collector["condition"] = NOT_OFFER
    edges.append({"from": "./searcher", "to": "./planner", "condition": OFFER})
    hive_file.write_text(json.dumps(hive, indent=2))
    return tree


def slots(colony: ColonyHarness) -> set[str]:
    """The planner's stored system slots."""
    return {r["slot_path"] for r in colony.rows("/planner", "system")}


@asynccontextmanager
async def mcp_research_bot(script: Sequence[ScriptItem]) -> AsyncIterator[Bot]:
    """The bot, booted once the planner holds the MCP server's offered tools."""
    async with (
        ScriptedSearch() as search,
        ScriptedTelegram(known_chats=[CHAT]) as telegram,
        ScriptedOpenAI(list(script)) as model,
    ):
        tmp = Path(tempfile.mkdtemp(prefix="research-bot-mcp-"))
        try:
            tree = mcp_search_tree(tmp)
            env = research_env(telegram, model, search)
            async with ColonyHarness(tree, env=env, log_level="info") as colony:
                async with asyncio.timeout(15):
                    while OFFERED not in slots(colony):  # noqa: ASYNC110 (a cell.db row has no event)
                        await asyncio.sleep(0.02)
                yield Bot(colony, telegram, model, search)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


async def test_the_research_bot_searches_through_an_mcp_server_whose_schema_the_model_sees() -> (
    None
):
    query = "sea otters stone tools"
    script = [
        calls([("call-s1", "web_search", {"query": query, "max_results": 3})]),
        text_reply("Sea otters crack shellfish open on flat stones."),
    ]
    listed = await published_tool()
    async with mcp_research_bot(script) as bot:
        [answer] = await bot.ask("What do sea otters use stones for?")
        assert answer == {
            "chat_id": CHAT,
            "text": "Sea otters crack shellfish open on flat stones.",
        }
        assert bot.model.served == 2  # the offer itself asked the model nothing
        first, second = bot.model.requests

        # the model saw the MCP server's tool, schema and all, beside prep's two
        tools = {t["function"]["name"]: t for t in first["tools"]}
        assert sorted(tools) == ["read_file", "web_fetch", "web_search"]
        assert tools["web_search"] == {
            "type": "function",
            "function": {
                "name": "web_search",
                "description": listed["description"],
                "parameters": listed["schema"],
            },
        }
        assert {s for s in slots(bot.colony) if s.startswith("tools.")} == {
            "tools.read_file",
            "tools.web_fetch",
            OFFERED,
        }
        assert listed["schema"]["required"] == ["query"]
        assert listed["schema"]["properties"]["max_results"]["maximum"] == 10

        # the call went through the MCP server to the search endpoint, and its answer came
        # back to the planner as the tool result of call-s1
        assert bot.search.queries == [query]
        assert roles(second) == ["system", "user", "assistant", "tool"]
        assert call_ids(second) == ["call-s1"]
        found = json.loads(tool_contents(second)["call-s1"])
        assert found == {"results": bot.search.rank(query)[:3]}
        assert found["results"][0]["url"] == bot.search.page_url(OTTER_TOOLS)

        # the collector recorded it as the round's tool row; the listing never reached it
        assert bot.thread() == [(0, "user"), (0, "assistant"), (0, "tool"), (1, "answer")]
        rows = bot.colony.rows("/memory", "thread")
        (tool_row,) = [r for r in rows if r["role"] == "tool"]
        turn = (
            tool_row["turn"] if isinstance(tool_row["turn"], dict) else json.loads(tool_row["turn"])
        )
        assert (turn["id"], json.loads(turn["text"])) == ("call-s1", found)
        assert await bot.colony.dead_letters() == []
