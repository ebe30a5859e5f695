"""``kill -9`` in the middle of a turn, then a restart: the turn finishes, once.

Each run boots the shipped research bot as a real daemon process (``meclaw --root``) against
scripted Telegram, model and search servers on 127.0.0.1, asks one question whose turn takes
six rounds of two parallel searches, and kills the daemon (SIGKILL, its whole process group)
at one point of the turn:

* on the arrival of the k-th model request (mid provider call);
* at a named crash point inside the daemon (``colony.crashpoints``): inside a store write
  (run in the colony.db transaction that will carry its reply) before its COMMIT, inside a
  journal transaction before its COMMIT, after a provider answered
  and before the llm cell returned, after Telegram accepted the answer and before the proxy's
  hand-off was committed;
* after a random delay.

The daemon is then started again on the same folder, without any crash point, and must finish
the turn: exactly one answer in the chat, every thread row of every round exactly once, every
round fired exactly once, nothing dead-lettered, and a log line naming what was redelivered.

``MECLAW_CRASH_RUNS`` sets how many runs (default 20; ``make soak`` runs 100).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import sqlite3
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from colony.crashpoints import ENV as CRASH_ENV
from colony.demo import offline_tree
from colony.testing import ScriptedOpenAI, ScriptedTelegram, text_reply, tool_calls_reply
from scripted.search import ScriptedSearch

MECLAW = str(Path(sys.executable).with_name("meclaw"))
CHAT = 5151
QUESTION = "What do sea otters eat, and where do they sleep?"
ROUNDS = 6
ANSWER = "Sea otters eat urchins and crabs, and sleep wrapped in kelp."
RUNS = int(os.environ.get("MECLAW_CRASH_RUNS", "20"))
STORE_WRITES = 2 + 4 * ROUNDS
"""Store writes in one turn: the user row, per round an assistant row, two tool rows and the
guarded update, the answer row (a crash point past the last never fires)."""


@dataclass(frozen=True)
class Kill:
    """Where a run kills the daemon."""

    kind: str
    """``request`` (k-th model request), ``point`` (a crash point) or ``delay`` (seconds)."""
    value: Any

    def __str__(self) -> str:
        return f"{self.kind}={self.value}"


def plan(runs: int) -> list[Kill]:
    """Different points for each run, the same points every time (seeded)."""
    rng = random.Random(20261129)
    kills: list[Kill] = []
    for i in range(runs):
        kind = i % 6
        if kind == 0:  # every model request in turn, 2..7
            kills.append(Kill("request", 2 + (i // 6) % ROUNDS))
        elif kind == 1:
            kills.append(Kill("point", f"store.write:{rng.randint(1, STORE_WRITES)}"))
        elif kind == 2:
            # A turn commits 50-70 transactions (units that run ahead share them).
            kills.append(Kill("point", f"journal.commit:{rng.randint(2, 45)}"))
        elif kind == 3:
            kills.append(Kill("point", f"llm.replied:{rng.randint(1, ROUNDS + 1)}"))
        elif kind == 4:
            kills.append(Kill("delay", round(rng.uniform(0.9, 1.5), 2)))
        else:  # the answer reached Telegram, the proxy's hand-off is not committed yet
            kills.append(Kill("point", "proxy.sent:1"))
    return kills


def responder(kill_on: int | None, victim: list[int]) -> Any:
    """The planner: two searches per round for six rounds, then the answer; decided from the
    request alone, so a request repeated after a crash gets the same reply."""
    seen = [0]

    def respond(body: Any) -> Any:
        seen[0] += 1
        if kill_on is not None and seen[0] == kill_on and victim:
            os.killpg(victim[0], signal.SIGKILL)  # the daemon dies while we answer
        done = sum(
            1 for m in body["messages"] if m.get("role") == "assistant" and m.get("tool_calls")
        )
        if done < ROUNDS:
            return tool_calls_reply(
                [
                    (f"r{done}a", "web_search", {"query": f"sea otter diet {done}"}),
                    (f"r{done}b", "web_search", {"query": f"sea otter sleep {done}"}),
                ]
            )
        return text_reply(ANSWER)

    return respond


async def start(tree: Path, env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        MECLAW,
        "--root",
        str(tree),
        "--daemon",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, **env},
        start_new_session=True,  # its own process group: a kill takes the cell workers too
    )


def kill_group(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def read(db: Path, sql: str) -> list[tuple[Any, ...]]:
    """Rows of a daemon's database, read-only; none while the file or table does not exist."""
    if not db.exists():
        return []
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    except sqlite3.OperationalError:
        return []
    try:
        return conn.execute(sql).fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


def thread_rows(tree: Path) -> list[tuple[Any, ...]]:
    """The store's thread table: in colony.db, named by the store's path."""
    return read(tree / "colony.db", 'SELECT turn_id, iter, role, turn FROM "/memory:thread"')


def log_events(tree: Path) -> list[dict[str, Any]]:
    file = tree / "log.jsonl"
    if not file.exists():
        return []
    return [json.loads(line) for line in file.read_text().splitlines() if line.strip()]


