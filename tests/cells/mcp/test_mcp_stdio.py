"""The mcp cell over stdio, against the fixture server it spawns (one colony per module)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from colony.testing import ColonyHarness
from tests.cells.mcp.servers import (
    STDIO,
    call,
    mcp_tree,
    offers,
    replies,
    result,
    until,
    wait_for,
)
from tests.conftest import write_tree

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def colony(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ColonyHarness]:
    tree = write_tree(
        tmp_path_factory.mktemp("mcp-stdio"),
        mcp_tree({**STDIO, "external_timeout_ms": 1500, "offer_tools": True}),
    )
    async with ColonyHarness(tree, capture=["/sink"]) as harness:
        await until(lambda: offers(harness))  # the server is up (its start outlasts 1.5 s)
        yield harness


async def ask(colony: ColonyHarness, body: dict[str, object]) -> tuple[dict[str, object], str, str]:
    before = len(replies(colony))
    await colony.send("/mcp", body)
    found = await wait_for(colony, before + 1)
    return result(found[before])


async def test_a_call_answers_with_the_tools_text_on_the_calls_id(colony: ColonyHarness) -> None:
    hop, text, call_id = await ask(colony, call("echo", {"text": "hello"}, "c-echo"))
    assert (text, call_id, hop["mcp_tool"]) == ("hello", "c-echo", "echo")
    assert isinstance(hop["duration_ms"], int)
    assert "error_code" not in hop
    assert "finish_reason" not in hop


async def test_arguments_given_as_a_json_string_are_read_as_the_llm_cell_writes_them(
    colony: ColonyHarness,
) -> None:
    _, text, _ = await ask(colony, call("echo", json.dumps({"text": "as string"})))
    assert text == "as string"


async def test_structured_content_is_the_text_as_json(colony: ColonyHarness) -> None:
    hop, text, _ = await ask(colony, call("structured", {"city": "Bern"}))
    assert json.loads(text) == {"celsius": 21.5, "city": "Bern"}
    assert "error_code" not in hop


async def test_a_failing_tool_is_mcp_error_with_the_servers_text(colony: ColonyHarness) -> None:
    hop, text, _ = await ask(colony, call("fail", {"reason": "no luck"}))
    assert hop["error_code"] == "mcp_error"
    assert "finish_reason" not in hop
    assert "no luck" in text
    assert colony.logs("mcp_call_failed")


async def test_a_malformed_call_is_invalid_input(colony: ColonyHarness) -> None:
    hop, text, _ = await ask(colony, call("", {}))
    assert (hop["error_code"], hop["mcp_tool"]) == ("invalid_input", "<unknown>")
    assert "name" in text


async def test_a_slow_tool_is_provider_timeout_while_another_call_still_answers(
    colony: ColonyHarness,
) -> None:
    before = len(replies(colony))
    await colony.send("/mcp", call("slow", {"seconds": 5}, "c-slow"))
    await colony.send("/mcp", call("echo", {"text": "quick"}, "c-quick"))
    found = await wait_for(colony, before + 2)
    first, second = (result(m) for m in found[before : before + 2])
    assert (first[1], first[2]) == ("quick", "c-quick")  # answered while slow still ran
    assert (second[0]["error_code"], second[2]) == ("provider_timeout", "c-slow")
    assert "external_timeout_ms (1500 ms)" in second[1]


async def test_list_tools_answers_with_the_system_tools_write(colony: ColonyHarness) -> None:
    before = len(replies(colony))
    await colony.send("/mcp", call("__list_tools__"))
    message = (await wait_for(colony, before + 1))[before]
    assert dict(message.headers.hop).keys() == {"mcp_tool", "duration_ms"}
    assert message.headers.hop["mcp_tool"] == "__list_tools__"
    assert message.body["messages"] == []
    tools = message.body["system"]["tools"]["mcp"]
    assert tools["$replace"] is True
    echo = json.loads(tools["echo"]["text"])
    assert echo["type"] == "function"
    assert echo["function"]["name"] == "echo"
    assert echo["function"]["parameters"]["required"] == ["text"]
    assert echo["function"]["description"] == "Return the text it was given."


async def test_list_changed_updates_the_cache_and_offers_the_tools_again(
    colony: ColonyHarness,
) -> None:
    assert offers(colony)
    assert all("late" not in m.body["system"]["tools"]["mcp"] for m in offers(colony))
    _, text, _ = await ask(colony, call("grow"))
    assert text == "grown"
    await until(lambda: any("late" in m.body["system"]["tools"]["mcp"] for m in offers(colony)))
    names = [row["name"] for row in colony.rows("/mcp", "mcp_tools")]
    assert "late" in names
    _, text, _ = await ask(colony, call("late"))
    assert text == "late"


async def test_a_params_slot_changes_the_timeouts_silently_and_persists_them(
    colony: ColonyHarness,
) -> None:
    before = len(replies(colony))
    await colony.send("/mcp", {"params": {"query_timeout_ms": 4000}})
    await colony.settle()
    assert len(replies(colony)) == before
    rows = {r["key"]: r["value"] for r in colony.rows("/mcp", "mcp_params")}
    assert rows == {"query_timeout_ms": "4000"}
    hop, text, _ = await ask(colony, {"params": {"command": "/bin/true"}})
    assert (hop["error_code"], hop["mcp_tool"]) == ("invalid_input", "__params__")
    assert text == (
        "params.command cannot be changed at runtime "
        "(mutable: external_timeout_ms, query_timeout_ms)"
    )
    hop, text, _ = await ask(colony, {"params": {"external_timeout_ms": 0, "query_timeout_ms": 9}})
    assert hop["error_code"] == "invalid_input"
    rows = {r["key"]: r["value"] for r in colony.rows("/mcp", "mcp_params")}
    assert rows == {"query_timeout_ms": "4000"}  # nothing applied in part


async def test_a_dying_server_fails_the_open_call_naming_its_exit_then_restarts(
    colony: ColonyHarness,
) -> None:
    cell = colony.colony.runners["/mcp"]
    old = await _pid(colony)
    offered = len(offers(colony))
    hop, text, _ = await ask(colony, call("die"))
    assert hop["error_code"] == "mcp_error"
    assert f"the MCP server (pid {old}) exited with code 3" in text
    await until(lambda: cell.restarts >= 1)
    await until(lambda: len(offers(colony)) > offered)  # the new server is up
    new = await _pid(colony)
    assert new != old
    assert colony.logs("mcp_server_died")


async def _pid(colony: ColonyHarness) -> int:
    _, text, _ = await ask(colony, call("pid"))
    return int(text)
