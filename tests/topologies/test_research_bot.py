"""topologies/telegram-research, booted as shipped, against scripted Telegram, model and search.

Every server is on 127.0.0.1: ScriptedTelegram (the bot API), ScriptedOpenAI (the planner's
model) and ScriptedSearch (a search endpoint over fixtures/search-corpus.json that also serves
the pages it finds). The only changes to the tree are test settings the shipped file cannot
take from the environment (:func:`research_tree`): the reader may reach loopback, and the
proxy polls in short intervals.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import shutil
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from colony.demo import offline_tree
from colony.testing import ColonyHarness
from scripted.core import ScriptedOpenAI, ScriptItem, error_status, text_reply
from scripted.core import tool_calls_reply as calls
from scripted.search import ScriptedSearch
from scripted.telegram import ScriptedTelegram

TOPOLOGY = Path(__file__).resolve().parents[2] / "topologies" / "telegram-research"
CHAT = 4242
ITER_BOUND = 12
OTTER_TOOLS = "/pages/sea-otter-tools.html"
OTTER_KELP = "/pages/sea-otter-kelp.html"


# -- booting the topology ----------------------------------------------------------------------


def research_tree(
    dest: Path,
    *,
    reader: Mapping[str, Any] | None = None,
    collector: Mapping[str, Any] | None = None,
    dispatch: Mapping[str, Any] | None = None,
) -> Path:
    """The demo's offline copy of the topology (:func:`colony.demo.offline_tree`: the readers
    may reach loopback, the proxy long-polls for 1 s), with ``reader``/``collector``/
    ``dispatch`` params merged in."""
    overrides = {"reader": reader, "collector": collector, "dispatch": dispatch}
    return offline_tree(dest, {cell: params for cell, params in overrides.items() if params})


def research_env(
    telegram: ScriptedTelegram, model: ScriptedOpenAI, search: ScriptedSearch
) -> dict[str, str]:
    """The topology's environment, pointing every outside service at a scripted one."""
    return {
        "TELEGRAM_BOT_TOKEN": telegram.token,
        "TELEGRAM_BASE_URL": telegram.url,
        "LLM_BASE_URL": model.url,
        "LLM_API_KEY": "scripted-key",
        "LLM_MODEL": "scripted-model",
        "SEARCH_ENDPOINT": search.search_url,
    }


@dataclass
class Bot:
    colony: ColonyHarness
    telegram: ScriptedTelegram
    model: ScriptedOpenAI
    search: ScriptedSearch

    async def ask(self, text: str, answers: int = 1) -> list[dict[str, Any]]:
        """A user writes ``text``; wait for ``answers`` more messages to the chat and quiet."""
        before = len(self.telegram.sent)
        self.telegram.push_text(CHAT, text, user_id=7)
        sent = await self.telegram.wait_sent(before + answers, timeout=30)
        await self.colony.settle(timeout=30)
        return sent[before:]

    def thread(self, turn_id: str | None = None) -> list[tuple[int, str]]:
        """(iter, role) of the thread rows, of one turn or of the only one."""
        rows = self.colony.rows("/memory", "thread")
        if turn_id is None:
            (turn_id,) = {r["turn_id"] for r in rows}
        return sorted(
            ((r["iter"], r["role"]) for r in rows if r["turn_id"] == turn_id),
            key=lambda x: (x[0], ["user", "assistant", "tool", "summary", "answer"].index(x[1])),
        )


@asynccontextmanager
async def research_bot(
    script: Sequence[ScriptItem] | None = None,
    *,
    script_for: Any = None,
    reader: Mapping[str, Any] | None = None,
    collector: Mapping[str, Any] | None = None,
    dispatch: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    llm_base_url: Mapping[str, str] | None = None,
) -> AsyncIterator[Bot]:
    """Boot the topology with all three scripted servers. ``script_for(search)`` builds the
    model's script when it needs the search server's URLs. ``env`` is merged over
    :func:`research_env`; ``llm_base_url`` points llm cells (by path) at other servers."""
    async with ScriptedSearch() as search:
        items = list(script_for(search) if script_for is not None else script or [])
        async with (
            ScriptedTelegram(known_chats=[CHAT]) as telegram,
            ScriptedOpenAI(items) as model,
        ):
            tmp = Path(tempfile.mkdtemp(prefix="research-bot-"))
            try:
                tree = research_tree(tmp, reader=reader, collector=collector, dispatch=dispatch)
                full_env = {**research_env(telegram, model, search), **(env or {})}
                async with ColonyHarness(
                    tree, env=full_env, log_level="info", llm_base_url=llm_base_url
                ) as colony:
                    yield Bot(colony, telegram, model, search)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)


