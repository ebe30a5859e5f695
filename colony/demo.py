"""``make run`` / ``meclaw demo``: the research bot, offline, in a few seconds.

Boots the shipped ``topologies/telegram-research`` tree as it is, with every outside service
replaced by a scripted server on 127.0.0.1 that speaks the real wire protocol: Telegram's Bot
API (:class:`ScriptedTelegram`), an OpenAI-compatible model (:class:`ScriptedOpenAI`, playing a
planner that asks for two tools at once for two rounds, then answers) and a search engine with
its web pages (:class:`ScriptedSearch` over ``fixtures/search-corpus.json``). One chat message is
pushed in; every routing decision is printed as it is logged; the answer that reached the chat is
printed on a line beginning ``answer:``, then the dead-letter count.

Nothing is mocked inside the colony: the proxy long-polls, the planner posts HTTP, the searcher
and reader fetch over sockets, the collector's store is a real SQLite file. The demo runs a copy
of the tree with the settings of :data:`OFFLINE` changed, none expressible through ``${VAR}``
(they are booleans and integers): the readers may fetch pages on 127.0.0.1 (their
private-network guard is on in the shipped tree) and the proxy's long poll is one second, so
the demo stops at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from colony.persist.records import MessageLogEntry
from colony.testing import (
    ColonyHarness,
    ScriptedOpenAI,
    ScriptedTelegram,
    text_reply,
    tool_calls_reply,
)
from scripted.search import ScriptedSearch

TOPOLOGY = Path(__file__).resolve().parent.parent / "topologies" / "telegram-research"
CHAT_ID = 4242
QUESTION = "How do sea otters use tools, and why do kelp forests need them?"
PAGES = ("/pages/sea-otter-tools.html", "/pages/sea-otter-kelp.html")
"""Corpus pages the planner reads in its second round."""
ANSWER = (
    "Sea otters crack shellfish open on stones they carry under the arm, and by eating sea "
    "urchins they keep the urchins from grazing kelp forests bare: a keystone species."
)


OFFLINE: dict[str, dict[str, Any]] = {
    "reader": {"allow_private_networks": True},
    "bulk_reader": {"allow_private_networks": True},
    "proxy": {"long_poll_request_secs": 1, "long_poll_timeout_ms": 5000},
}
"""Params no ``${VAR}`` can give (a boolean, integers) for running against loopback servers."""


def offline_tree(dest: Path, overrides: Mapping[str, Mapping[str, Any]] | None = None) -> Path:
    """A copy of the topology under ``dest`` with :data:`OFFLINE` and then ``overrides`` (cell
    name → params) merged into the cells' params; the demo and the topology's tests boot it."""
    overrides = overrides or {}
    tree = dest / TOPOLOGY.name
    shutil.copytree(TOPOLOGY, tree, ignore=shutil.ignore_patterns(".env", "*.db*", "log.jsonl"))
    for cell in OFFLINE.keys() | overrides.keys():
        config = tree / "main" / cell / "config.json"
        doc = json.loads(config.read_text(encoding="utf-8"))
        doc["params"] = {
            **doc.get("params", {}),
            **OFFLINE.get(cell, {}),
            **overrides.get(cell, {}),
        }
        config.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    return tree


def planner_script(page_urls: list[str]) -> list[Any]:
    """Two rounds of two parallel tool calls, then the answer."""
    return [
        tool_calls_reply(
            [
                ("call_search_1", "web_search", {"query": "sea otters stone tools"}),
                ("call_search_2", "web_search", {"query": "sea otters kelp forests"}),
            ]
        ),
        tool_calls_reply(
            [
                ("call_fetch_1", "web_fetch", {"url": page_urls[0]}),
                ("call_fetch_2", "web_fetch", {"url": page_urls[1]}),
            ]
        ),
        text_reply(ANSWER),
    ]


def _hop_line(n: int, started: float, row: MessageLogEntry) -> str:
    elapsed = time.monotonic() - started
    return f"  {n:>3}  {elapsed:5.2f}s  {row.from_path:<20} -> {row.to_path:<20} ttl {row.ttl}"


async def _follow(colony: ColonyHarness, out: TextIO, started: float, done: asyncio.Event) -> int:
    """Print each routing decision as it reaches the message log; returns how many."""
    shown = 0
    while True:
        finished = done.is_set()
        await colony.colony.db.flush()
        rows = await colony.message_log()
        for row in rows[shown:]:
            shown += 1
            out.write(_hop_line(shown, started, row) + "\n")
        out.flush()
        if finished:
            return shown
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), timeout=0.1)


async def run_demo(out: TextIO = sys.stdout, *, timeout: float = 60) -> int:  # noqa: ASYNC109
    """The whole demo; 0 when the answer reached the chat and nothing was dead-lettered."""
    with tempfile.TemporaryDirectory(prefix="meclaw-demo-") as scratch:
        return await _run(Path(scratch), out, timeout)


async def _run(scratch: Path, out: TextIO, timeout: float) -> int:  # noqa: ASYNC109
    async with ScriptedSearch() as search, ScriptedTelegram(known_chats=(CHAT_ID,)) as telegram:
        pages = [search.page_url(path) for path in PAGES]
        async with ScriptedOpenAI(planner_script(pages)) as model:
            env = {
                "TELEGRAM_BOT_TOKEN": telegram.token,
                "TELEGRAM_BASE_URL": telegram.url,
                "LLM_BASE_URL": model.url,
                "LLM_API_KEY": "offline-demo",
                "LLM_MODEL": "scripted-planner",
                "SEARCH_ENDPOINT": search.search_url,
            }
            out.write(
                f"booting topologies/{TOPOLOGY.name} offline: Telegram, the model and search "
                "are scripted servers on 127.0.0.1\n"
            )
            tree = offline_tree(scratch)
            async with ColonyHarness(tree, env=env, log_level="info", workdir=scratch) as colony:
                out.write(
                    f"\nchat {CHAT_ID} says: {QUESTION}\n\nrouting decisions as they happen:\n"
                )
                out.write(f"  {'#':>3}  {'time':>6}  {'from':<20}    {'to':<20} ttl\n")
                started = time.monotonic()
                done = asyncio.Event()
                follower = asyncio.create_task(_follow(colony, out, started, done))
                telegram.push_text(CHAT_ID, QUESTION)
                try:
                    await telegram.wait_sent(1, timeout=timeout)
                    await colony.settle(timeout=timeout)
                finally:
                    done.set()
                    decisions = await follower
                letters = await colony.dead_letters()
                answer = telegram.sent[0]["text"] if telegram.sent else None
                out.write(
                    f"\n{decisions} routing decisions, {len(model.requests)} model calls, "
                    f"{len(search.queries)} searches, {len(search.fetched)} pages fetched, "
                    f"{time.monotonic() - started:.2f}s\n"
                )
                out.write(f"answer: {answer}\n")
                out.write(f"dead letters: {len(letters)}\n")
                for letter in letters:
                    out.write(
                        f"  {letter.error_code}: {letter.sender_path} -> {letter.original_target}\n"
                    )
    out.write(
        "\nTo run it for real: cp topologies/telegram-research/.env.example "
        "topologies/telegram-research/.env,\nfill in the Telegram token, the model key and a "
        "search endpoint, then: .venv/bin/meclaw --root topologies/telegram-research\n"
    )
    return 0 if answer == ANSWER and not letters else 1


def main() -> int:
    try:
        return asyncio.run(run_demo())
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
