"""Where a research-bot turn spends its time: the shipped tree, end to end, under cProfile.

Boots ``topologies/telegram-research`` in this process against the scripted Telegram, model and
search servers (as ``meclaw demo`` does), runs turns of six rounds of two parallel searches,
and prints (a) the wall time per turn, (b) how that time splits between the daemon's own CPU,
the cell processes (code-cell jobs forked from the warm worker) and waiting, and (c) the
daemon's top functions by own time. The scripted servers run in the same event loop, so their
cost shows up too; it is listed apart.

    python bench/profile_research.py [--turns N] [--top K]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from colony.demo import offline_tree
from colony.testing import (
    ColonyHarness,
    ScriptedOpenAI,
    ScriptedTelegram,
    text_reply,
    tool_calls_reply,
)
from scripted.search import ScriptedSearch

CHAT = 777
ROUNDS = 6


def responder(body: Any) -> Any:
    done = sum(1 for m in body["messages"] if m.get("role") == "assistant" and m.get("tool_calls"))
    if done < ROUNDS:
        return tool_calls_reply(
            [
                (f"r{done}a", "web_search", {"query": f"otters {done}"}),
                (f"r{done}b", "web_search", {"query": f"kelp {done}"}),
            ]
        )
    return text_reply("done")


def _children_cpu() -> float:
    """CPU seconds of every child process, alive or reaped, and of their reaped children: the
    warm code-cell worker is never reaped while the colony runs, so ``RUSAGE_CHILDREN`` alone
    would miss every job it forked."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = usage.ru_utime + usage.ru_stime
    tick = os.sysconf("SC_CLK_TCK")
    me = os.getpid()
    try:
        tasks = os.listdir(f"/proc/{me}/task")
    except OSError:
        return total
    for task in tasks:
        try:
            with open(f"/proc/{me}/task/{task}/children") as handle:
                children = handle.read().split()
        except OSError:
            continue
        for child in children:
            try:
                with open(f"/proc/{child}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            # utime, stime, cutime, cstime: fields 14-17 of stat(5), 12-15 after the name
            total += sum(int(f) for f in fields[11:15]) / tick
    return total


async def run(turns: int, profile: cProfile.Profile) -> dict[str, Any]:
    async with (
        ScriptedSearch() as search,
        ScriptedTelegram(known_chats=(CHAT,)) as telegram,
        ScriptedOpenAI([], responder=responder, keep_requests=False) as model,
    ):
        env = {
            "TELEGRAM_BOT_TOKEN": telegram.token,
            "TELEGRAM_BASE_URL": telegram.url,
            "LLM_BASE_URL": model.url,
            "LLM_API_KEY": "offline",
            "LLM_MODEL": "scripted",
            "SEARCH_ENDPOINT": search.search_url,
        }
        with tempfile.TemporaryDirectory() as scratch:
            tree = offline_tree(Path(scratch))
            async with ColonyHarness(
                tree, env=env, log_level="warning", workdir=Path(scratch)
            ) as h:
                walls: list[float] = []
                cpu0, child0, decisions0 = time.process_time(), _children_cpu(), 0
                for n in range(turns + 1):  # the first turn warms up, untimed
                    if n == 1:
                        cpu0, child0 = time.process_time(), _children_cpu()
                        decisions0 = h.colony.decisions
                        profile.enable()
                    start = time.perf_counter()
                    telegram.push_text(CHAT, f"question {n}")
                    await telegram.wait_sent(n + 1, timeout=120)
                    await h.settle(timeout=120)
                    if n >= 1:
                        walls.append(time.perf_counter() - start)
                profile.disable()
                return {
                    "walls": walls,
                    "cpu": time.process_time() - cpu0,
                    "children": _children_cpu() - child0,
                    "decisions": h.colony.decisions - decisions0,
                    "dead": len(await h.dead_letters()),
                }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    profile = cProfile.Profile()
    out = asyncio.run(run(args.turns, profile))
    turns = args.turns
    wall = statistics.median(out["walls"]) * 1000
    total = sum(out["walls"])
    print(f"research bot, {turns} turns of {ROUNDS} rounds x 2 searches, pid {os.getpid()}")
    print(f"  wall per turn (median)     : {wall:8.1f} ms")
    print(f"  routing decisions per turn : {out['decisions'] / turns:8.0f}")
    print(f"  daemon CPU per turn        : {out['cpu'] / turns * 1000:8.1f} ms (incl. servers)")
    print(f"  cell processes CPU per turn: {out['children'] / turns * 1000:8.1f} ms")
    idle = max(0.0, total - out["cpu"] - out["children"]) / turns * 1000
    print(f"  neither (waiting, I/O)     : {idle:8.1f} ms")
    print(f"  dead letters               : {out['dead']}")
    print(f"\ntop {args.top} functions of the daemon process by own time (profiled turns):")
    stats = pstats.Stats(profile)
    stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
