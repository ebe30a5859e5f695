"""The shipped compaction lane, topologies/compaction, against two scripted OpenAI servers.

The brain asks for one calc call per round and every answer reports 10 prompt tokens, so with
the shipped threshold (40 tokens) and KEEP_ROUNDS = 1 the fourth round crosses the threshold:
rounds 0-2 fold into one summary row at boundary 2 and round 3 is kept verbatim. The request
that re-enters the brain after a fold is compared with a golden file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from colony.expressions import JsonValue, default_engine
from colony.testing import (
    ColonyHarness,
    ScriptedOpenAI,
    ScriptItem,
    Status,
    text_reply,
    tool_calls_reply,
)
from tests.conftest import FIXTURES, REPO

TREE = REPO / "topologies" / "compaction"
GOLDEN = FIXTURES / "golden" / "compaction"
QUESTION = {"origin": "user", "type": "text", "text": "Add up the numbers, one call per step."}
SUMMARY_1 = "GOAL:\n- add the numbers\nPROGRESS:\n- rounds 0-2 done\nKEY DECISIONS:\n- none\nNEXT STEPS:\n- go on"
SUMMARY_2 = "GOAL:\n- add the numbers\nPROGRESS:\n- rounds 0-6 done\nKEY DECISIONS:\n- none\nNEXT STEPS:\n- answer"
SECTIONS = ("GOAL:", "PROGRESS:", "KEY DECISIONS:", "NEXT STEPS:")
ROLE_ORDER = {"user": 0, "assistant": 1, "tool": 2, "summary": 3}


def brain(rounds: int) -> list[ScriptItem]:
    """``rounds`` tool rounds (call-<i> adds i and 1), then the answer."""
    calls: list[ScriptItem] = [
        tool_calls_reply([(f"call-{i}", "calc", {"numbers": [i, 1]})]) for i in range(rounds)
    ]
    return [*calls, text_reply("done")]


class Turn:
    """One finished turn: the model requests, the answer and the store, read after settling."""

    def __init__(self) -> None:
        self.brain: list[dict[str, Any]] = []
        self.condense: list[dict[str, Any]] = []
        self.answers: list[Any] = []
        self.rows: list[dict[str, Any]] = []
        self.dead_letters: list[Any] = []

    def prompt(self, n: int) -> str:
        return str(self.condense[n]["messages"][-1]["content"])


async def run_turn(rounds: int, condense: Sequence[ScriptItem]) -> Turn:
    turn = Turn()
    async with ScriptedOpenAI(brain(rounds)) as model, ScriptedOpenAI(condense) as condenser:
        urls = {"/brain": model.url, "/compact/condense": condenser.url}
        async with ColonyHarness(TREE, capture=["/answer"], llm_base_url=urls) as colony:
            await colony.send("/", {"messages": [QUESTION]}, context={"turn_id": "t-1"})
            await colony.settle(timeout=50)
            turn.answers = colony.captured("/answer")
            turn.rows = colony.rows("/memory", "thread")
            turn.dead_letters = await colony.dead_letters()
        turn.brain = list(model.requests)
        turn.condense = list(condenser.requests)
    return turn


def normalised(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A request's messages with nothing run-dependent (the call ids are scripted; the
    generated ones of the chat wire, if any, are blanked)."""
    out: list[dict[str, Any]] = json.loads(json.dumps(messages))
    for message in out:
        for call in message.get("tool_calls") or []:
            if not str(call.get("id", "")).startswith("call-"):
                call["id"] = "<id>"
    return out


def golden(name: str) -> Any:
    return json.loads((GOLDEN / name).read_text(encoding="utf-8"))


def layout(rows: list[dict[str, Any]]) -> list[tuple[int, str]]:
    return sorted(((r["iter"], r["role"]) for r in rows), key=lambda k: (k[0], ROLE_ORDER[k[1]]))


def assert_answered(turn: Turn) -> None:
    [answer] = turn.answers
    assert answer.headers.hop["finish_reason"] == "stop"
    assert answer.body["messages"][-1]["text"] == "done"
    assert turn.dead_letters == []


