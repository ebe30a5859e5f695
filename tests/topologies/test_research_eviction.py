"""The collector's eviction in topologies/telegram-research (store-backed tool loop, item 3).

A tool result enters the rebuilt thread of every later round of its turn. The collector's
rebuild bounds that by two params, ``max_result_bytes`` and ``max_rounds``: it replaces whole
results by short stubs (call id, tool, size), oldest rounds first, never one of the round being
answered, and it only ever changes the view: the thread rows keep every result byte for byte.
"""

from __future__ import annotations

import json
from typing import Any

from scripted.core import ScriptItem, text_reply
from scripted.core import tool_calls_reply as calls
from scripted.search import ScriptedSearch
from tests.topologies.test_research_bot import research_bot, roles, tool_contents

BIG = 200 * 1024
BIG_PAGE = "/files/big.txt"


def big_text() -> str:
    line = "The quick sea otter floats on its back and cracks a clam on a stone. "
    return (line * (BIG // len(line) + 1))[:BIG]


def stored_results(rows: list[dict[str, Any]]) -> dict[str, str]:
    results = {}
    for row in rows:
        if row["role"] == "tool":
            turn = json.loads(row["turn"])
            results[turn["id"]] = turn["text"]
    return results


async def test_a_large_result_is_carried_once_then_stubbed_and_the_store_keeps_it_whole() -> None:
    page = big_text()

    def script(search: ScriptedSearch) -> list[ScriptItem]:
        url = search.add_page(BIG_PAGE, page)
        return [
            calls([("call-big", "web_fetch", {"url": url})]),
            calls([("call-s", "web_search", {"query": "octopus camouflage"})]),
            calls([("call-t", "web_search", {"query": "tides"})]),
            text_reply("done"),
        ]

    # The reader's own 32 KiB cap is lifted so a 200 KB result reaches the collector.
    async with research_bot(script_for=script, reader={"max_bytes": 512 * 1024}) as bot:
        [answer] = await bot.ask("Read the big file, please.")
        assert answer["text"] == "done"
        assert bot.model.served == 4
        _first, answering, later, last = bot.model.requests
        assert tool_contents(answering) == {"call-big": page}  # carried in the round it answers
        for request in (later, last):
            stub = tool_contents(request)["call-big"]
            assert len(stub) < 300
            assert "call-big" in stub
            assert "web_fetch" in stub
            assert f"{BIG} bytes" in stub
            assert page[:50] not in json.dumps(request)
        assert json.loads(tool_contents(later)["call-s"])["results"]  # small and fresh: carried
        rows = bot.colony.rows("/memory", "thread")
        assert stored_results(rows)["call-big"] == page  # the rows are never touched
        assert len(stored_results(rows)["call-big"].encode()) == BIG
        assert await bot.colony.dead_letters() == []


async def test_the_shipped_reader_cuts_a_large_page_visibly_at_32_kib() -> None:
    page = big_text()

    def script(search: ScriptedSearch) -> list[ScriptItem]:
        url = search.add_page(BIG_PAGE, page)
        return [calls([("call-big", "web_fetch", {"url": url})]), text_reply("done")]

    async with research_bot(script_for=script) as bot:
        await bot.ask("Read the big file, please.")
        text = tool_contents(bot.model.requests[1])["call-big"]
        assert text.startswith(page[:1000])
        assert text.endswith(f"[truncated, {BIG} bytes total]")
        assert len(text.encode()) < 32 * 1024 + 100


def search_rounds(n: int) -> list[ScriptItem]:
    queries = ["sea otters", "honeybee", "sky blue", "sourdough", "voyager", "tides"]
    script: list[ScriptItem] = [
        calls([(f"call-{r}", "web_search", {"query": queries[r]})]) for r in range(n)
    ]
    return [*script, text_reply("done")]


async def test_results_past_the_turn_cap_are_stubbed_oldest_rounds_first() -> None:
    collector = {"max_rounds": 2, "max_result_bytes": 1 << 20}
    async with research_bot(search_rounds(4), collector=collector) as bot:
        await bot.ask("Search four times.")
        requests = bot.model.requests
        assert len(requests) == 5

        def carried(request: dict[str, Any]) -> list[str]:
            return [
                call for call, text in sorted(tool_contents(request).items()) if "results" in text
            ]

        def stubbed(request: dict[str, Any]) -> list[str]:
            return [
                call for call, text in sorted(tool_contents(request).items()) if "evicted" in text
            ]

        # request k answers round k - 1 and carries the newest two rounds verbatim
        assert (carried(requests[1]), stubbed(requests[1])) == (["call-0"], [])
        assert (carried(requests[2]), stubbed(requests[2])) == (["call-0", "call-1"], [])
        assert (carried(requests[3]), stubbed(requests[3])) == (["call-1", "call-2"], ["call-0"])
        assert (carried(requests[4]), stubbed(requests[4])) == (
            ["call-2", "call-3"],
            ["call-0", "call-1"],
        )
        assert roles(requests[4]) == ["system", "user"] + ["assistant", "tool"] * 4
        rows = bot.colony.rows("/memory", "thread")
        assert all("results" in text for text in stored_results(rows).values())


async def test_the_round_being_answered_is_carried_whole_even_over_the_byte_cap() -> None:
    collector = {"max_rounds": 12, "max_result_bytes": 64}
    async with research_bot(search_rounds(2), collector=collector) as bot:
        await bot.ask("Search twice.")
        _, answering_0, answering_1 = bot.model.requests
        results_0 = tool_contents(answering_0)["call-0"]
        assert len(results_0.encode()) > 64
        assert json.loads(results_0)["results"]
        later = tool_contents(answering_1)
        assert json.loads(later["call-1"])["results"]  # over the cap, but its own round
        assert "evicted" in later["call-0"]
        assert "web_search" in later["call-0"]
        assert f"({len(results_0.encode())} bytes)" in later["call-0"]
