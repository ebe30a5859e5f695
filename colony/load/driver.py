"""A load driver: many conversations at once through a store-backed tool loop.

Used by ``bench/load.py`` (throughput, peak memory, the journal's depth) and by the load tests
in ``make test`` (zero loss, zero duplicates; small mailboxes for the backpressure reproducer).
The tree is ``fixtures/trees/ttl-budget``: capture → llm → dispatcher → calc → collector ⇄
store → llm, the round claimed by the store's guarded update, its ``/sink`` an
:class:`AnswerLog` that notes when each answer came. The model is a
:class:`~scripted.ScriptedOpenAI` with a responder, so each conversation gets the answer
its own request calls for — ``tools`` parallel calls per round for ``rounds`` rounds, then a
text that names the conversation — however the requests of all of them interleave.

A run never waits forever: it stops at ``timeout`` seconds, or sooner when the journal has not
moved for ``stall`` seconds (no delivery made durable, none acknowledged: a deadlock), and the
result then says so (:attr:`LoadReport.stopped`) beside the answers that did arrive.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from colony.load.answers import AnswerLog, answer_tree
from colony.load.watch import JournalWatch
from colony.testing import ColonyHarness
from scripted import ScriptedOpenAI, ScriptItem, text_reply, tool_calls_reply

__all__ = [
    "LOOP_TREE",
    "SAMPLE_SECONDS",
    "LoadReport",
    "question",
    "responder",
    "run_load",
    "tally",
    "until_quiet",
]

LOOP_TREE = Path(__file__).resolve().parents[2] / "fixtures" / "trees" / "ttl-budget"

_WATCHDOG_EVENTS = frozenset({"mailbox_stalled", "mailbox_wait_cycle"})

SAMPLE_SECONDS = 0.2
"""How often a run looks at the journal (its depth is a sampled peak, not an exact one)."""


@dataclass(frozen=True, slots=True)
class LoadReport:
    conversations: int
    seconds: float
    """From the first send to quiet (or to the moment the run was stopped)."""
    last_answer_seconds: float | None
    """From the first send to the last answer; None when nothing answered."""
    decisions: int
    model_calls: int
    answered: int
    """Conversations that got exactly one answer, and the right one."""
    lost: list[str]
    duplicated: list[str]
    """Turn ids answered by more than one message (a redelivered copy of one answer is not
    counted here, see :attr:`redelivered_answers`)."""
    wrong: list[str]
    """Turn ids whose answer names another conversation (crossed threads)."""
    bad_threads: list[str]
    """Answered turn ids whose stored thread does not hold exactly the rows the loop writes."""
    dead_letters: int
    peak_rss_mb: float
    """Peak resident memory of the daemon's process (cell subprocesses excluded)."""
    journal_peak: int
    """The most rows seen in ``colony.db``'s journal at once (sampled)."""
    stopped: str | None = None
    """Why the run was cut short (timed out, stalled, a phase that died); None: it went quiet."""
    redelivered: int | None = None
    """Messages the journal redelivered at a restart (None: no restart ran)."""
    redelivered_answers: int = 0
    """Answers the sink got again under the same message id (at-least-once across a kill)."""
    watchdog_reports: int = 0
    """``mailbox_stalled`` and ``mailbox_wait_cycle`` lines the colony logged (a healthy run
    has none: no cell stops draining, no sender waits in a cycle)."""
    dead_letter_kinds: list[str] = field(default_factory=list)
    """The most frequent (code, cell) pairs among the dead letters, each with a count and one
    detail (JournalWatch.dead_letter_kinds)."""
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures()

    def failures(self) -> list[str]:
        """What went wrong, one line each (empty: nothing)."""
        out: list[str] = []
        if self.stopped is not None:
            out.append(f"{self.stopped}; {self.answered}/{self.conversations} answered")
        if self.answered != self.conversations and self.stopped is None:
            out.append(f"{self.answered}/{self.conversations} answered")
        for label, turns in (
            ("lost (no answer)", self.lost),
            ("doubled (answered twice)", self.duplicated),
            ("crossed (another conversation's answer)", self.wrong),
            ("bad threads (stored rows)", self.bad_threads),
        ):
            if turns:
                out.append(f"{label}: {len(turns)}, e.g. {', '.join(turns[:5])}")
        if self.dead_letters:
            kinds = "; ".join(self.dead_letter_kinds)
            out.append(f"dead letters: {self.dead_letters}" + (f": {kinds}" if kinds else ""))
        if self.watchdog_reports:
            out.append(f"watchdog reports (stalls or wait cycles): {self.watchdog_reports}")
        return out

    def summary(self) -> str:
        """One paragraph for a person: the outcome, then each failure."""
        head = (
            f"{self.answered}/{self.conversations} answered in {self.seconds:.1f} s; lost "
            f"{len(self.lost)}, doubled {len(self.duplicated)}, crossed {len(self.wrong)}, "
            f"bad threads {len(self.bad_threads)}, dead letters {self.dead_letters}, watchdog "
            f"reports {self.watchdog_reports}; journal peak {self.journal_peak} rows"
        )
        return "\n".join([head, *(f"  FAILED: {line}" for line in self.failures()), *self.notes])


