"""``make run`` / ``meclaw demo``: the research bot, offline, in a few seconds.

Boots the shipped ``topologies/telegram-research`` tree as it is, with every outside service
replaced by a scripted server on 127.0.0.1 that speaks the real wire protocol: Telegram's Bot
API (:class:`ScriptedTelegram`), an OpenAI-compatible model (:class:`ScriptedOpenAI`, playing a
planner that asks for two tools at once for two rounds, then answers) and a search engine with
its web pages (:class:`ScriptedSearch` over ``fixtures/search-corpus.json``). One chat message is
pushed in; every routing decision is printed as it happens, from the colony's live events and
in ``meclaw watch``'s words; the answer that reached the chat is printed on a line beginning
``answer:``, then the dead-letter count.

With ``--api HOST:PORT`` the demo serves its HTTP API and web console there (``meclaw watch
--api http://HOST:PORT`` shows the same routing from another terminal); with ``--hold`` it
keeps running after the first answer and takes each line typed on stdin as a new question in
the chat, until end of input or Ctrl-C.

Nothing is mocked inside the colony: the proxy long-polls, the planner posts HTTP, the searcher
and reader fetch over sockets, the collector's store is a real SQLite file. The demo runs a copy
of the tree with the settings of :data:`OFFLINE` changed, none expressible through ``${VAR}``
(they are booleans and integers): the readers may fetch pages on 127.0.0.1 (their
private-network guard is on in the shipped tree) and the proxy's long poll is one second, so
the demo stops at once.

The tree and the corpus are found through :mod:`colony.shipped`: in a checkout they are its
folders, in an installed wheel the package data that carries them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console

from colony.api import build_app, serve
from colony.events import Event, Interest
from colony.ids import now_ms
from colony.shipped import search_corpus, topology
from colony.testing import (
    ColonyHarness,
    ScriptedOpenAI,
    ScriptedTelegram,
    text_reply,
    tool_calls_reply,
)
from colony.watch import event_line
from scripted.search import ScriptedSearch

TOPOLOGY = topology("telegram-research")
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


def planner(page_urls: list[str]) -> Callable[[Any], Any]:
    """:func:`planner_script`, decided from each request alone (the rounds since the chat's
    last question), so the planner answers every question a held demo is asked."""
    script = planner_script(page_urls)

    def respond(body: Any) -> Any:
        turns = body.get("messages", []) if isinstance(body, dict) else []
        asked = max((n for n, t in enumerate(turns) if t.get("role") == "user"), default=-1)
        rounds = sum(1 for t in turns[asked + 1 :] if t.get("role") == "assistant")
        return script[min(rounds, len(script) - 1)]

    return respond


SHOWN = frozenset({"route", "llm", "dead_letter"})
"""The events the demo prints (``meclaw watch`` prints each cell's start and end too)."""


class Follower:
    """Prints the colony's routing as it happens, from its live events, each line as
    ``meclaw watch`` prints it."""

    def __init__(self, colony: ColonyHarness, out: TextIO) -> None:
        self.watcher = colony.colony.events.watch(Interest(kinds=SHOWN))
        self.console = Console(file=out, highlight=False, soft_wrap=True)
        self.started_ms = now_ms()
        self.decisions = 0

    async def run(self) -> None:
        while not self.watcher.closed:
            self._print(await self.watcher.next_batch())

    def flush(self) -> None:
        """Print what is waiting now (the colony has settled: nothing more is coming)."""
        self._print(self.watcher.take())

    def _print(self, batch: tuple[list[Event], int]) -> None:
        for event in batch[0]:
            self.decisions += event.kind == "route"
            self.console.print(event_line(event.data, self.started_ms))


async def run_demo(
    out: TextIO = sys.stdout,
    *,
    timeout: float = 60,  # noqa: ASYNC109
    api: tuple[str, int] | None = None,
    hold: bool = False,
) -> int:
    """The whole demo; 0 when the answer reached the chat and nothing was dead-lettered.
    ``api``: serve the HTTP API and console there; ``hold``: go on with questions from stdin."""
    with tempfile.TemporaryDirectory(prefix="meclaw-demo-") as scratch:
        return await _run(Path(scratch), out, timeout, api, hold)


async def _run(
    scratch: Path,
    out: TextIO,
    timeout: float,  # noqa: ASYNC109
    api: tuple[str, int] | None,
    hold: bool,
) -> int:
    async with (
        ScriptedSearch(search_corpus()) as search,
        ScriptedTelegram(known_chats=(CHAT_ID,)) as telegram,
    ):
        pages = [search.page_url(path) for path in PAGES]
        async with ScriptedOpenAI([], responder=planner(pages)) as model:
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
                server = None
                if api is not None:
                    server = await serve(build_app(colony.colony), *api)
                    url = f"http://{api[0]}:{server.addresses[0][1]}"
                    out.write(
                        f"API and web console: {url}/ui/\nwatch it from another terminal: "
                        f"meclaw watch --api {url}\n"
                    )
                out.write(f"\nchat {CHAT_ID} says: {QUESTION}\n\nrouting as it happens:\n")
                out.flush()
                started = time.monotonic()
                follower = Follower(colony, out)
                following = asyncio.create_task(follower.run())
                telegram.push_text(CHAT_ID, QUESTION)
                try:
                    await telegram.wait_sent(1, timeout=timeout)
                    await colony.settle(timeout=timeout)
                finally:
                    following.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await following
                    follower.flush()
                decisions = follower.decisions
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
                try:
                    if hold:
                        await _hold(colony, telegram, follower, out, timeout)
                finally:
                    if server is not None:
                        await server.cleanup()
    out.write(_for_real())
    return 0 if answer == ANSWER and not letters else 1


def _for_real() -> str:
    """How to run the bot against the real services: in a checkout on its topology folder,
    from an installed wheel on a copy of the packaged one."""
    fill = "fill in the Telegram token, the model key and a search endpoint, then:"
    try:
        here = TOPOLOGY.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return (
            f"\nTo run it for real: cp -r {TOPOLOGY} research-bot && cp research-bot/.env.example "
            f"research-bot/.env,\n{fill} meclaw --root research-bot\n"
        )
    return (
        f"\nTo run it for real: cp {here}/.env.example {here}/.env,\n{fill} "
        f".venv/bin/meclaw --root {here}\n"
    )


async def _hold(
    colony: ColonyHarness,
    telegram: ScriptedTelegram,
    follower: Follower,
    out: TextIO,
    timeout: float,  # noqa: ASYNC109
) -> None:
    """Each line typed on stdin is a new question in the chat, answered as the first was."""
    out.write("\nask more: type a question and press Enter (end of input or Ctrl-C stops)\n")
    out.flush()
    loop = asyncio.get_running_loop()
    following = asyncio.create_task(follower.run())
    try:
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            question = line.strip()
            if not question:
                continue
            asked = len(telegram.sent)
            telegram.push_text(CHAT_ID, question)
            await telegram.wait_sent(asked + 1, timeout=timeout)
            await colony.settle(timeout=timeout)
            out.write(f"answer: {telegram.sent[-1]['text']}\n")
            out.flush()
    finally:
        following.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await following


def main(api: tuple[str, int] | None = None, hold: bool = False) -> int:
    try:
        return asyncio.run(run_demo(api=api, hold=hold))
    except KeyboardInterrupt:
        return 130
    except TimeoutError:
        sys.stderr.write(
            "meclaw demo: no answer reached the chat in time; the colony's log says why\n"
        )
        return 1
    except OSError as exc:  # --api on an address in use, say
        sys.stderr.write(f"meclaw demo: {exc}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
