"""Routing latency while the pruner deletes 100,000 old message-log rows, against the latency
with the same rows in place and no pruning, in the same colony and the same run.

The colony: a root hive routing each message to a capture cell (two routing decisions, two
message-log rows; at-least-once delivery, the default, so each ingress waits for its unit's
commit). Messages are sent one after another; a message's latency is from the send to its
delivery at the capture cell. Each repeat inserts ``--rows`` message-log rows 30 days old
(a batch of SQL on the writer's own connection; ``--body-kb``: each with a body of that many
KB, as an LLM transcript's, else a 4-character text), empties the WAL, times ``--baseline``
messages with them in place, then runs one pruning round (:func:`colony.retention.prune_round`,
through the writer, as the daemon's pruner does) while messages keep being sent, and times
those, and how large ``colony.db-wal`` grew. The issue's target: the median latency during
pruning within 1.5x of the baseline's. ``--secure-delete on`` and a large ``--batch-bytes``
give what the pruner did before it set ``secure_delete=FAST`` and counted bytes.

    python bench/prune.py [--rows N] [--body-kb K] [--baseline M] [--repeats R]
        [--batch N] [--batch-bytes B] [--secure-delete fast|on] [--loop asyncio|uvloop|both]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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
from colony.persist.schema import connect
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


def old_body(body_kb: int) -> dict[str, Any]:
    if not body_kb:
        return BODY
    return {"messages": [{"origin": "assistant", "type": "text", "text": "x" * body_kb * 1000}]}


def db_path(colony: ColonyHarness) -> Path:
    path = colony.colony.db.source.path
    assert path is not None, "the benchmark's colony is on SQLite"
    return path


def wal_bytes(colony: ColonyHarness) -> int:
    try:
        return db_path(colony).with_name("colony.db-wal").stat().st_size
    except OSError:
        return 0


def empty_wal(colony: ColonyHarness) -> None:
    """Copy the WAL into the file and cut it to nothing, so its growth is the round's."""
    with contextlib.closing(connect(str(db_path(colony)))) as conn:
        for _ in range(1000):
            if conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0:
                return


async def insert_old(colony: ColonyHarness, rows: int, start: int, body_kb: int) -> None:
    at = now_ms() - 30 * DAY_MS
    body = json.dumps(old_body(body_kb))

    for first in range(0, rows, 1000):  # a transaction of at most 1,000 rows
        chunk = min(1000, rows - first)
        here = start + first

        def insert(conn: Any, chunk: int = chunk, here: int = here) -> None:
            conn.execute(OLD_ROWS, (chunk, here, here, here, body, at, at))

        await colony.colony.db.execute(insert)
        await colony.colony.db.flush()


async def one(colony: ColonyHarness, delivered: int) -> float:
    """Send one message and wait for its delivery; seconds."""
    start = time.perf_counter()
    await colony.send("/", BODY)
    while len(colony.captured("/sink")) <= delivered:  # noqa: ASYNC110 (no event to await)
        await asyncio.sleep(0)
    return time.perf_counter() - start


@contextlib.asynccontextmanager
async def secure_delete(colony: ColonyHarness, mode: str) -> Any:
    """The writer's connection with ``secure_delete`` as asked (the daemon's is FAST)."""
    db = colony.colony.db

    def pragma(value: str) -> Any:
        def work(conn: Any) -> None:
            conn.execute(f"PRAGMA secure_delete={value}")

        return work

    if mode == "on":
        await db.execute(pragma("1"))
        await db.flush()
    try:
        yield
    finally:
        if mode == "on":
            await db.execute(pragma("FAST"))
            await db.flush()


async def repeat(
    colony: ColonyHarness, rows: int, body_kb: int, baseline: int, start: int, sizes: Any
) -> tuple[list[float], list[float], int, float, list[float], int]:
    batch, batch_bytes = sizes
    await insert_old(colony, rows, start, body_kb)
    await colony.settle()
    await asyncio.to_thread(empty_wal, colony)
    before = [await one(colony, len(colony.captured("/sink"))) for _ in range(baseline)]
    print(f"  colony.db-wal after the baseline's messages: {wal_bytes(colony) / 1e6:.1f} MB")
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
    pruning = asyncio.create_task(
        retention.prune_round(db.source, policy, timed, batch=batch, batch_bytes=batch_bytes)
    )
    during = []
    wal = 0
    while not pruning.done():
        during.append(await one(colony, len(colony.captured("/sink"))))
        wal = max(wal, wal_bytes(colony))
    counts, batches = await pruning
    elapsed = time.perf_counter() - began
    assert counts["message_log"] == rows, counts
    return before, during, batches, elapsed, deletes, max(wal, wal_bytes(colony))


async def main(args: argparse.Namespace, loop: str) -> None:
    rows, body_kb, baseline = args.rows, args.body_kb, args.baseline
    befores: list[float] = []
    deletes: list[float] = []
    durings: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        tree = build_tree(Path(tmp) / "tree")
        async with (
            ColonyHarness(tree, capture=["/sink"], log_level="info") as colony,
            secure_delete(colony, args.secure_delete),
        ):
            for n in range(args.repeats):
                before, during, batches, elapsed, times, wal = await repeat(
                    colony,
                    rows,
                    body_kb,
                    baseline,
                    -(n + 1) * rows * 2,
                    (args.batch, args.batch_bytes),
                )
                deletes += times
                befores += before
                durings += during
                print(
                    f"repeat {n + 1}: {rows:,} rows ({body_kb or 0.03} KB bodies) pruned in "
                    f"{batches} batches of at most {min(args.batch, retention.BATCH_MAX)} rows and "
                    f"{args.batch_bytes / 1e6:g} MB in {elapsed:.1f} s; {len(during)} messages "
                    f"routed meanwhile; colony.db-wal grew to {wal / 1e6:.1f} MB "
                    f"(secure_delete {args.secure_delete})"
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
    bodies = f" of {body_kb} KB bodies" if body_kb else ""
    record(
        "prune",
        f"routing latency (median) while pruning {rows:,} old log rows{bodies}",
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
    parser.add_argument("--body-kb", type=int, default=0, help="each old row's body, in KB")
    parser.add_argument("--baseline", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=retention.BATCH, help="rows, at most 900")
    parser.add_argument("--batch-bytes", type=int, default=retention.BATCH_BYTES)
    parser.add_argument("--secure-delete", choices=("fast", "on"), default="fast")
    add_loop_argument(parser)
    args = parser.parse_args()
    raise SystemExit(per_loop(args.loop, lambda loop: main(args, loop)))
