"""Per-message latency of the code cell through a real colony: fork from a warm worker vs spawn.

Each message goes ingress → root hive → code cell (a small JSON-echo script) → capture cell,
one at a time, so the figure is the latency a user's message sees. Both isolation modes run in
the same process; the ratio is the figure (the machine is shared and noisy).

    python bench/code_cell.py [--messages N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from _trees import chain, write_tree

from colony.testing import ColonyHarness

SCRIPT = """
import json, sys
doc = json.load(sys.stdin)
print(json.dumps({"header": {"route": "done"}, "messages": doc["body"]["messages"]}))
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


async def main(messages: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        fork = await latencies(build_tree(Path(tmp) / "fork", "fork"), messages)
        spawn = await latencies(build_tree(Path(tmp) / "spawn", "spawn"), messages)
    f, s = statistics.median(fork), statistics.median(spawn)
    print(f"code cell, {messages} messages each, median end-to-end latency through a colony:")
    print(
        f"  fork from a warm worker: {f:7.2f} ms  (p90 {statistics.quantiles(fork, n=10)[-1]:.2f})"
    )
    print(
        f"  spawn per message:       {s:7.2f} ms  (p90 {statistics.quantiles(spawn, n=10)[-1]:.2f})"
    )
    print(f"ratio spawn/fork: {s / f:.1f}x  (target >= 5x -> {'met' if s / f >= 5 else 'NOT met'})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=40)
    asyncio.run(main(parser.parse_args().messages))
