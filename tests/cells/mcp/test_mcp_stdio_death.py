"""A stdio server that ends before it initialized, and the server process's own lifecycle."""

from __future__ import annotations

import asyncio
import time

from colony.testing import ColonyHarness
from tests.cells.mcp.servers import call, mcp_tree, replies, result, until
from tests.conftest import TreeFactory


async def test_a_server_dying_before_initialize_fails_the_waiting_call_naming_its_exit(
    make_tree: TreeFactory,
) -> None:
    params = {
        "transport": "stdio",
        "command": "/bin/sh",
        "args": ["-c", "sleep 1; exit 3"],
        "external_timeout_ms": 20_000,
    }
    tree = make_tree(mcp_tree(params, cell={"type": "mcp", "timeout": -1, "restart_limit": 50}))
    async with ColonyHarness(tree, capture=["/sink"]) as colony:
        started = time.monotonic()
        await colony.send("/mcp", call("echo", {"text": "x"}))
        await until(lambda: replies(colony), 10)
        hop, text, _ = result(replies(colony)[0])
        assert hop["error_code"] == "mcp_error"
        assert "exited with code 3" in text
        assert time.monotonic() - started < 5  # not external_timeout_ms
        assert colony.logs("mcp_server_died")


async def test_a_server_that_never_initializes_is_closed_with_its_opening_cancelled(
    make_tree: TreeFactory,
) -> None:
    params = {"transport": "stdio", "command": "/bin/sh", "args": ["-c", "exec sleep 30"]}
    async with ColonyHarness(make_tree(mcp_tree(params)), capture=["/sink"]):
        await until(lambda: _opening() is not None)
        opening = _opening()
    assert opening is not None
    assert opening.cancelled()  # not left to end on its own (an offer, an unseen error)


def _opening() -> asyncio.Task[object] | None:
    return next((t for t in asyncio.all_tasks() if t.get_name() == "mcp-open /mcp"), None)
