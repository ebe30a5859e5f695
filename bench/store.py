"""Guarded updates per second through the store cell, against the same statement run directly
on sqlite3 in the same process.

Through the cell, each update is a message: ingress → root hive → store → capture cell, the
store reply included. The store's tables are in colony.db: the update and its receipt run on
the colony's writer thread inside the transaction that commits the reply's hand-off. Directly,
it is ``conn.execute(UPDATE …)`` on a connection with the same pragmas: the floor, since a
store cell cannot update a row for less than SQLite does. The ratio is the figure. Only the
first update changes the row; after it the direct statement matches nothing and commits no
page, while the cell (at-least-once delivery, the default) still commits a receipt per message.

Two figures: updates sent one after another (each send waits for its ingress to be
journalled: the latency of the chain), and ``--width`` sent at once (many conversations
asking the one store: what the writer's group commit buys).

    python bench/store.py [--updates N] [--width W] [--loop asyncio|uvloop|both]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from _loops import add_loop_argument, per_loop
from _table import record
from _trees import chain, write_tree

from colony.testing import ColonyHarness

GUARD = {
    "operation": "update",
    "table": "thread",
    "set": {"fired": 1},
    "where": {"turn_id": "t1", "iter": 0, "role": "assistant", "fired": 0},
}
TARGET = 3.0
"""The issue's target: an update through the cell costs at most this many direct ones."""
SCHEMA = {
    "thread": {"turn_id": "text", "iter": "int", "role": "text", "fired": "int", "turn": "json"}
}


def build_tree(root: Path) -> Path:
    cell = {"cell": {"type": "store"}, "params": {"schema": SCHEMA}}
    return write_tree(root, chain("memory", cell))


def call(args: Mapping[str, object]) -> dict[str, object]:
    return {
        "messages": [
            {"origin": "assistant", "type": "tool_call", "id": "c", "text": json.dumps(args)}
        ]
    }


async def through_cell(tree: Path, updates: int, width: int = 1) -> float:
    insert = {
        "operation": "insert",
        "table": "thread",
        "row": {"turn_id": "t1", "iter": 0, "role": "assistant", "fired": 0},
    }
    async with ColonyHarness(tree, capture=["/sink"], log_level="info") as colony:
        await colony.send("/memory", call(insert))
        await colony.settle()
        body = call(GUARD)
        start = time.perf_counter()
        for _ in range(updates // width):
            if width == 1:
                await colony.send("/memory", body)
            else:
                await asyncio.gather(*(colony.send("/memory", body) for _ in range(width)))
        await colony.settle(timeout=600)
        elapsed = time.perf_counter() - start
        replies = colony.captured("/sink")[1:]
        assert sum(r.headers.hop["rows_affected"] for r in replies) == 1
    return (updates // width * width) / elapsed


def direct(path: Path, updates: int) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(
        'CREATE TABLE thread ("fired" INTEGER, "iter" INTEGER, "role" TEXT, "turn" TEXT, '
        '"turn_id" TEXT)'
    )
    conn.execute("INSERT INTO thread (turn_id, iter, role, fired) VALUES ('t1', 0, 'assistant', 0)")
    sql = (
        'UPDATE "thread" SET "fired" = ? '
        'WHERE "turn_id" = ? AND "iter" = ? AND "role" = ? AND "fired" = ?'
    )
    start = time.perf_counter()
    for _ in range(updates):
        conn.execute(sql, (1, "t1", 0, "assistant", 0))
    elapsed = time.perf_counter() - start
    conn.close()
    return updates / elapsed


async def main(updates: int, width: int, loop: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cell = await through_cell(build_tree(Path(tmp) / "tree"), updates)
        wide = await through_cell(build_tree(Path(tmp) / "wide"), updates, width)
        raw = direct(Path(tmp) / "direct.db", updates)
    print(f"guarded update ({updates} times, one row, first wins):")
    print(f"  through the store cell: {cell:>10,.0f} updates/s  ({1e6 / cell:7.1f} µs each)")
    print(f"  ... {width:>3} at a time:     {wide:>10,.0f} updates/s  ({1e6 / wide:7.1f} µs each)")
    print(f"  direct sqlite3:         {raw:>10,.0f} updates/s  ({1e6 / raw:7.1f} µs each)")
    verdict = "met" if raw / cell <= TARGET else "NOT met"
    print(f"ratio direct/cell: {raw / cell:.1f}x  (target <= {TARGET:g}x -> {verdict})")
    print(f"ratio direct/cell, {width} at a time: {raw / wide:.1f}x")
    record(
        "store",
        "guarded update through the cell",
        1e6 / cell,
        "µs",
        loop=loop,
        floor=1e6 / raw,
        floor_label="the same UPDATE on a direct sqlite3 connection",
        target=f"≤ {TARGET:g}x",
        met=raw / cell <= TARGET,
    )
    record(
        "store",
        f"guarded update through the cell, {width} at a time",
        1e6 / wide,
        "µs",
        loop=loop,
        floor=1e6 / raw,
        floor_label="the same UPDATE on a direct sqlite3 connection",
        target=f"≤ {TARGET:g}x",
        met=raw / wide <= TARGET,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--updates", type=int, default=5000)
    parser.add_argument("--width", type=int, default=50, help="updates sent at once")
    add_loop_argument(parser)
    args = parser.parse_args()
    raise SystemExit(per_loop(args.loop, lambda loop: main(args.updates, args.width, loop)))