async def test_a_fold_at_boundary_2_re_enters_with_user_summary_last_call_and_its_result() -> None:
    turn = await run_turn(4, [text_reply(SUMMARY_1)])
    assert_answered(turn)
    assert len(turn.condense) == 1
    assert len(turn.brain) == 5
    before, after = turn.brain[3]["messages"], turn.brain[4]["messages"]
    assert len(before) == 7  # user + rounds 0-2, unfolded, before the threshold was crossed
    assert normalised(after) == golden("fold-at-boundary-2.json")
    assert [m["role"] for m in after] == ["user", "assistant", "assistant", "tool"]
    assert after[1]["content"] == SUMMARY_1
    assert "call-0" not in json.dumps(after)
    [summary] = [r for r in turn.rows if r["role"] == "summary"]
    assert summary["iter"] == 2
    assert json.loads(summary["turn"]) == {"origin": "assistant", "type": "text", "text": SUMMARY_1}


async def test_the_condense_prompt_names_four_sections_and_folds_whole_rounds() -> None:
    turn = await run_turn(4, [text_reply(SUMMARY_1)])
    prompt = turn.prompt(0)
    assert all(section in prompt.splitlines() for section in SECTIONS)
    assert QUESTION["text"] in prompt
    for i in range(3):  # each folded call travels with its result
        assert f"- call call-{i}: calc" in prompt
        assert f"- result call-{i}: {i + 1}" in prompt
    assert "call-3" not in prompt  # the kept round is not folded
    assert prompt.rstrip().splitlines()[-1] == "- result call-2: 3"


async def test_folded_rows_stay_in_the_store_byte_for_byte() -> None:
    folded = await run_turn(4, [text_reply(SUMMARY_1)])
    plain = await run_turn(3, [text_reply(SUMMARY_1)])  # never folds: the same rounds 0-2
    assert layout(folded.rows) == [
        (0, "user"),
        (0, "assistant"),
        (0, "tool"),
        (1, "assistant"),
        (1, "tool"),
        (2, "assistant"),
        (2, "tool"),
        (2, "summary"),
        (3, "assistant"),
        (3, "tool"),
    ]
    assert plain.condense == []

    def record(turn: Turn) -> list[tuple[Any, ...]]:
        rows = [(r["iter"], r["role"], r["fired"], r["turn"]) for r in turn.rows if r["iter"] <= 2]
        return sorted(rows, key=lambda row: (row[0], ROLE_ORDER[row[1]]))  # arrival order varies

    kept = [row for row in record(folded) if row[1] != "summary"]
    assert kept == record(plain)


async def test_a_second_fold_refines_the_first_summary() -> None:
    turn = await run_turn(8, [text_reply(SUMMARY_1), text_reply(SUMMARY_2)])
    assert_answered(turn)
    assert len(turn.condense) == 2
    assert len(turn.brain) == 9
    second = turn.prompt(1)
    assert all(section in second.splitlines() for section in SECTIONS)
    assert SUMMARY_1 in second  # the running summary is refined, not rewritten from scratch
    assert "call-2" not in second  # rounds folded before travel only inside the summary
    assert "call-3" in second
    assert "call-6" in second
    assert "call-7" not in second  # the kept round
    assert second.rstrip().splitlines()[-1] == "- result call-6: 7"
    summaries = sorted(
        (r["iter"], json.loads(r["turn"])["text"]) for r in turn.rows if r["role"] == "summary"
    )
    assert summaries == [(2, SUMMARY_1), (6, SUMMARY_2)]
    last = turn.brain[8]["messages"]
    assert [m["role"] for m in last] == ["user", "assistant", "assistant", "tool"]
    assert last[1]["content"] == SUMMARY_2  # the newest summary only
    assert last[2]["tool_calls"][0]["id"] == "call-7"
    assert len([r for r in turn.rows if r["role"] != "summary"]) == 17  # nothing deleted


@pytest.mark.parametrize(
    "failure",
    [Status(400), text_reply("")],
    ids=["provider-error", "empty-answer"],
)
async def test_a_failed_fold_refires_the_unfolded_window_and_the_turn_completes(
    failure: ScriptItem,
) -> None:
    turn = await run_turn(4, [failure])
    assert_answered(turn)
    assert len(turn.condense) >= 1
    assert len(turn.brain) == 5
    assert normalised(turn.brain[4]["messages"]) == golden("refire-unfolded.json")
    assert [r for r in turn.rows if r["role"] == "summary"] == []


