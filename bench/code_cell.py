"""Per-message latency of the code cell through a real colony: fork from a warm worker vs spawn.

Each message goes ingress → root hive → code cell (a small JSON-echo script) → capture cell,
one at a time, so the figure is the latency a user's message sees. Both isolation modes run in
the same process; the ratios are the figures (the machine is shared and noisy).

The floor, measured in the same run: a fresh interpreter, as small as the zygote
(cells/code/zygote.py) and with the same modules imported, forks a child per job that reads the
message's JSON from a pipe, writes JSON back and exits, and reaps it. No fork-per-message cell
can do less per message.

    python bench/code_cell.py [--messages N] [--loop asyncio|uvloop|both]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _loops import add_loop_argument, per_loop
from _table import record
from _trees import chain, write_tree

from colony.testing import ColonyHarness

SCRIPT = """
import json, sys
doc = json.load(sys.stdin)
print(json.dumps({"header": {"route": "done"}, "messages": doc["body"]["messages"]}))
"""
FORK_TARGET = 2.0
"""The issue's target: a message through a fork-mode cell costs at most this many floors."""
SPAWN_TARGET = 5.0
"""Spawning per message must cost at least this many fork-mode messages (why the zygote)."""

# Run as ``python -c FORK_FLOOR RUNS``: prints the median and p90 of RUNS fork round trips, in ms.
FORK_FLOOR = r"""
import collections, datetime, json, math, os, re, resource, selectors, signal, socket, struct
import statistics, sys, time, traceback, types

MESSAGE = json.dumps(
    {"body": {"messages": [{"origin": "user", "type": "text", "text": "ping"}]}}
).encode()


def job():
    start = time.perf_counter()
    child_in, to_child = os.pipe()
    from_child, child_out = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(to_child)
        os.close(from_child)
        doc = json.loads(os.read(child_in, 65536))
        os.write(child_out, json.dumps({"messages": doc["body"]["messages"]}).encode())
        os._exit(0)
    os.close(child_in)
    os.close(child_out)
    os.write(to_child, MESSAGE)
    os.close(to_child)
    reply = b""
    while chunk := os.read(from_child, 65536):
        reply += chunk
    os.close(from_child)
    _, status = os.waitpid(pid, 0)
    assert status == 0 and json.loads(reply)["messages"], (status, reply)
    return (time.perf_counter() - start) * 1000


runs = int(sys.argv[1])
times = [job() for _ in range(runs + 10)][10:]  # ten warm-ups
print(json.dumps([statistics.median(times), statistics.quantiles(times, n=10)[-1]]))
"""


def build_tree(root: Path, isolation: str) -> Path:
    params = {"runner": "python3", "script_inline": SCRIPT, "isolation": isolation}
    return write_tree(root, chain("code", {"cell": {"type": "code"}, "params": params}))


async def latencies(tree: Path, messages: int) -> list[float]:
    body = {"messages": [{"origin": "user", "type": "text", "text": "ping"}]}
    out: list[float] = []
    async with ColonyHarness(tree, capture=["/sink"], log_level="info") as colony:
        for n in range(messages + 3):  # three warm-ups
            start = time.perf_counter()
            await colony.send("/", body)
            await colony.settle(timeout=60)
            if n >= 3:
                out.append((time.perf_counter() - start) * 1000)
        assert len(colony.captured("/sink")) == messages + 3
    return out


def fork_floor(runs: int = 200) -> tuple[float, float]:
    """(median, p90) ms of one fork round trip, in a fresh interpreter of the zygote's size."""
    done = subprocess.run(
        [sys.executable, "-c", FORK_FLOOR, str(runs)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    median, p90 = json.loads(done.stdout)
    return float(median), float(p90)


async def main(messages: int, loop: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        fork = await latencies(build_tree(Path(tmp) / "fork", "fork"), messages)
        floor, floor_p90 = fork_floor()
        spawn = await latencies(build_tree(Path(tmp) / "spawn", "spawn"), messages)
    f, s = statistics.median(fork), statistics.median(spawn)
    print(f"code cell, {messages} messages each, median end-to-end latency through a colony:")
    print(
        f"  fork from a warm worker: {f:7.2f} ms  (p90 {statistics.quantiles(fork, n=10)[-1]:.2f})"
    )
    print(
        f"  spawn per message:       {s:7.2f} ms  (p90 {statistics.quantiles(spawn, n=10)[-1]:.2f})"
    )
    print(f"  floor, one fork() round trip:  {floor:7.2f} ms  (p90 {floor_p90:.2f})")
    verdict = "met" if f / floor <= FORK_TARGET else "NOT met"
    print(f"ratio fork cell/floor: {f / floor:.1f}x  (target <= {FORK_TARGET:g}x -> {verdict})")
    verdict = "met" if s / f >= SPAWN_TARGET else "NOT met"
    print(f"ratio spawn/fork: {s / f:.1f}x  (target >= {SPAWN_TARGET:g}x -> {verdict})")
    record(
        "code_cell",
        "message through a fork-mode cell",
        f,
        "ms",
        loop=loop,
        floor=floor,
        floor_label="fork() + pipe round trip + reap, warm small process",
        target=f"≤ {FORK_TARGET:g}x",
        met=f / floor <= FORK_TARGET,
    )
    record(
        "code_cell",
        "message through a spawn-mode cell",
        s,
        "ms",
        loop=loop,
        floor=f,
        floor_label="the fork-mode cell",
        target=f"≥ {SPAWN_TARGET:g}x",
        met=s / f >= SPAWN_TARGET,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=40)
    add_loop_argument(parser)
    args = parser.parse_args()
    raise SystemExit(per_loop(args.loop, lambda loop: main(args.messages, loop)))
