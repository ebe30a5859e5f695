"""The mcp cell over Streamable HTTP and meclaw's plain JSON-RPC ``http`` form, against the
fixture server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from colony.testing import ColonyHarness
from tests.cells.mcp.servers import call, http_server, mcp_tree, replies, result, until, wait_for
from tests.conftest import TreeFactory


async def ask(colony: ColonyHarness, body: dict[str, object]) -> tuple[dict[str, object], str, str]:
    before = len(replies(colony))
    await colony.send("/mcp", body)
    found = await wait_for(colony, before + 1)
    return result(found[before])


async def test_a_streamable_http_call_answers_and_a_restarted_server_is_used_again(
    make_tree: TreeFactory,
) -> None:
    with http_server() as server:
        params = {"transport": "streamable_http", "endpoint": server.url}
        async with ColonyHarness(make_tree(mcp_tree(params)), capture=["/sink"]) as colony:
            hop, text, _ = await ask(colony, call("echo", {"text": "over http"}))
            assert (text, hop["mcp_tool"]) == ("over http", "echo")
            hop, text, _ = await ask(colony, call("structured", {"city": "Chur"}))
            assert json.loads(text)["city"] == "Chur"
            server.stop()
            hop, text, _ = await ask(colony, call("echo", {"text": "nobody home"}))
            assert hop["error_code"] == "mcp_error"
            server.start()
            hop, text, _ = await ask(colony, call("echo", {"text": "back again"}))
            if hop.get("error_code"):  # the call that found the old session gone
                hop, text, _ = await ask(colony, call("echo", {"text": "back again"}))
            assert (text, hop.get("error_code")) == ("back again", None)


async def test_meclaws_http_form_calls_a_stateless_json_server(make_tree: TreeFactory) -> None:
    with http_server("--json", "--stateless") as server:
        params = {"endpoint": server.url, "external_timeout_ms": 5000}
        async with ColonyHarness(make_tree(mcp_tree(params)), capture=["/sink"]) as colony:
            hop, text, call_id = await ask(colony, call("echo", {"text": "plain"}, "c-1"))
            assert (text, call_id, hop.get("error_code")) == ("plain", "c-1", None)
            hop, text, _ = await ask(colony, call("fail", {"reason": "nope"}))
            assert hop["error_code"] == "mcp_error"
            assert "nope" in text
            await colony.settle()
            names = [row["name"] for row in colony.rows("/mcp", "mcp_tools")]
            assert {"echo", "grow"} <= set(names)


async def test_an_http_server_that_is_not_there_is_reported_to_health_and_calls_fail(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    params = {"endpoint": "http://127.0.0.1:1/mcp", "external_timeout_ms": 500}
    async with ColonyHarness(make_tree(mcp_tree(params)), capture=["/sink"]) as colony:
        hop, text, _ = await ask(colony, call("echo", {"text": "x"}))
        assert hop["error_code"] == "mcp_error"
        assert "send" in text
        status = colony.colony.events.io.task("/mcp", "mcp_server")
        assert status.state == "failing"
        assert "127.0.0.1:1" in (status.last_error or "")
        assert colony.logs("mcp_discovery_failed")


async def test_an_endpoints_credentials_reach_neither_the_log_nor_health(
    make_tree: TreeFactory,
) -> None:
    endpoint = "http://user:s3cret@127.0.0.1:1/mcp?token=t0ken#frag"
    params = {"endpoint": endpoint, "external_timeout_ms": 500}
    async with ColonyHarness(make_tree(mcp_tree(params)), capture=["/sink"]) as colony:
        hop, text, _ = await ask(colony, call("echo", {"text": "x"}))
        assert hop["error_code"] == "mcp_error"
        status = colony.colony.events.io.task("/mcp", "mcp_server")
        shown = [text, status.last_error or "", *map(str, colony.logs("mcp_discovery_failed"))]
        assert "http://127.0.0.1:1/mcp" in shown[1]
        for line in shown:
            for secret in ("s3cret", "user", "t0ken", "frag"):
                assert secret not in line


async def test_calls_waiting_for_a_streamable_session_share_one_connection_attempt(
    make_tree: TreeFactory,
) -> None:
    accepted: list[asyncio.StreamWriter] = []

    async def hold(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # and never answer: the attempt lasts external_timeout_ms

    listener = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}/mcp"
    params = {"transport": "streamable_http", "endpoint": endpoint, "external_timeout_ms": 1000}
    try:
        async with ColonyHarness(make_tree(mcp_tree(params)), capture=["/sink"]) as colony:
            await until(lambda: accepted)
            for n in range(3):
                await colony.send("/mcp", call("echo", {"text": "x"}, f"c-{n}"))
            await wait_for(colony, 3)
            await asyncio.sleep(0.3)  # the next attempt waits for the backoff (1 s)
            assert len(accepted) == 1
    finally:
        for writer in accepted:
            writer.close()
        listener.close()