# -- reading what the model saw ----------------------------------------------------------------


def roles(request: dict[str, Any]) -> list[str]:
    return [m["role"] for m in request["messages"]]


def tool_contents(request: dict[str, Any]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in request["messages"] if m["role"] == "tool"}


def call_ids(request: dict[str, Any]) -> list[str]:
    return [c["id"] for m in request["messages"] for c in m.get("tool_calls") or []]


def two_rounds(search: ScriptedSearch) -> list[ScriptItem]:
    return [
        calls(
            [
                ("call-s1", "web_search", {"query": "sea otters stone tools"}),
                ("call-f1", "web_fetch", {"url": search.page_url(OTTER_TOOLS)}),
            ]
        ),
        calls(
            [
                ("call-s2", "web_search", {"query": "kelp forest urchins"}),
                ("call-f2", "web_fetch", {"url": search.page_url(OTTER_KELP)}),
            ]
        ),
        text_reply("Sea otters crack shellfish on stones and keep kelp forests alive."),
    ]


# -- the whole bot -----------------------------------------------------------------------------


async def test_a_chat_question_is_researched_in_two_parallel_rounds_and_answered_in_the_chat() -> (
    None
):
    async with research_bot(script_for=two_rounds) as bot:
        [answer] = await bot.ask("What do sea otters use stones for?")
        assert answer == {
            "chat_id": CHAT,
            "text": "Sea otters crack shellfish on stones and keep kelp forests alive.",
        }
        assert bot.model.served == 3  # exactly one model call per round, plus the answer
        first, second, third = bot.model.requests
        assert roles(first) == ["system", "user"]
        assert first["messages"][1]["content"] == "What do sea otters use stones for?"
        assert sorted(t["function"]["name"] for t in first["tools"]) == [
            "read_file",
            "web_fetch",
            "web_search",
        ]
        assert roles(second) == ["system", "user", "assistant", "tool", "tool"]
        assert roles(third) == [
            "system",
            "user",
            "assistant",
            "tool",
            "tool",
            "assistant",
            "tool",
            "tool",
        ]
        assert call_ids(third) == ["call-s1", "call-f1", "call-s2", "call-f2"]
        results = tool_contents(second)
        found = json.loads(results["call-s1"])["results"]
        assert found[0]["url"] == bot.search.page_url(OTTER_TOOLS)
        assert "flat stone" in results["call-f1"]
        assert sorted(bot.search.queries) == ["kelp forest urchins", "sea otters stone tools"]
        assert sorted(bot.search.fetched) == [OTTER_KELP, OTTER_TOOLS]
        assert bot.thread() == [
            (0, "user"),
            (0, "assistant"),
            (0, "tool"),
            (0, "tool"),
            (1, "assistant"),
            (1, "tool"),
            (1, "tool"),
            (2, "answer"),
        ]
        rows = bot.colony.rows("/memory", "thread")
        assert [r["fired"] for r in rows if r["role"] == "assistant"] == [1, 1]
        assert await bot.colony.dead_letters() == []


async def test_each_chat_question_is_its_own_turn() -> None:
    script = [text_reply("first answer"), text_reply("second answer")]
    async with research_bot(script) as bot:
        assert [m["text"] for m in await bot.ask("one?")] == ["first answer"]
        assert [m["text"] for m in await bot.ask("two?")] == ["second answer"]
        rows = bot.colony.rows("/memory", "thread")
        turns = {r["turn_id"] for r in rows}
        assert len(turns) == 2
        for turn in turns:
            assert bot.thread(turn) == [(0, "user"), (0, "answer")]
        assert await bot.colony.dead_letters() == []