async def wait_until(check: Any, timeout: float, what: str) -> None:  # noqa: ASYNC109
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def turn_done(tree: Path) -> bool:
    roles = [r[2] for r in thread_rows(tree)]
    journal = read(tree / "colony.db", "SELECT count(*) FROM journal")
    return "answer" in roles and bool(journal) and journal[0][0] == 0


async def crash_and_resume(tmp: Path, kill: Kill) -> dict[str, Any]:
    victim: list[int] = []
    kill_on = kill.value if kill.kind == "request" else None
    async with (
        ScriptedSearch() as search,
        ScriptedTelegram(known_chats=(CHAT,)) as telegram,
        ScriptedOpenAI([], responder=responder(kill_on, victim)) as model,
    ):
        tree = offline_tree(tmp)
        (tree / ".env").write_text(
            f"TELEGRAM_BOT_TOKEN={telegram.token}\nTELEGRAM_BASE_URL={telegram.url}\n"
            f"LLM_BASE_URL={model.url}\nLLM_API_KEY=offline\nLLM_MODEL=scripted\n"
            f"SEARCH_ENDPOINT={search.search_url}\n"
        )
        env = {CRASH_ENV: kill.value} if kill.kind == "point" else {}
        first = await start(tree, env)
        victim.append(first.pid)
        try:
            telegram.push_text(CHAT, QUESTION)
            if kill.kind == "delay":
                await asyncio.sleep(kill.value)
                kill_group(first)
            try:
                code = await asyncio.wait_for(first.wait(), timeout=60)
            except TimeoutError:
                raise AssertionError(f"the daemon never reached its crash point ({kill})") from None
        finally:
            kill_group(first)
        assert code == -signal.SIGKILL, f"the daemon was not killed ({kill}): exit {code}"
        journal_at_crash = read(tree / "colony.db", "SELECT count(*) FROM journal")
        in_flight = journal_at_crash[0][0] if journal_at_crash else 0
        sent_before = len(telegram.sent)
        requests_before = len(model.requests)

        def boots() -> int:
            return sum(e.get("event") == "colony_started" for e in log_events(tree))

        booted = boots()
        second = await start(tree, {})
        try:
            await wait_until(
                lambda: boots() > booted,
                60,
                "the second boot",
            )
            await wait_until(lambda: turn_done(tree), 90, f"the turn to finish after {kill}")
            await asyncio.sleep(0.3)  # room for a duplicate to show up
            second.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(second.wait(), timeout=30) == 0
        finally:
            kill_group(second)

        return {
            "tree": tree,
            "sent": list(telegram.sent),
            "sent_before": sent_before,
            "in_flight": in_flight,
            "requests": len(model.requests),
            "requests_before": requests_before,
        }


def check_turn(tree: Path) -> None:
    rows = thread_rows(tree)
    assert len({r[0] for r in rows}) == 1, "one question must make one turn"
    roles = Counter((r[1], r[2]) for r in rows)
    expected = Counter({(0, "user"): 1, (ROUNDS, "answer"): 1})
    for i in range(ROUNDS):
        expected[(i, "assistant")] = 1
        expected[(i, "tool")] = 2
    assert roles == expected, f"thread rows: {sorted(roles.items())}"
    tool_ids = Counter(json.loads(r[3])["id"] for r in rows if r[2] == "tool")
    assert all(n == 1 for n in tool_ids.values())
    assert len(tool_ids) == 2 * ROUNDS
    db = tree / "colony.db"
    fires = read(
        db,
        "SELECT headers FROM message_log WHERE from_path = '/collector' AND to_path = '/planner'",
    )
    iters = Counter(json.loads(h)["context"]["iter"] for (h,) in fires)
    assert iters == Counter({str(i): 1 for i in range(1, ROUNDS + 1)}), f"fires: {iters}"
    assert read(db, "SELECT error_code, detail FROM dead_letters") == []


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kill", plan(RUNS), ids=str)
async def test_a_turn_killed_anywhere_finishes_after_a_restart_with_one_answer(
    tmp_path: Path, kill: Kill
) -> None:
    run = await crash_and_resume(tmp_path, kill)
    tree: Path = run["tree"]
    print(  # a line per run for docs/reliability.md (pytest -s shows it)
        f"crash run {kill}: journal held {run['in_flight']} at the kill; model requests "
        f"{run['requests_before']} before, {run['requests']} in all; answers sent before the "
        f"kill {run['sent_before']}"
    )
    assert [m["text"] for m in run["sent"]] == [ANSWER], "exactly one answer in the chat"
    check_turn(tree)
    second_boot = [e for e in log_events(tree) if e.get("event") == "journal_redelivered"]
    if run["in_flight"]:
        assert len(second_boot) == 1
        line = second_boot[0]
        assert line["messages"] + line["dead_lettered"] == run["in_flight"]
        assert sum(line["cells"].values()) == line["messages"]
        assert line["sample"]
        assert all({"id", "cell", "trace_id"} <= s.keys() for s in line["sample"])
    else:
        assert second_boot == []
