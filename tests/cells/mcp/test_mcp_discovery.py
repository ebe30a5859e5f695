"""Discovery against servers that misbehave: notification storms, endless pagination."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from colony.testing import ColonyHarness
from tests.cells.mcp.servers import mcp_tree, offers, until
from tests.conftest import TreeFactory

RAW = Path(__file__).resolve().parents[3] / "fixtures" / "mcp" / "raw_server.py"


def raw(mode: str, counted: Path) -> dict[str, object]:
    return {
        "transport": "stdio",
        "command": sys.executable,
        "args": [str(RAW), mode, str(counted)],
        "offer_tools": True,
    }


def lists(counted: Path) -> int:
    return int(counted.read_text() or 0) if counted.exists() else 0


async def test_a_list_changed_after_every_list_is_coalesced_and_an_unchanged_list_not_offered(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    counted = tmp_path / "lists"
    async with ColonyHarness(make_tree(mcp_tree(raw("storm", counted))), capture=["/sink"]) as c:
        await until(lambda: lists(counted) >= 2)
        await asyncio.sleep(1.5)  # the storm goes on: about one discovery per second
        assert lists(counted) <= 4
        assert len(offers(c)) == 1
        assert len(c.logs("mcp_tools_discovered")) == 1


async def test_a_repeated_cursor_ends_the_discovery_with_a_logged_failure(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    counted = tmp_path / "lists"
    async with ColonyHarness(make_tree(mcp_tree(raw("same-cursor", counted)))) as c:
        await until(lambda: c.logs("mcp_discovery_failed"), 5)
        assert "repeated the cursor 'again'" in c.logs("mcp_discovery_failed")[0]["error"]
        assert lists(counted) == 2


async def test_pagination_stops_after_a_hundred_pages(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    counted = tmp_path / "lists"
    async with ColonyHarness(make_tree(mcp_tree(raw("endless-pages", counted)))) as c:
        await until(lambda: c.logs("mcp_discovery_failed"), 5)
        assert "more than 100 pages" in c.logs("mcp_discovery_failed")[0]["error"]
        assert lists(counted) == 100


async def test_a_discovery_that_answers_again_after_a_failure_clears_the_failure_from_health(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    counted = tmp_path / "lists"
    async with ColonyHarness(make_tree(mcp_tree(raw("flaky-list", counted)))) as c:
        await until(lambda: lists(counted) >= 3, 10)
        assert "list unavailable" in c.logs("mcp_discovery_failed")[0]["error"]
        status = c.colony.events.io.task("/mcp", "mcp_server")
        await until(lambda: status.state == "ok", 5)  # the same list as before: still a success
        assert status.failures == 0
