"""The TTL budget of a store-backed tool loop, pinned on our own tree, fixtures/trees/ttl-budget
(issue 9; meclaw pins the same in tool_loop_ttl_budget.rs on 14b-tool-loop-store).

The tree has meclaw's shape, one tool per round: ``/capture`` persists the user turn and starts
``/llm``; each round goes ``/llm → /tool-loop → dispatcher``, which sends the assistant turn to
the collector (``c_asst``) and the call to ``calc`` (whose result reaches the collector on
``c_res``). The collector's read-modify-write conversation with ``/store`` is itself routing:
insert, select, guarded update, firing select — two decisions each — and then the fire edge
back into ``/llm``, the loopback that counts ``context.iter``.

Every routing decision costs one TTL unit, so along the chain that re-enters the brain one round
costs 2 (``/llm → /tool-loop → dispatcher``) plus 10 when the round is claimed on the assistant
chain (``dispatcher → collector``, 4 × 2 store legs, fire) or 11 when it is claimed on the tool
chain (one more leg, ``dispatcher → calc → collector``): 12 or 13. Which chain sees the round
complete is a race between the two branches, decided anew each round. The fixed cost is 3
(``@external → /capture``, ``/capture → /llm``, ``/llm → /sink``), so six rounds and the answer
cost ``75 + k`` decisions, ``k`` the rounds claimed on the tool chain: 75–81. Measured runs
land anywhere in between (78 is common). The tests read ``k`` from the message log and assert
the exact count for the run at hand, as well as the range. On the default 64 the run dies in
round 6, or in round 5 when the tool chain claimed enough earlier rounds: 5 or 6 model calls.

The restoring variant is a copy whose fire edge gets ``restore_ttl`` (and an iteration bound in
its condition): each fire leaves with 64, so the answer reaches ``/sink`` with exactly 62.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from colony.envelope import Envelope
from colony.persist.records import DeadLetterRow, MessageLogEntry
from colony.testing import ColonyHarness, ScriptedOpenAI, text_reply, tool_calls_reply
from tests.conftest import FIXTURES

TREE = FIXTURES / "trees" / "ttl-budget"
LOOP_CONFIG = Path("main") / "tool-loop" / "config.json"
ROUNDS = 6
FIXED = 3  # @external -> /capture, /capture -> /llm, /llm -> /sink
ROUND = 12  # a round claimed on the assistant chain; one more on the tool chain
QUESTION = {"origin": "user", "type": "text", "text": "six steps please"}


def script() -> list[dict[str, Any]]:
    calls = [tool_calls_reply([(f"call-{i}", "calc", {"x": 1, "y": 1})]) for i in range(ROUNDS)]
    return [*calls, text_reply("done")]


def loopback_copy(tmp_path: Path, *, condition: str | None) -> Path:
    """The tree with ``restore_ttl`` on its fire edge; ``condition=None`` drops the condition."""
    root = tmp_path / "ttl-budget-restore"
    shutil.copytree(TREE, root)
    file = root / LOOP_CONFIG
    doc = json.loads(file.read_text())
    [edge] = [e for e in doc["params"]["graph"]["edges"] if "'fire'" in e.get("condition", "")]
    edge["modifier"]["restore_ttl"] = True
    if condition is None:
        del edge["condition"]
    else:
        edge["condition"] = condition
    file.write_text(json.dumps(doc, indent=2))
    return root


@dataclass
class Run:
    """What one run left behind: the answers at ``/sink``, the dead letters, the thread rows,
    the trace's message log and the provider requests."""

    answers: list[Envelope]
    dead: list[DeadLetterRow]
    thread: list[dict[str, Any]]
    log: list[MessageLogEntry]
    requests: list[Any]


async def run(tree: Path, ttl: int | None) -> Run:
    """Six tool rounds and an answer, sent to ``/capture`` with ``ttl`` (None: the default)."""
    async with ScriptedOpenAI(script()) as model:
        harness = ColonyHarness(tree, capture=["/sink", "/park"], llm_base_url=model.url)
        async with harness as h:
            assert h.colony.config.message_default_ttl == 64
            body = {"messages": [QUESTION]}
            trace = await h.send("/capture", body, context={"turn_id": "t1"}, ttl=ttl)
            await h.settle(timeout=30)
            assert len(h.captured("/park")) == 1  # the user row's insert receipt
            return Run(
                answers=h.captured("/sink"),
                dead=await h.dead_letters(),
                thread=h.rows("/store", "thread"),
                log=await h.message_log(trace),
                requests=list(model.requests),
            )


def ancestry(log: list[MessageLogEntry], row: MessageLogEntry) -> list[MessageLogEntry]:
    """The routing decisions that led to ``row``, from the ingress row to it."""
    by_id = {r.id: r for r in log}
    chain = [row]
    while chain[-1].parent_message_id is not None:
        chain.append(by_id[chain[-1].parent_message_id])
    return chain[::-1]


def brain_entries(log: list[MessageLogEntry]) -> list[MessageLogEntry]:
    return [r for r in log if r.to_path == "/llm"]


