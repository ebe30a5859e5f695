"""Routing latency while the pruner deletes 100,000 old message-log rows, against the latency
with the same rows in place and no pruning, in the same colony and the same run.

The colony: a root hive routing each message to a capture cell (two routing decisions, two
message-log rows; at-least-once delivery, the default, so each ingress waits for its unit's
commit). Messages are sent one after another; a message's latency is from the send to its
delivery at the capture cell. Each repeat inserts ``--rows`` message-log rows 30 days old
(a batch of SQL on the writer's own connection), times ``--baseline`` messages with them in
place, then runs one pruning round (:func:`colony.retention.prune_round`, through the writer,
as the daemon's pruner does) while messages keep being sent, and times those. The issue's
target: the median latency during pruning within 1.5x of the baseline's.

    python bench/prune.py [--rows N] [--baseline M] [--repeats R] [--loop asyncio|uvloop|both]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _loops import add_loop_argument, per_loop
from _table import record
from _trees import write_tree

from colony import retention
from colony.config.models import RetentionConfig
from colony.ids import now_ms
from colony.persist import prune
from colony.persist.prune import DAY_MS
from colony.testing import ColonyHarness

TARGET = 1.5
"""The issue's target: routing latency during pruning at most this many times the baseline."""
BODY = {"messages": [{"origin": "user", "type": "text", "text": "ping"}]}
OLD_ROWS = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
INSERT INTO message_log_indexed(seq, id, trace_id, ttl, from_path, to_path, headers,
    body_kind, body_payload, created_at, at_ms)
SELECT ? + i, 'old-' || (? + i), 'trace-' || ((? + i) / 2), 5, '/', '/sink',
    '{"context":{},"hop":{}}', 'inline', ?, ? / 1000, ? FROM n
"""
"""``rows`` rows numbered below every row routing writes (negative ``seq``: the writer numbers
its rows after the highest)."""


def build_tree(root: Path) -> Path:
    edges = [{"from": ".", "to": "/sink"}]
    return write_tree(
        root,
        {"main/config.json": {"cell": {"type": "hive"}, "params": {"graph": {"edges": edges}}}},
    )


async def insert_old(colony: ColonyHarness, rows: int, start: int) -> None:
    at = now_ms() - 30 * DAY_MS
    body = json.dumps(BODY)

    def insert(conn: Any) -> None:
        conn.execute(OLD_ROWS, (rows, start, start, start, body, at, at))

    await colony.colony.db.execute(insert)
    await colony.colony.db.flush()


async def one(colony: ColonyHarness, delivered: int) -> float:
    """Send one message and wait for its delivery; seconds."""
    start = time.perf_counter()
    await colony.send("/", BODY)
    while len(colony.captured("/sink")) <= delivered:  # noqa: ASYNC110 (no event to await)
        await asyncio.sleep(0)
    return time.perf_counter() - start


async def repeat(
    colony: ColonyHarness, rows: int, baseline: int, start: int, batch: int
) -> tuple[list[float], list[float], int, float, list[float]]:
    await insert_old(colony, rows, start)
    await colony.settle()
    before = [await one(colony, len(colony.captured("/sink"))) for _ in range(baseline)]
    db = colony.colony.db
    delete = retention.through_writer(db)
    deletes: list[float] = []

    async def timed(target: prune.Prunable, keys: list[Any]) -> int:
        start = time.perf_counter()
        deleted = await delete(target, keys)
        deletes.append(time.perf_counter() - start)
        return deleted

    began = time.perf_counter()
    policy = retention.policy_of(RetentionConfig())
    pruning = asyncio.create_task(retention.prune_round(db.source, policy, timed, batch=batch))
    during = []
    while not pruning.done():
        during.append(await one(colony, len(colony.captured("/sink"))))
    counts, batches = await pruning
    elapsed = time.perf_counter() - began
    assert counts["message_log"] == rows, counts
    return before, during, batches, elapsed, deletes


async def main(rows: int, baseline: int, repeats: int, batch: int, loop: str) -> None:
    befores: list[float] = []
    deletes: list[float] = []
    durings: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        tree = build_tree(Path(tmp) / "tree")
        async with ColonyHarness(tree, capture=["/sink"], log_level="info") as colony:
            for n in range(repeats):
                before, during, batches, elapsed, times = await repeat(
                    colony, rows, baseline, -(n + 1) * rows * 2, batch
                )
                deletes += times
                befores += before
                durings += during
                print(
                    f"repeat {n + 1}: {rows:,} rows pruned in {batches} batches of at most "
                    f"{batch} in {elapsed:.1f} s; {len(during)} messages routed meanwhile"
                )
    base, under = statistics.median(befores), statistics.median(durings)
    p99_base = statistics.quantiles(befores, n=100)[98]
    p99_under = statistics.quantiles(durings, n=100)[98]
    ratio = under / base
    print(
        f"a batch's delete, handed to the writer until committed: median "
        f"{statistics.median(deletes) * 1e3:.1f} ms, max {max(deletes) * 1e3:.1f} ms"
    )
    print(f"routing latency, send to delivery ({len(befores)} and {len(durings)} messages):")
    print(f"  without pruning : median {base * 1e3:6.2f} ms, p99 {p99_base * 1e3:6.2f} ms")
    print(f"  during pruning  : median {under * 1e3:6.2f} ms, p99 {p99_under * 1e3:6.2f} ms")
    verdict = "met" if ratio <= TARGET else "NOT met"
    print(f"ratio (median): {ratio:.2f}x (target <= {TARGET:g}x) -> {verdict}")
    print(f"ratio (p99)   : {p99_under / p99_base:.2f}x")
    record(
        "prune",
        f"routing latency (median) while pruning {rows:,} old log rows",
        under * 1e3,
        "ms",
        loop=loop,
        floor=base * 1e3,
        floor_label="the same colony, same rows, not pruning",
        target=f"≤ {TARGET:g}x",
        met=ratio <= TARGET,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--baseline", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=retention.BATCH)
    add_loop_argument(parser)
    args = parser.parse_args()
    raise SystemExit(
        per_loop(
            args.loop, lambda loop: main(args.rows, args.baseline, args.repeats, args.batch, loop)
        )
    )