async def test_a_short_turn_never_enters_the_compaction_lane() -> None:
    turn = await run_turn(2, [text_reply(SUMMARY_1)])
    assert_answered(turn)
    assert turn.condense == []
    assert len(turn.brain) == 3
    assert [r for r in turn.rows if r["role"] == "summary"] == []


def test_the_fire_lane_split_is_exhaustive_and_exclusive() -> None:
    edges = json.loads((TREE / "main" / "config.json").read_text())["params"]["graph"]["edges"]
    fire = [e for e in edges if e["from"] == "./collector" and "'fire'" in e.get("condition", "")]
    assert sorted(e["to"] for e in fire) == ["./answer", "./brain", "./compact"]
    engine = default_engine()
    programs = [(e["to"], engine.compile(e["condition"])) for e in fire]
    for tokens in (0, 39, 40, 41, 500):
        for iteration in (0, 1, 2, 3, 22, 23, 30):
            context: dict[str, JsonValue] = {
                "iter": iteration,
                "tokens_seen": tokens,
                "fold_at_tokens": 40,
                "keep_rounds": 1,
                "max_rounds": 24,
            }
            activation = engine.activation({"context": context, "hop": {"route": "fire"}})
            taken = [to for to, program in programs if program.evaluate(activation) is True]
            fold = tokens >= 40 and iteration + 1 > 1
            expected = "./compact" if fold else "./brain" if iteration + 1 < 24 else "./answer"
            assert taken == [expected], (tokens, iteration)


def test_the_tree_validates() -> None:
    result = subprocess.run(
        [str(Path(sys.executable).parent / "meclaw"), "--root", str(TREE), "--validate"],
        capture_output=True,
        text=True,
        env={"LLM_BASE_URL": "http://127.0.0.1:9/v1", "PATH": "/usr/bin:/bin"},
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 error(s), 0 warning(s)" in result.stdout + result.stderr


def run_prep(thread: list[dict[str, Any]], *, iteration: int, summary_at: int = -1) -> Any:
    """The compaction prep script on one stdin document, as the code cell would run it."""
    stdin = {
        "envelope": {
            "header": {
                "context": {"turn_id": "t-1", "iter": iteration, "keep_rounds": 1},
                "hop": {"route": "fire", "summary_at": summary_at},
            }
        },
        "body": {"messages": thread},
        "params": {"max_item_chars": 2000},
    }
    script = TREE / "main" / "compact" / "prep" / "prep.py"
    done = subprocess.run(
        [sys.executable, str(script)],
        input=json.dumps(stdin),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return json.loads(done.stdout)


def parallel_round(n: int) -> list[dict[str, Any]]:
    """Round ``n`` with two calls answered in parallel: call, call, result, result."""
    ids = [f"r{n}-a", f"r{n}-b"]
    calls = [
        {"origin": "assistant", "type": "tool_call", "id": i, "text": '{"name":"calc"}'}
        for i in ids
    ]
    results = [{"origin": "tool", "type": "tool_result", "id": i, "text": f"ok {i}"} for i in ids]
    return calls + results


def test_a_fold_never_separates_a_tool_call_from_its_result() -> None:
    thread = [QUESTION, *parallel_round(0), *parallel_round(1), *parallel_round(2)]
    out = run_prep(thread, iteration=2)
    assert out["header"] == {"route": "condense", "fold_upto": 1}
    prompt = out["messages"][0]["text"]
    for call in ("r0-a", "r0-b", "r1-a", "r1-b"):
        assert f"- call {call}:" in prompt
        assert f"- result {call}: ok {call}" in prompt
    assert "r2-" not in prompt


def test_a_window_with_nothing_to_fold_is_refired_unchanged() -> None:
    summary = {"origin": "assistant", "type": "text", "text": SUMMARY_1}
    out = run_prep([QUESTION, summary, *parallel_round(3)], iteration=3, summary_at=2)
    assert out["header"] == {"route": "refire"}
    [select] = out["messages"]
    assert json.loads(select["text"])["operation"] == "select"