def question(turn: str) -> dict[str, Any]:
    """The body that starts conversation ``turn``."""
    return {"messages": [{"origin": "user", "type": "text", "text": f"question {turn}"}]}


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


def tally(
    turns: list[str],
    log: AnswerLog,
    rows: Mapping[str, int] | None,
    *,
    rounds: int,
    tools: int,
    started: float,
    **figures: Any,
) -> LoadReport:
    """Check every answer and every stored thread (``rows``: rows per turn id; None when they
    could not be read); ``started`` is the wall time of the first send, ``figures`` the rest
    of :class:`LoadReport`."""
    ids: dict[str, set[str]] = {}
    wrong: set[str] = set()
    for answer in log.answers:
        ids.setdefault(answer.turn, set()).add(answer.message_id)
        if answer.text != f"answer to question {answer.turn}":
            wrong.add(answer.turn)
    copies = sum(len(ids.get(t, ())) for t in turns)
    expected_rows = 1 + rounds * (1 + tools)
    last = max((a.at for a in log.answers), default=None)
    return LoadReport(
        conversations=len(turns),
        last_answer_seconds=None if last is None else last - started,
        answered=sum(1 for t in turns if len(ids.get(t, ())) == 1 and t not in wrong),
        lost=[t for t in turns if t not in ids],
        duplicated=[t for t in turns if len(ids.get(t, ())) > 1],
        wrong=[t for t in turns if t in wrong],
        bad_threads=[]
        if rows is None
        else [t for t in turns if t in ids and rows.get(t, 0) != expected_rows],
        redelivered_answers=len(log.answers) - copies,
        **figures,
    )


async def run_load(
    conversations: int,
    *,
    rounds: int = 3,
    tools: int = 2,
    timeout: float = 600,  # noqa: ASYNC109
    stall: float | None = None,
    colony: Mapping[str, Any] | None = None,
    tree: Path = LOOP_TREE,
) -> LoadReport:
    """Start every conversation at once, wait for quiet (at most ``timeout`` seconds, or until
    the journal stood still for ``stall``), and check every answer and row. ``colony`` holds
    ``colony.json`` overrides (``mailbox_default_capacity`` for the backpressure reproducer)."""
    model = ScriptedOpenAI([], responder=responder(rounds, tools), keep_requests=False)
    log = AnswerLog()
    with answer_tree(tree) as source:
        async with model:
            harness = ColonyHarness(
                source,
                capture=["/park"],
                cell_types={log.type.name: log.type},
                colony=colony,
                llm_base_url=model.url,
                log_level="warning",
            )
            async with harness as h:
                watch = JournalWatch(h.root / "colony.db")
                turns = [f"t{i}" for i in range(conversations)]
                started, wall = time.perf_counter(), time.time()
                sends = (h.send("/capture", question(t), context={"turn_id": t}) for t in turns)
                stopped = await until_quiet(h, sends, watch, timeout=timeout, stall=stall)
                seconds = time.perf_counter() - started
                rows = Counter(r["turn_id"] for r in h.rows("/store", "thread"))
                return tally(
                    turns,
                    log,
                    rows,
                    rounds=rounds,
                    tools=tools,
                    started=wall,
                    seconds=seconds,
                    decisions=h.colony.decisions,
                    model_calls=model.served,
                    dead_letters=await dead_letter_count(h),
                    dead_letter_kinds=await asyncio.to_thread(watch.dead_letter_kinds),
                    peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                    journal_peak=watch.peak,
                    stopped=stopped,
                    watchdog_reports=sum(r.get("event") in _WATCHDOG_EVENTS for r in h.records),
                )


async def until_quiet(
    harness: ColonyHarness,
    sends: Iterable[Any],
    watch: JournalWatch,
    *,
    timeout: float,  # noqa: ASYNC109
    stall: float | None,
) -> str | None:
    """Send everything at once and wait for quiet; None when it came, else why the wait
    stopped. Sends are inside the deadline: into a full mailbox they wait too."""

    async def work() -> None:
        await asyncio.gather(*sends)
        await harness.settle(timeout=timeout)

    task = asyncio.create_task(work())
    began = time.monotonic()
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=SAMPLE_SECONDS)
            await watch.sample()
            waited = time.monotonic() - began
            if not task.done() and waited > timeout:
                return f"timed out after {waited:.1f} s"
            if not task.done() and stall is not None and watch.still_for() > stall:
                return (
                    f"stalled after {waited:.1f} s: the journal has not moved for {stall:g} s "
                    f"and holds {watch.depth} rows"
                )
        task.result()
        return None
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await task


async def dead_letter_count(harness: ColonyHarness) -> int:
    """Dead letters so far (read even from a stalled colony, whose writer may hold rows)."""
    try:
        async with asyncio.timeout(10):
            return len(await harness.dead_letters())
    except TimeoutError:
        return JournalWatch(harness.root / "colony.db").dead_letters()