async def test_a_remember_call_or_an_unknown_tool_completes_its_round_with_an_error_result() -> (
    None
):
    def script(search: ScriptedSearch) -> list[ScriptItem]:
        return [
            calls(
                [
                    ("call-s", "web_search", {"query": "honeybee dance"}),
                    ("call-r", "remember", {"fact": "the user likes bees"}),
                    ("call-x", "translate", {"text": "Biene"}),
                    ("call-b", "web_fetch", "not json"),
                ]
            ),
            text_reply("Bees dance."),
        ]

    async with research_bot(script_for=script) as bot:
        [answer] = await bot.ask("How do bees find flowers?")
        assert answer["text"] == "Bees dance."
        assert bot.model.served == 2
        results = tool_contents(bot.model.requests[1])
        assert sorted(results) == ["call-b", "call-r", "call-s", "call-x"]
        assert "remember" in json.loads(results["call-r"])["$error"]
        assert "translate" in json.loads(results["call-x"])["$error"]
        assert "arguments" in json.loads(results["call-b"])["$error"]
        assert json.loads(results["call-s"])["results"]
        assert await bot.colony.dead_letters() == []


async def test_a_runaway_turn_ends_with_an_apology_in_the_chat_and_a_bounded_iter() -> None:
    def script(search: ScriptedSearch) -> list[ScriptItem]:
        return [calls([("call-again", "web_search", {"query": "tides moon"})])]  # repeats forever

    async with research_bot(script_for=script) as bot:
        [answer] = await bot.ask("Tell me everything about tides.")
        assert answer["chat_id"] == CHAT
        assert answer["text"].startswith("Sorry, I gave up on this one")
        assert bot.model.served == ITER_BOUND + 1  # iter 0 .. 12, then the bound answers
        thread = bot.thread()
        assert max(i for i, _ in thread) == ITER_BOUND
        assert thread.count((ITER_BOUND, "tool")) == 1
        assert not [r for r in thread if r[1] == "answer"]
        assert await bot.colony.dead_letters() == []
        await asyncio.sleep(0.2)  # nothing else is on its way to the chat
        assert len(bot.telegram.sent) == 1


async def test_a_failing_model_gets_the_user_an_apology_not_silence() -> None:
    async with research_bot([error_status(401)]) as bot:
        [answer] = await bot.ask("Anyone there?")
        assert (
            answer["text"]
            == "Sorry, the language model could not answer this time (auth). Please try again."
        )
        assert bot.thread() == [(0, "user")]
        assert await bot.colony.dead_letters() == []


async def test_a_failing_script_gets_the_user_an_apology_not_silence() -> None:
    def script(search: ScriptedSearch) -> list[ScriptItem]:
        return [calls([("call-s", "web_search", {"query": "tides"})])]

    # dispatch's answer no longer fits its output limit: the code cell reports invalid_json
    async with research_bot(script_for=script, dispatch={"max_output_bytes": 16}) as bot:
        [answer] = await bot.ask("Why are there tides?")
        assert answer["text"] == (
            "Sorry, something went wrong on my side (dispatch: invalid_json). Please try again."
        )
        assert bot.model.served == 1
        assert await bot.colony.dead_letters() == []


async def test_the_scripted_search_ranks_by_word_overlap_and_serves_every_result_page() -> None:
    async with ScriptedSearch() as search:
        ranked = search.rank("sea otters kelp")
        assert [r["url"] for r in ranked[:2]] == [
            search.page_url(OTTER_KELP),
            search.page_url(OTTER_TOOLS),
        ]
        assert search.rank("quantum chromodynamics") == []
        assert set(ranked[0]) == {"title", "url", "snippet"}


# -- the fan-in, driven directly ---------------------------------------------------------------


def assistant_turn(turn: str, n: int) -> dict[str, Any]:
    tools = ["web_search", "web_fetch", "web_search"]
    return {
        "messages": [
            {
                "origin": "assistant",
                "type": "tool_call",
                "id": f"{turn}-call-{i}",
                "text": json.dumps({"arguments": "{}", "name": tools[i]}, sort_keys=True),
            }
            for i in range(n)
        ]
    }


