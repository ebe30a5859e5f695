"""``make screenshots``: the pictures of docs/console.md, shot from a running colony.

Boots ``topologies/telegram-research`` offline, as ``meclaw demo`` does (a scripted Telegram,
model and search engine on 127.0.0.1), serves its HTTP API with the web console, asks it two
questions, sends two messages to a path with no cell (two dead letters) and replays one. Then
a headless Chromium (Debian's ``/usr/bin/chromium``, driven by Playwright) opens each page of
the console and saves ``overview.png``, ``runs.png``, ``trace.png``, ``dead-letters.png`` and
``graph.png``; the graph is shot while a third question runs, so its cells glow.

    python bench/console_screenshots.py [--out docs/console] [--serve]

``--serve`` skips the pictures: the colony keeps running with its console URL printed, to look
around by hand (Ctrl-C stops it).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from colony.api import build_app, serve
from colony.demo import ANSWER, CHAT_ID, PAGES, QUESTION, offline_tree
from colony.testing import (
    ColonyHarness,
    Delay,
    ScriptedOpenAI,
    ScriptedTelegram,
    text_reply,
    tool_calls_reply,
)
from scripted.search import ScriptedSearch

if TYPE_CHECKING:
    from playwright.async_api import ViewportSize

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
VIEWPORT: ViewportSize = {"width": 1440, "height": 960}
QUESTIONS = (
    QUESTION,
    "Which tools do sea otters carry, and where do they keep them?",
    "Why are kelp forests called the rainforests of the sea?",
)


def planner_round(page_urls: list[str], n: int) -> list[Any]:
    """One question's model calls: two rounds of two tools, then the answer, each taking a
    moment and costing tokens, as a real model does (the trace view shows both)."""
    grow = 900 * n
    return [
        Delay(
            0.45,
            tool_calls_reply(
                [
                    ("call_search_1", "web_search", {"query": "sea otters stone tools"}),
                    ("call_search_2", "web_search", {"query": "sea otters kelp forests"}),
                ],
                model="scripted-planner",
                prompt_tokens=812 + grow,
                completion_tokens=64,
            ),
        ),
        Delay(
            0.6,
            tool_calls_reply(
                [
                    ("call_fetch_1", "web_fetch", {"url": page_urls[0]}),
                    ("call_fetch_2", "web_fetch", {"url": page_urls[1]}),
                ],
                model="scripted-planner",
                prompt_tokens=2140 + grow,
                completion_tokens=71,
            ),
        ),
        Delay(
            0.9,
            text_reply(
                ANSWER,
                model="scripted-planner",
                prompt_tokens=4385 + grow,
                completion_tokens=118,
            ),
        ),
    ]


async def shoot(url: str, out: Path, ask: Any, trace_id: str) -> None:
    """Each page into ``out``; ``ask()`` starts the question the graph is shot during."""
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            page = await browser.new_page(viewport=VIEWPORT, color_scheme="light")
            await page.goto(f"{url}/ui/#/")
            await page.wait_for_selector("[data-testid=cell-row]")
            await page.wait_for_timeout(400)
            await page.screenshot(path=out / "overview.png", full_page=True)

            await page.goto(f"{url}/ui/#/runs")
            await page.wait_for_selector("[data-testid=run-row]")
            await page.screenshot(path=out / "runs.png", full_page=True)

            await page.goto(f"{url}/ui/#/trace/{trace_id}")
            await page.wait_for_selector("[data-testid=handling-row]")
            llm_hop = page.locator("[data-testid=hop]", has=page.locator(".chip-llm")).first
            await llm_hop.locator("summary").click()
            await page.mouse.move(0, 0)
            await page.evaluate("window.scrollTo(0, 0)")
            await page.wait_for_timeout(200)
            await page.screenshot(
                path=out / "trace.png",
                clip={"x": 0, "y": 0, "width": VIEWPORT["width"], "height": 1700},
                full_page=True,
            )

            await page.goto(f"{url}/ui/#/dead-letters")
            await page.wait_for_selector("[data-testid=dead-letter]")
            await page.locator("[data-testid=dl-toggle]").last.click()
            await page.wait_for_selector("[data-testid=dl-message]")
            await page.screenshot(path=out / "dead-letters.png", full_page=True)

            await page.mouse.move(0, 0)  # no cell under the pointer (it would be highlighted)
            await page.goto(f"{url}/ui/#/graph")
            await page.wait_for_selector("[data-testid=graph-node]")
            await page.wait_for_timeout(300)
            await ask()
            await page.wait_for_selector(".node.heat-4, .node.heat-5", timeout=20_000)
            await page.wait_for_timeout(400)  # the colours fade in
            await page.screenshot(path=out / "graph.png", full_page=True)
        finally:
            await browser.close()


async def run(out: Path | None) -> None:
    with tempfile.TemporaryDirectory(prefix="meclaw-console-") as scratch_dir:
        scratch = Path(scratch_dir)
        async with (
            ScriptedSearch() as search,
            ScriptedTelegram(known_chats=(CHAT_ID,)) as telegram,
        ):
            pages = [search.page_url(path) for path in PAGES]
            script = [item for n in range(len(QUESTIONS)) for item in planner_round(pages, n)]
            async with ScriptedOpenAI(script) as model:
                env = {
                    "TELEGRAM_BOT_TOKEN": telegram.token,
                    "TELEGRAM_BASE_URL": telegram.url,
                    "LLM_BASE_URL": model.url,
                    "LLM_API_KEY": "offline-console",
                    "LLM_MODEL": "scripted-planner",
                    "SEARCH_ENDPOINT": search.search_url,
                }
                tree = offline_tree(scratch)
                async with ColonyHarness(tree, env=env, workdir=scratch) as colony:
                    runner = await serve(build_app(colony.colony), "127.0.0.1", 0)
                    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
                    try:
                        await _story(colony, telegram, url, out)
                    finally:
                        await runner.cleanup()


async def _story(
    colony: ColonyHarness, telegram: ScriptedTelegram, url: str, out: Path | None
) -> None:
    async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=30) as client:
        for n, question in enumerate(QUESTIONS[:2], start=1):
            telegram.push_text(CHAT_ID, question)
            await telegram.wait_sent(n, timeout=60)
            await colony.settle(timeout=60)
        for text in ("archive this", "and this"):
            body = {"messages": [{"origin": "user", "type": "text", "text": text}]}
            posted = await client.post("/messages", json={"target": "/archiver", "body": body})
            posted.raise_for_status()
        await colony.settle(timeout=30)
        letters = (await client.get("/colony/dead_letters")).json()["dead_letters"]
        replayed = await client.post(f"/colony/dead_letters/{letters[-1]['id']}/replay")
        replayed.raise_for_status()
        await colony.settle(timeout=30)
        first = next(row for row in await colony.message_log() if row.from_path == "@external")
        if out is None:
            print(f"the console: {url}/ui/  (Ctrl-C stops the colony)", flush=True)
            await asyncio.Event().wait()
            return

        async def ask() -> None:
            telegram.push_text(CHAT_ID, QUESTIONS[2])

        await shoot(url, out, ask, first.trace_id)
        await telegram.wait_sent(3, timeout=60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "console")
    parser.add_argument("--serve", action="store_true", help="run the colony, shoot nothing")
    args = parser.parse_args()
    if not args.serve:
        if not CHROMIUM.exists():
            print(f"no {CHROMIUM}: install Debian's chromium package", file=sys.stderr)
            return 1
        args.out.mkdir(parents=True, exist_ok=True)
    try:
        asyncio.run(run(None if args.serve else args.out))
    except KeyboardInterrupt:
        return 130
    if not args.serve:
        for name in sorted(args.out.glob("*.png")):
            print(name.relative_to(ROOT) if name.is_relative_to(ROOT) else name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
