"""Per-message cost of the code cell: forked from a warm worker, run by a warm pool worker, spawned.

Through a real colony: each message goes ingress → root hive → code cell (a small JSON-echo
script) → capture cell, one at a time, so the figure is the latency a user's message sees.

At the cell, without a colony: the same script run by the zygote (``fork``) and by a pool
worker (``pool``), message after message, in interleaved rounds: the median wall time of one
message and the CPU it costs, in the daemon (this process) and in the cell's processes (the
zygote with every child it reaped, and the pool's worker).

Every mode runs in the same process; the ratios are the figures (the machine is shared and
noisy). Two floors, measured in the same run:

* fork: a fresh interpreter, as small as the zygote (cells/code/zygote.py) and with the same
  modules imported, forks a child per job that reads the message's JSON from a pipe, writes
  JSON back and exits, and reaps it. No fork-per-message cell can do less per message.
* pool: a fresh interpreter writes the message's JSON as one length-prefixed frame to a pipe
  of a warm Python process, which parses it and answers with one frame (blocking reads on both
  sides, no event loop). No cell that hands a message to a warm process can do less.

    python bench/code_cell.py [--messages N] [--jobs N] [--loop asyncio|uvloop|both]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from _loops import add_loop_argument, per_loop
from _table import record
from _trees import chain, write_tree

from cells.code.cell import default_interpreter
from cells.code.isolation import job_environment
from cells.code.pool import PoolSettings, WorkerPool
from cells.code.process import Limits, RunResult
from cells.code.zygote_client import Zygote
from colony.testing import ColonyHarness

SCRIPT = """
import json, sys
doc = json.load(sys.stdin)
print(json.dumps({"header": {"route": "done"}, "messages": doc["body"]["messages"]}))
"""
STDIN = json.dumps(
    {"body": {"messages": [{"origin": "user", "type": "text", "text": "ping"}]}}
).encode()
FORK_TARGET = 2.0
"""The issue's target: a message through a fork-mode cell costs at most this many floors."""
SPAWN_TARGET = 5.0
"""Spawning per message must cost at least this many fork-mode messages (why the zygote)."""
POOL_TARGET = 3.0
"""A message on a pool worker (at the cell, no colony) costs at most this many pool floors."""

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

# The warm process of the pool floor: one frame in, one frame out, until end of file.
POOL_FLOOR_WORKER = r"""
import json, os, struct


def exactly(n):
    data = b""
    while len(data) < n:
        chunk = os.read(0, n - len(data))
        if not chunk:
            raise SystemExit(0)
        data += chunk
    return data


while True:
    (n,) = struct.unpack(">I", exactly(4))
    doc = json.loads(exactly(n))
    out = json.dumps({"messages": doc["body"]["messages"]}).encode()
    os.write(1, struct.pack(">I", len(out)) + out)
"""

# Run as ``python -c POOL_FLOOR RUNS WORKER``: prints the median and p90 of RUNS round trips, ms.
POOL_FLOOR = r"""
import json, os, statistics, struct, subprocess, sys, time

MESSAGE = json.dumps(
    {"body": {"messages": [{"origin": "user", "type": "text", "text": "ping"}]}}
).encode()
child = subprocess.Popen(
    [sys.executable, "-c", sys.argv[2]], stdin=subprocess.PIPE, stdout=subprocess.PIPE
)
to_child, from_child = child.stdin.fileno(), child.stdout.fileno()


def exactly(n):
    data = b""
    while len(data) < n:
        data += os.read(from_child, n - len(data))
    return data


def job():
    start = time.perf_counter()
    os.write(to_child, struct.pack(">I", len(MESSAGE)) + MESSAGE)
    (n,) = struct.unpack(">I", exactly(4))
    assert json.loads(exactly(n))["messages"]
    return (time.perf_counter() - start) * 1000


runs = int(sys.argv[1])
times = [job() for _ in range(runs + 50)][50:]  # fifty warm-ups
child.stdin.close()
child.wait()
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


def _floor(argv: list[str]) -> tuple[float, float]:
    done = subprocess.run(
        [sys.executable, "-c", *argv], capture_output=True, text=True, timeout=120, check=True
    )
    median, p90 = json.loads(done.stdout)
    return float(median), float(p90)


def fork_floor(runs: int = 200) -> tuple[float, float]:
    """(median, p90) ms of one fork round trip, in a fresh interpreter of the zygote's size."""
    return _floor([FORK_FLOOR, str(runs)])


def pool_floor(runs: int = 2000) -> tuple[float, float]:
    """(median, p90) ms of one job's round trip over a pipe to a warm process."""
    return _floor([POOL_FLOOR, str(runs), POOL_FLOOR_WORKER])


_TICK = os.sysconf("SC_CLK_TCK")