def round_costs(log: list[MessageLogEntry]) -> list[tuple[int, bool]]:
    """For each completed round (each fire into the brain): its decisions along the re-entering
    chain, and whether the tool chain claimed it."""
    entries = brain_entries(log)
    out = []
    for before, after in itertools.pairwise(entries):
        chain = ancestry(log, after)
        segment = chain[chain.index(before) + 1 :]
        out.append((len(segment), any(r.to_path == "/tool-loop/calc" for r in segment)))
    return out


def assert_every_decision_costs_one_unit(log: list[MessageLogEntry]) -> None:
    by_id = {r.id: r for r in log}
    for row in log:
        if row.parent_message_id is not None:
            assert row.ttl == by_id[row.parent_message_id].ttl - 1, (row.from_path, row.to_path)


def assert_rounds_cost_twelve_or_thirteen(log: list[MessageLogEntry]) -> int:
    """Every completed round costs 12, or 13 when claimed on the tool chain; returns how many
    were claimed on the tool chain."""
    costs = round_costs(log)
    assert costs
    assert all(cost == ROUND + on_tool for cost, on_tool in costs), costs
    return sum(on_tool for _, on_tool in costs)


async def test_six_rounds_on_the_default_64_without_restore_dead_letter_ttl_expired() -> None:
    result = await run(TREE, ttl=None)
    log = result.log
    assert log[0].from_path == "@external"
    assert log[0].ttl == 63
    assert result.answers == []
    assert result.dead
    assert {d.error_code for d in result.dead} == {"ttl_expired"}
    assert all(d.message.ttl == 0 and d.message.trace_id == log[0].trace_id for d in result.dead)
    assert all(int(d.message.headers.context["iter"]) < ROUNDS for d in result.dead)
    assert_every_decision_costs_one_unit(log)
    on_tool = assert_rounds_cost_twelve_or_thirteen(log)
    # At most six model calls: the seventh, answering call never happens. Each call is one
    # delivery into the brain; the run dies in round 6, or in round 5 when the tool chain
    # claimed enough of the first rounds to leave round 5 short of its last decision.
    calls = len(result.requests)
    assert calls == len(brain_entries(log)) <= ROUNDS
    assert calls in (5, 6)
    completed = len(round_costs(log))
    assert completed == calls - 1
    assert 2 + ROUND * completed + on_tool <= 64 < 2 + ROUND * ROUNDS


async def test_six_rounds_complete_on_a_starting_ttl_of_160_in_75_to_81_decisions() -> None:
    result = await run(TREE, ttl=160)
    log = result.log
    [answer] = result.answers
    assert answer.headers.hop["finish_reason"] == "stop"
    assert answer.headers.context["iter"] == ROUNDS
    assert len(result.requests) == ROUNDS + 1
    assert result.dead == []
    assert_every_decision_costs_one_unit(log)
    on_tool = assert_rounds_cost_twelve_or_thirteen(log)
    assert len(round_costs(log)) == ROUNDS
    [sink_row] = [r for r in log if r.to_path == "/sink"]
    decisions = len(ancestry(log, sink_row))
    assert decisions == 160 - answer.ttl == FIXED + ROUND * ROUNDS + on_tool
    assert 75 <= decisions <= 81
    # The thread: 1 user row + 6 × (assistant, tool), every round claimed exactly once, and
    # the last request carries all of it, rebuilt in order.
    assert len(result.thread) == 1 + 2 * ROUNDS
    fired = [r["fired"] for r in result.thread if r["role"] == "assistant"]
    assert fired == [1] * ROUNDS
    roles = [m["role"] for m in result.requests[-1]["messages"]]
    assert roles == ["user"] + ["assistant", "tool"] * ROUNDS


async def test_restore_ttl_on_the_loopback_completes_on_64_and_never_exceeds_it(
    tmp_path: Path,
) -> None:
    bounded = "has(hop.route) && hop.route == 'fire' && int(context.iter) < 12"
    result = await run(loopback_copy(tmp_path, condition=bounded), ttl=None)
    log = result.log
    [answer] = result.answers
    assert answer.headers.hop["finish_reason"] == "stop"
    assert answer.headers.context["iter"] == ROUNDS
    assert len(result.requests) == ROUNDS + 1
    assert result.dead == []
    # Restored to 64 on the last fire, minus one into /llm and one into /sink.
    assert answer.ttl == 62
    assert log[0].ttl == 63
    assert max(r.ttl for r in log) <= 64
    fires = [r for r in log if r.from_path == "/tool-loop/collector" and r.to_path == "/llm"]
    assert len(fires) == ROUNDS
    assert {r.ttl for r in fires} == {63}


def validate(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "colony", "--root", str(root), "--validate"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_restoring_edge_without_a_condition_is_refused_by_validate(tmp_path: Path) -> None:
    refused = validate(loopback_copy(tmp_path / "bare", condition=None))
    assert refused.returncode == 1
    [line] = [x for x in refused.stderr.splitlines() if "error[" in x]
    assert "error[restore_ttl_unconditional] at params.graph.edges[6].modifier.restore_ttl" in line
    assert f"{LOOP_CONFIG}:" in line
    assert "invalid (1 error(s)" in refused.stderr.splitlines()[-1]
    bounded = loopback_copy(tmp_path / "bounded", condition="int(context.iter) < 12")
    accepted = validate(bounded)
    assert accepted.returncode == 0, accepted.stderr
    assert "restore_ttl_unconditional" not in accepted.stderr
