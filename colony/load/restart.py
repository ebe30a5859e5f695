"""A load run that is killed halfway (``kill -9``) and started again: it must still finish.

The colony runs in a child process (``python -m colony.load.restart``), on a folder of its own;
the scripted model stays in this process, so both daemons talk to the same one. The first
daemon sends every conversation and is killed, with its whole process group, once the given
share of the run's model calls was made (conversations move in step, so their answers come in
a bunch at the end: the model calls are what marks the middle). The second boots the same
folder: the journal redelivers what was in flight, and the run goes on to quiet. The answers
are the lines the tree's ``/sink`` wrote (:class:`~colony.load.answers.AnswerLog`), across
both daemons; the second one reports the stored threads and the dead letters.

Both phases share one deadline and one stall rule (the journal standing still, with no new
answer, for ``stall`` seconds): a daemon cut short by either is killed and the result says so.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from colony.load.answers import AnswerLog, write_answer_tree
from colony.load.driver import SAMPLE_SECONDS, LoadReport, question, responder, tally
from colony.load.watch import JournalWatch, peak_rss_mb
from colony.testing import ColonyHarness
from scripted import ScriptedOpenAI

TREE, RUN, ANSWERS = "tree", "colony", "answers.jsonl"
"""In the run's folder: the tree booted, the harness's copy of it (colony.db inside), the
answers."""


class _Phase:
    """One daemon process: the JSON lines it prints, its peak memory, its stderr's tail."""

    def __init__(self, proc: asyncio.subprocess.Process, errors: Path) -> None:
        self.proc = proc
        self.errors = errors
        self.said: dict[str, Any] = {}
        self.peak_rss_mb = 0.0
        self.exited = asyncio.create_task(proc.wait())
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, argv: list[str], errors: Path) -> _Phase:
        with errors.open("wb") as err:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
                start_new_session=True,  # its own group: the kill takes its cell workers too
            )
        return cls(proc, errors)

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                doc = json.loads(line)
                if isinstance(doc, dict):
                    self.said.update(doc)

    def sample(self) -> None:
        self.peak_rss_mb = max(self.peak_rss_mb, peak_rss_mb(self.proc.pid) or 0.0)

    async def kill(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        await self.exited
        await self._reader

    async def ended(self) -> None:
        await self.exited
        await self._reader

    def stderr_tail(self, lines: int = 5) -> str:
        try:
            text = self.errors.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return " | ".join(text.strip().splitlines()[-lines:])


class _Answered:
    """The distinct conversations answered so far, read from the answers file as it grows."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self.turns: set[str] = set()
        self._offset = 0

    def poll(self) -> bool:
        """Read new lines; True when a conversation got its first answer."""
        try:
            with self.file.open("rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return False
        whole = chunk[: chunk.rfind(b"\n") + 1]  # a torn last line is read next time
        self._offset += len(whole)
        before = len(self.turns)
        for line in whole.splitlines():
            with contextlib.suppress(ValueError, KeyError, TypeError):
                self.turns.add(str(json.loads(line)["turn"]))
        return len(self.turns) > before


KILLED = "killed"


async def _follow(
    phase: _Phase,
    watch: JournalWatch,
    answered: _Answered,
    *,
    deadline: float,
    stall: float | None,
    kill_when: Callable[[], bool] | None = None,
) -> str | None:
    """Watch ``phase`` until it ends by itself (None), is killed as planned (``KILLED``), or
    is cut short (why)."""
    while not phase.exited.done():
        await asyncio.wait({phase.exited}, timeout=SAMPLE_SECONDS)
        await watch.sample()
        if answered.poll():
            watch.moved()
        phase.sample()
        if phase.exited.done():
            break
        if kill_when is not None and kill_when():
            await phase.kill()
            return KILLED
        if time.monotonic() > deadline:
            await phase.kill()
            return "timed out"
        if stall is not None and watch.still_for() > stall:
            await phase.kill()
            return (
                f"stalled: the journal has not moved (nor any answer come) for {stall:g} s "
                f"and holds {watch.depth} rows"
            )
    await phase.ended()
    return None


async def run_load_with_restart(
    conversations: int,
    *,
    rounds: int = 3,
    tools: int = 2,
    kill_after: float = 0.5,
    timeout: float = 600,  # noqa: ASYNC109
    stall: float | None = None,
    loop: str = "asyncio",
    colony: Mapping[str, Any] | None = None,
    tree: Path | None = None,
) -> LoadReport:
    """Run ``conversations`` at once in a daemon process, kill it once ``kill_after`` of the
    run's model calls were made, start it again on the same folder, and check the whole run."""
    from colony.load.driver import LOOP_TREE

    model = ScriptedOpenAI([], responder=responder(rounds, tools), keep_requests=False)
    with tempfile.TemporaryDirectory(prefix="colony-load-restart-") as tmp:
        work = Path(tmp)
        write_answer_tree(tree or LOOP_TREE, work / TREE)
        async with model:
            base = [sys.executable, "-m", "colony.load.restart", "--workdir", str(work)]
            base += ["--conversations", str(conversations), "--model-url", model.url]
            base += ["--loop", loop, "--colony", json.dumps(dict(colony or {}))]
            watch = JournalWatch(work / RUN / "colony.db")
            answered = _Answered(work / ANSWERS)
            began = time.monotonic()
            deadline = began + timeout
            notes: list[str] = []

            first = await _Phase.start([*base, "--send"], work / "first.err")
            wanted = max(1, int(conversations * (rounds + 1) * kill_after))

            def halfway() -> bool:  # by model calls: conversations run in step, answers bunch
                return "sent" in first.said and model.served >= wanted

            outcome = await _follow(
                first, watch, answered, deadline=deadline, stall=stall, kill_when=halfway
            )
            started = float(first.said.get("started", time.time()))
            stopped: str | None = None
            report: dict[str, Any] = {}
            second: _Phase | None = None
            if outcome == KILLED:
                notes.append(
                    f"  killed (-9) the daemon {time.time() - started:.1f} s in, after "
                    f"{model.served} model calls, {len(answered.turns)}/{conversations} answered"
                )
            elif outcome is not None:
                stopped = f"before the kill: {outcome}"
            elif first.proc.returncode != 0 or "report" not in first.said:
                stopped = (
                    f"the first daemon exited with code {first.proc.returncode} before the "
                    f"kill: {first.stderr_tail()}"
                )
            else:
                notes.append("  the run finished before the kill; restarted all the same")
            if stopped is None:
                second = await _Phase.start(base, work / "second.err")
                outcome = await _follow(second, watch, answered, deadline=deadline, stall=stall)
                if outcome is not None:
                    stopped = f"after the restart: {outcome}"
                elif second.proc.returncode != 0 or "report" not in second.said:
                    stopped = (
                        f"the restarted daemon exited with code {second.proc.returncode}: "
                        f"{second.stderr_tail()}"
                    )
                else:
                    report = second.said["report"]
            if stopped is not None:
                stopped = f"{stopped} ({time.monotonic() - began:.1f} s in)"
            log = AnswerLog.read(work / ANSWERS)
            rss = [p.peak_rss_mb for p in (first, second) if p is not None]
            rss += [float(report.get("peak_rss_mb", 0.0))]
            return tally(
                [f"t{i}" for i in range(conversations)],
                log,
                report.get("rows") if report else None,
                rounds=rounds,
                tools=tools,
                started=started,
                seconds=time.time() - started,
                decisions=int(report.get("decisions", 0)),
                model_calls=model.served,
                dead_letters=int(report.get("dead_letters", 0)),
                dead_letter_kinds=await asyncio.to_thread(watch.dead_letter_kinds),
                peak_rss_mb=max(rss),
                journal_peak=watch.peak,
                stopped=stopped,
                redelivered=int(report["redelivered"]) if report else None,
                notes=notes,
            )


# -- the daemon side ----------------------------------------------------------------------------


def _say(**doc: Any) -> None:
    print(json.dumps(doc), flush=True)


async def daemon(
    work: Path, conversations: int, model_url: str, colony: Mapping[str, Any], send: bool
) -> None:
    """Boot the colony on ``work`` (a restart when it ran there before), send every
    conversation when asked, run to quiet and report the stored threads and dead letters."""
    import resource

    log = AnswerLog(work / ANSWERS)
    harness = ColonyHarness(
        work / TREE,
        workdir=work,
        capture=["/park"],
        cell_types={log.type.name: log.type},
        colony=colony,
        llm_base_url=model_url,
        log_level="warning",
    )
    async with harness as h:
        redelivered = h.colony.redelivered
        if send:
            _say(started=time.time())
            turns = [f"t{i}" for i in range(conversations)]
            await asyncio.gather(
                *(h.send("/capture", question(t), context={"turn_id": t}) for t in turns)
            )
            _say(sent=True)
        await h.settle(timeout=float("inf"))  # the parent kills a daemon that stands still
        rows = Counter(r["turn_id"] for r in h.rows("/store", "thread"))
        report = {
            "rows": rows,
            "dead_letters": len(await h.dead_letters()),
            "decisions": h.colony.decisions,
            "redelivered": redelivered,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }
    _say(report=report)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="One daemon of a kill -9 load run.")
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--conversations", type=int, required=True)
    parser.add_argument("--model-url", required=True)
    parser.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio")
    parser.add_argument("--colony", default="{}", help="colony.json overrides, as JSON")
    parser.add_argument("--send", action="store_true", help="send every conversation")
    args = parser.parse_args(argv)
    factory = None
    if args.loop == "uvloop":
        factory = importlib.import_module("uvloop").new_event_loop
    run = daemon(
        args.workdir, args.conversations, args.model_url, json.loads(args.colony), args.send
    )
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(run)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