def _process_cpu(pid: int, *, reaped: bool) -> float:
    """CPU seconds of ``pid`` (plus the children it has reaped, if ``reaped``); 0 if gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    if reaped:
        ticks += int(fields[13]) + int(fields[14])  # cutime, cstime
    return ticks / _TICK


@dataclass
class Cost:
    """One mode at the cell: the wall time of each message (ms), and CPU seconds in all."""

    walls: list[float] = field(default_factory=list)
    daemon_cpu: float = 0.0
    cells_cpu: float = 0.0

    @property
    def wall_us(self) -> float:
        return statistics.median(self.walls) * 1000

    def per_message_us(self, seconds: float) -> float:
        return seconds / len(self.walls) * 1e6

    @property
    def cpu_us(self) -> float:
        """Daemon + cell processes, µs per message."""
        return self.per_message_us(self.daemon_cpu + self.cells_cpu)


async def cell_costs(jobs: int, rounds: int = 3) -> tuple[Cost, Cost]:
    """(fork, pool): the echo script run at the cell by the zygote and by a pool worker."""
    zygote = Zygote(default_interpreter())
    await zygote.start()
    limits = Limits(cpu_seconds=60, address_space_mb=2048, max_processes=512)
    env = job_environment()
    fork, pooled = Cost(), Cost()
    with tempfile.TemporaryDirectory() as cwd:
        settings = PoolSettings(
            script=SCRIPT,
            path=None,
            cwd=cwd,
            env=env,
            limits=limits,
            max_output_bytes=4 << 20,
            max_jobs=1_000_000,
            max_rss_mb=512,
            size=1,
        )
        pool = WorkerPool(zygote, settings)

        async def fork_one() -> RunResult:
            return await zygote.run(
                script=SCRIPT, stdin=STDIN, timeout=60, limits=limits, cwd=cwd, env=env
            )

        async def pool_one() -> RunResult:
            return await pool.run(STDIN, timeout=60)

        def cells_cpu() -> float:
            pid = zygote.pid
            assert pid is not None
            workers = sum(_process_cpu(worker, reaped=False) for worker in pool.pids)
            return _process_cpu(pid, reaped=True) + workers

        async def measure(one: Callable[[], Awaitable[RunResult]], n: int, cost: Cost) -> None:
            cpu, cells = time.process_time(), cells_cpu()
            for _ in range(n):
                start = time.perf_counter()
                result = await one()
                cost.walls.append((time.perf_counter() - start) * 1000)
                assert result.exit_code == 0, result
                assert result.stdout, result
            cost.daemon_cpu += time.process_time() - cpu
            cost.cells_cpu += cells_cpu() - cells

        await pool_one()  # the worker starts (and compiles the script) outside the figures
        for _ in range(3):
            await fork_one()
        for _ in range(rounds):
            await measure(fork_one, max(jobs // 10, 20), fork)
            await measure(pool_one, jobs, pooled)
        await pool.close()
    await zygote.close()
    return fork, pooled


def _p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1]


async def main(messages: int, jobs: int, loop: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        fork = await latencies(build_tree(Path(tmp) / "fork", "fork"), messages)
        pooled = await latencies(build_tree(Path(tmp) / "pool", "pool"), messages)
        floor, floor_p90 = fork_floor()
        pfloor, pfloor_p90 = pool_floor()
        at_fork, at_pool = await cell_costs(jobs)
        spawn = await latencies(build_tree(Path(tmp) / "spawn", "spawn"), messages)
    f, p, s = statistics.median(fork), statistics.median(pooled), statistics.median(spawn)
    print(f"code cell, {messages} messages each, median end-to-end latency through a colony:")
    print(f"  fork from a warm worker: {f:7.2f} ms  (p90 {_p90(fork):.2f})")
    print(f"  pool, a warm worker:     {p:7.2f} ms  (p90 {_p90(pooled):.2f})")
    print(f"  spawn per message:       {s:7.2f} ms  (p90 {_p90(spawn):.2f})")
    print(f"  floor, one fork() round trip:  {floor:7.2f} ms  (p90 {floor_p90:.2f})")
    print("at the cell (no colony), per message: median wall; CPU in the daemon + cell processes:")
    for name, cost in (("fork", at_fork), ("pool", at_pool)):
        print(
            f"  {name}: {cost.wall_us:6.0f} µs wall, {cost.cpu_us:6.0f} µs CPU "
            f"({cost.per_message_us(cost.daemon_cpu):.0f} daemon + "
            f"{cost.per_message_us(cost.cells_cpu):.0f} cell processes; "
            f"{len(cost.walls)} messages)"
        )
    print(
        f"  floor, one job over a pipe to a warm process: {pfloor * 1000:6.0f} µs  "
        f"(p90 {pfloor_p90 * 1000:.0f})"
    )
    verdict = "met" if f / floor <= FORK_TARGET else "NOT met"
    print(f"ratio fork cell/floor: {f / floor:.1f}x  (target <= {FORK_TARGET:g}x -> {verdict})")
    pool_ratio = at_pool.wall_us / (pfloor * 1000)
    verdict = "met" if pool_ratio <= POOL_TARGET else "NOT met"
    print(
        f"ratio pool at the cell/pool floor: {pool_ratio:.1f}x  "
        f"(target <= {POOL_TARGET:g}x -> {verdict})"
    )
    wall_gain, cpu_gain = at_fork.wall_us / at_pool.wall_us, at_fork.cpu_us / at_pool.cpu_us
    print(
        f"ratio fork/pool: {f / p:.1f}x through a colony; at the cell {wall_gain:.1f}x wall, "
        f"{cpu_gain:.1f}x CPU"
    )
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
        "message on a pool worker, at the cell",
        at_pool.wall_us,
        "µs",
        loop=loop,
        floor=pfloor * 1000,
        floor_label="one job's frame over a pipe to a warm process and back",
        target=f"≤ {POOL_TARGET:g}x",
        met=pool_ratio <= POOL_TARGET,
    )
    record(
        "code_cell",
        "message through a pool-mode cell",
        p,
        "ms",
        loop=loop,
        floor=f,
        floor_label="the fork-mode cell",
        note=f"at the cell, fork/pool: {wall_gain:.1f}x wall, {cpu_gain:.1f}x CPU "
        "(daemon + cell processes)",
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
    parser.add_argument(
        "--jobs", type=int, default=1000, help="pool messages per round at the cell (fork: 1/10)"
    )
    add_loop_argument(parser)
    args = parser.parse_args()
    raise SystemExit(per_loop(args.loop, lambda loop: main(args.messages, args.jobs, loop)))