def tool_result(turn: str, i: int) -> dict[str, Any]:
    call = f"{turn}-call-{i}"
    return {
        "messages": [{"origin": "tool", "type": "tool_result", "id": call, "text": f"result {i}"}]
    }


def round_sends(turn: str, n: int) -> list[tuple[str, dict[str, Any]]]:
    return [("c_asst", assistant_turn(turn, n))] + [
        ("c_res", tool_result(turn, i)) for i in range(n)
    ]


async def send_to_collector(bot: Bot, turn: str, route: str, body: dict[str, Any]) -> None:
    context = {"turn_id": turn, "iter": "0", "chat_id": CHAT}
    await bot.colony.send("/collector", body, hop={"route": route}, context=context)


def requests_of(bot: Bot, turn: str) -> list[dict[str, Any]]:
    return [r for r in bot.model.requests if any(c.startswith(f"{turn}-") for c in call_ids(r))]


def assert_fired_once(bot: Bot, turn: str, n: int) -> None:
    [request] = requests_of(bot, turn)
    assert roles(request) == ["assistant"] + ["tool"] * n
    assert call_ids(request) == [f"{turn}-call-{i}" for i in range(n)]
    assert tool_contents(request) == {f"{turn}-call-{i}": f"result {i}" for i in range(n)}
    assert bot.thread(turn) == [(0, "assistant")] + [(0, "tool")] * n + [(1, "answer")]
    rows = [r for r in bot.colony.rows("/memory", "thread") if r["turn_id"] == turn]
    assert [r["fired"] for r in rows if r["role"] == "assistant"] == [1]


async def test_a_round_fires_once_whatever_the_arrival_order() -> None:
    async with research_bot([text_reply("done")]) as bot:
        orders = 0
        for n in (2, 3):
            for k, order in enumerate(itertools.permutations(round_sends(f"p{n}", n))):
                turn = f"p{n}o{k}"
                for route, body in order:
                    body = json.loads(json.dumps(body).replace(f"p{n}-call", f"{turn}-call"))
                    await send_to_collector(bot, turn, route, body)
                    await bot.colony.settle(timeout=30)
                assert_fired_once(bot, turn, n)
                orders += 1
        assert orders == 6 + 24
        assert len(bot.telegram.sent) == orders  # every round's answer reached the chat
        assert bot.model.served == orders  # one model call per round, never a second
        assert await bot.colony.dead_letters() == []


async def test_concurrent_arrivals_fire_each_round_exactly_once() -> None:
    rng = random.Random(11)
    async with research_bot([text_reply("done")]) as bot:
        turns = [(f"c{k}", 2 + k % 2) for k in range(16)]

        async def deliver(turn: str, route: str, body: dict[str, Any]) -> None:
            await asyncio.sleep(rng.random() / 100)
            await send_to_collector(bot, turn, route, body)

        sends = [(turn, route, body) for turn, n in turns for route, body in round_sends(turn, n)]
        rng.shuffle(sends)
        await asyncio.gather(*(deliver(*s) for s in sends))
        await bot.colony.settle(timeout=30)
        for turn, n in turns:
            assert_fired_once(bot, turn, n)
        assert bot.model.served == len(turns)
        assert await bot.colony.dead_letters() == []


async def test_a_missing_result_holds_the_round_and_a_late_duplicate_never_refires_it() -> None:
    async with research_bot([text_reply("done")]) as bot:
        sends = round_sends("h", 3)
        for route, body in [sends[0], sends[1], sends[1], sends[2]]:  # call-0 twice, no call-2
            await send_to_collector(bot, "h", route, body)
        await bot.colony.settle(timeout=30)
        assert bot.model.served == 0
        await send_to_collector(bot, "h", *sends[3])
        await bot.colony.settle(timeout=30)
        assert bot.model.served == 1
        await send_to_collector(bot, "h", *sends[3])  # late duplicate
        await bot.colony.settle(timeout=30)
        assert bot.model.served == 1
        assert await bot.colony.dead_letters() == []
