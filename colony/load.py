"""A load driver: many conversations at once through a store-backed tool loop.

Used by ``bench/load.py`` (throughput, peak memory) and by the load test in ``make test`` (zero
loss, zero duplicates). The tree is ``fixtures/trees/ttl-budget``: capture → llm → dispatcher
→ calc → collector ⇄ store → llm, the round claimed by the store's guarded update. The model is
a :class:`~colony.scripted.ScriptedOpenAI` with a responder, so each conversation gets the
answer its own request calls for — ``tools`` parallel calls per round for ``rounds`` rounds,
then a text that names the conversation — however the requests of all of them interleave.
"""

from __future__ import annotations

import asyncio
import resource
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from colony.scripted import ScriptedOpenAI, ScriptItem, text_reply, tool_calls_reply
from colony.testing import ColonyHarness

__all__ = ["LOOP_TREE", "LoadReport", "run_load"]

LOOP_TREE = Path(__file__).resolve().parent.parent / "fixtures" / "trees" / "ttl-budget"


@dataclass(frozen=True, slots=True)
class LoadReport:
    conversations: int
    seconds: float
    decisions: int
    model_calls: int
    answered: int
    """Conversations that got exactly one answer, and the right one."""
    lost: list[str]
    duplicated: list[str]
    wrong: list[str]
    """Turn ids whose answer names another conversation (crossed threads)."""
    bad_threads: list[str]
    """Turn ids whose stored thread does not hold exactly the rows the loop must write."""
    dead_letters: int
    peak_rss_mb: float
    """Peak resident memory of this process (the daemon side; cell subprocesses excluded)."""

    @property
    def ok(self) -> bool:
        return (
            self.answered == self.conversations
            and not (self.lost or self.duplicated or self.wrong or self.bad_threads)
            and self.dead_letters == 0
        )


def responder(rounds: int, tools: int) -> Any:
    def respond(body: Any) -> ScriptItem:
        messages = body["messages"]
        done = sum(1 for m in messages if m.get("role") == "assistant" and m.get("tool_calls"))
        if done < rounds:
            calls = [(f"r{done}c{k}", "calc", {"x": done, "y": k}) for k in range(tools)]
            return tool_calls_reply(calls)
        question = next(m["content"] for m in messages if m.get("role") == "user")
        return text_reply(f"answer to {question}")

    return respond


async def run_load(
    conversations: int,
    *,
    rounds: int = 3,
    tools: int = 2,
    timeout: float = 600,  # noqa: ASYNC109
    tree: Path = LOOP_TREE,
) -> LoadReport:
    """Start every conversation at once, wait for quiet, and check every answer and row."""
    model = ScriptedOpenAI([], responder=responder(rounds, tools), keep_requests=False)
    async with model:
        harness = ColonyHarness(
            tree, capture=["/sink", "/park"], llm_base_url=model.url, log_level="warning"
        )
        async with harness as colony:
            turns = [f"t{i}" for i in range(conversations)]
            started = time.perf_counter()
            await asyncio.gather(
                *(
                    colony.send(
                        "/capture",
                        {"messages": [{"origin": "user", "type": "text", "text": f"question {t}"}]},
                        context={"turn_id": t},
                    )
                    for t in turns
                )
            )
            await colony.settle(timeout=timeout)
            seconds = time.perf_counter() - started
            answers = Counter[str]()
            wrong: list[str] = []
            for message in colony.captured("/sink"):
                turn = message.headers.context["turn_id"]
                answers[turn] += 1
                text = message.body["messages"][-1].get("text")
                if text != f"answer to question {turn}":
                    wrong.append(turn)
            rows = Counter(r["turn_id"] for r in colony.rows("/store", "thread"))
            expected_rows = 1 + rounds * (1 + tools)
            result = LoadReport(
                conversations=conversations,
                seconds=seconds,
                decisions=colony.colony.decisions,
                model_calls=model.served,
                answered=sum(1 for t in turns if answers[t] == 1 and t not in wrong),
                lost=[t for t in turns if answers[t] == 0],
                duplicated=[t for t in turns if answers[t] > 1],
                wrong=wrong,
                bad_threads=[t for t in turns if rows[t] != expected_rows],
                dead_letters=len(await colony.dead_letters()),
                peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            )
    return result
