"""The research bot's compaction lane: off by default, switched on by RESEARCH_FOLD_AT_TOKENS.

The planner's model and the condense model are two ScriptedOpenAI servers on 127.0.0.1 (the
condense cell is pointed at its own one by path). Every planner answer reports 10 prompt
tokens, so with ``RESEARCH_FOLD_AT_TOKENS=20`` and ``RESEARCH_KEEP_ROUNDS=1`` the second round
crosses the threshold: round 0 folds into one summary row at boundary 0 and round 1 is the
tail the planner still sees verbatim.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from colony.expressions import JsonValue, default_engine
from scripted.core import ScriptedOpenAI, ScriptItem, error_status, text_reply
from scripted.core import tool_calls_reply as calls
from scripted.search import ScriptedSearch
from tests.topologies.test_research_bot import (
    CHAT,
    OTTER_KELP,
    OTTER_TOOLS,
    TOPOLOGY,
    Bot,
    call_ids,
    research_bot,
    roles,
    tool_contents,
    two_rounds,
)

SWITCH_ON = {"RESEARCH_FOLD_AT_TOKENS": "20", "RESEARCH_KEEP_ROUNDS": "1"}
QUESTION = "What do sea otters use stones for?"
ANSWER = "Sea otters crack shellfish on stones and keep kelp forests alive."
SUMMARY = (
    "GOAL:\n- what sea otters use stones for\n"
    "PROGRESS:\n- searched and read the stone-tools page\n"
    "KEY DECISIONS:\n- trust the page\n"
    "NEXT STEPS:\n- read about kelp"
)
UNFOLDED = ["system", "user", "assistant", "tool", "tool", "assistant", "tool", "tool"]


@asynccontextmanager
async def bot_with_condenser(
    condense: Sequence[ScriptItem],
    env: dict[str, str] | None = None,
    script_for: Callable[[ScriptedSearch], list[ScriptItem]] = two_rounds,
) -> AsyncIterator[tuple[Bot, ScriptedOpenAI]]:
    """The research bot (planner script ``script_for``), its condense cell on its own server."""
    async with (
        ScriptedOpenAI(list(condense)) as condenser,
        research_bot(
            script_for=script_for,
            env=env,
            llm_base_url={"/compact/condense": condenser.url},
        ) as bot,
    ):
        yield bot, condenser


async def assert_answered(bot: Bot) -> None:
    [answer] = await bot.ask(QUESTION)
    assert answer == {"chat_id": CHAT, "text": ANSWER}
    assert bot.model.served == 3  # two rounds and the answer: a fold costs no planner call
    assert await bot.colony.dead_letters() == []


def rows(bot: Bot) -> list[dict[str, Any]]:
    return bot.colony.rows("/memory", "thread")


async def test_a_fold_re_enters_the_planner_with_system_user_summary_then_the_tail() -> None:
    async with bot_with_condenser([text_reply(SUMMARY)], SWITCH_ON) as (bot, condenser):
        await assert_answered(bot)
        assert condenser.served == 1
        first, second, third = bot.model.requests
        assert roles(second) == UNFOLDED[:5]  # 10 tokens seen: below the threshold
        assert roles(third) == ["system", "user", "assistant", "assistant", "tool", "tool"]
        assert third["messages"][1]["content"] == QUESTION
        assert third["messages"][2] == {"role": "assistant", "content": SUMMARY}
        assert call_ids(third) == ["call-s2", "call-f2"]
        assert sorted(tool_contents(third)) == ["call-f2", "call-s2"]
        assert "call-s1" not in json.dumps(third["messages"])
        assert third["messages"][0] == first["messages"][0]  # persona unchanged
        assert bot.thread() == [
            (0, "user"),
            (0, "assistant"),
            (0, "tool"),
            (0, "tool"),
            (0, "summary"),
            (1, "assistant"),
            (1, "tool"),
            (1, "tool"),
            (2, "answer"),
        ]
        [summary] = [r for r in rows(bot) if r["role"] == "summary"]
        assert json.loads(summary["turn"]) == {
            "origin": "assistant",
            "type": "text",
            "text": SUMMARY,
        }


async def test_the_condense_prompt_folds_whole_round_0_into_four_sections() -> None:
    async with bot_with_condenser([text_reply(SUMMARY)], SWITCH_ON) as (bot, condenser):
        await assert_answered(bot)
        [request] = condenser.requests
        assert roles(request) == ["user"]
        prompt = request["messages"][0]["content"]
        for section in ("GOAL:", "PROGRESS:", "KEY DECISIONS:", "NEXT STEPS:"):
            assert section in prompt
        assert QUESTION in prompt
        assert "The rounds to fold now (1):" in prompt
        for folded in ("call call-s1", "result call-s1", "call call-f1", "result call-f1"):
            assert folded in prompt
        for kept in ("call-s2", "call-f2"):
            assert kept not in prompt


async def test_a_failed_fold_refires_the_unfolded_window_and_the_turn_still_answers() -> None:
    async with bot_with_condenser([error_status(400)], SWITCH_ON) as (bot, condenser):
        await assert_answered(bot)
        assert condenser.served == 1
        third = bot.model.requests[2]
        assert roles(third) == UNFOLDED
        assert call_ids(third) == ["call-s1", "call-f1", "call-s2", "call-f2"]
        assert [r for r in rows(bot) if r["role"] == "summary"] == []
        assert bot.thread()[-1] == (2, "answer")


def four_rounds(search: ScriptedSearch) -> list[ScriptItem]:
    pages = [OTTER_TOOLS, OTTER_KELP, OTTER_TOOLS, OTTER_KELP]
    rounds: list[ScriptItem] = [
        calls(
            [
                (f"call-s{i}", "web_search", {"query": f"sea otters {i}"}),
                (f"call-f{i}", "web_fetch", {"url": search.page_url(page)}),
            ]
        )
        for i, page in enumerate(pages)
    ]
    return [*rounds, text_reply(ANSWER)]


async def test_a_second_fold_refines_the_first_summary_and_keeps_every_row() -> None:
    second = SUMMARY.replace("read about kelp", "answer")
    condense = [text_reply(SUMMARY), text_reply(second)]
    async with bot_with_condenser(condense, SWITCH_ON, four_rounds) as (bot, condenser):
        [answer] = await bot.ask(QUESTION)
        assert answer == {"chat_id": CHAT, "text": ANSWER}
        assert bot.model.served == 5
        assert await bot.colony.dead_letters() == []
        assert condenser.served == 2
        refine = condenser.requests[1]["messages"][0]["content"]
        assert "The running summary of the rounds folded before" in refine
        assert SUMMARY in refine
        assert "The rounds to fold now (2):" in refine  # rounds 1 and 2; round 3 is kept
        assert "Round 1:" in refine
        assert "Round 2:" in refine
        assert "call-s0" not in refine
        assert "call-s3" not in refine
        # round 2 re-entered with user + summary at 0 + round 1; round 4 with the refinement
        assert call_ids(bot.model.requests[2]) == ["call-s1", "call-f1"]
        last = bot.model.requests[4]
        assert roles(last) == ["system", "user", "assistant", "assistant", "tool", "tool"]
        assert last["messages"][2] == {"role": "assistant", "content": second}
        assert call_ids(last) == ["call-s3", "call-f3"]
        summaries = sorted((r["iter"], r["turn"]) for r in rows(bot) if r["role"] == "summary")
        assert [(i, json.loads(t)["text"]) for i, t in summaries] == [(0, SUMMARY), (2, second)]
        layout = bot.thread()
        assert layout.count((0, "summary")) == 1
        assert layout.count((2, "summary")) == 1
        assert [it for it, role in layout if role == "assistant"] == [0, 1, 2, 3]
        assert len([1 for _, role in layout if role == "tool"]) == 8  # folded rows kept
        assert layout[-1] == (4, "answer")


async def test_with_the_switch_off_no_request_ever_goes_to_condense() -> None:
    for env in (None, {"RESEARCH_FOLD_AT_TOKENS": "0"}):
        async with bot_with_condenser([text_reply(SUMMARY)], env) as (bot, condenser):
            await assert_answered(bot)
            assert condenser.requests == []
            assert roles(bot.model.requests[2]) == UNFOLDED
            assert [r for r in rows(bot) if r["role"] == "summary"] == []


def test_the_fire_lane_split_is_exhaustive_and_exclusive() -> None:
    config = json.loads((TOPOLOGY / "main" / "config.json").read_text(encoding="utf-8"))
    fire = [
        e
        for e in config["params"]["graph"]["edges"]
        if e["from"] == "./collector" and "hop.route == 'fire'" in e.get("condition", "")
    ]
    assert sorted(e["to"] for e in fire) == ["./compact", "./drain", "./planner"]
    engine = default_engine()
    programs = [(e["to"], engine.compile(e["condition"])) for e in fire]
    switch_keys: list[dict[str, JsonValue]] = [{}] + [
        {"fold_at_tokens": fold, "keep_rounds": keep}
        for fold in ("0", "20", "1000")
        for keep in ("0", "1", "3")
    ]
    for keys in switch_keys:
        for iteration in range(14):
            for seen in (0, 10, 20, 2000):
                context: dict[str, JsonValue] = {"iter": str(iteration), **keys}
                if keys:
                    context["tokens_seen"] = str(seen)
                activation = engine.activation({"context": context, "hop": {"route": "fire"}})
                taken = [to for to, program in programs if program.evaluate(activation) is True]
                assert len(taken) == 1, (context, taken)
                if keys.get("fold_at_tokens", "0") == "0":
                    assert taken == (["./planner"] if iteration < 12 else ["./drain"])
