"""Throughput of the store-backed tool loop under load: N conversations started at once.

Each conversation runs three rounds of two parallel tool calls and an answer through
fixtures/trees/ttl-budget (code cells, a SQLite store cell, the guarded fan-in) against a
zero-latency scripted model. Printed: turns/s and routing decisions/s, with the same-run
baseline of one conversation alone (the latency floor), peak RSS, and the loss checks.

    python bench/load.py [--conversations N] [--loop asyncio|uvloop|both]
"""

from __future__ import annotations

import argparse

from _loops import add_loop_argument, per_loop
from _table import record

from colony.load import run_load


async def main(conversations: int, loop: str) -> int:
    alone = await run_load(1)
    result = await run_load(conversations)
    turns = conversations / result.seconds
    print(f"{conversations} conversations, 3 rounds x 2 tools each, zero-latency model:")
    hops = result.decisions / result.seconds
    print(f"  {result.seconds:8.2f} s   {turns:8.1f} turns/s   {hops:8.0f} hops/s")
    print(f"  one conversation alone: {alone.seconds:.3f} s ({alone.decisions} hops)")
    print(f"  concurrency gain: {turns * alone.seconds:.1f}x the turns/s of one at a time")
    print(f"  peak RSS (daemon process): {result.peak_rss_mb:.0f} MB")
    print(
        f"  answered {result.answered}/{conversations}; lost {len(result.lost)}, duplicated "
        f"{len(result.duplicated)}, crossed {len(result.wrong)}, bad threads "
        f"{len(result.bad_threads)}, dead letters {result.dead_letters}"
    )
    many = f"{conversations} at once"
    record(
        "load",
        f"turns/s, {many}",
        turns,
        "/s",
        loop=loop,
        floor=1 / alone.seconds,
        floor_label="one conversation alone",
        note="the ratio is the concurrency gain",
    )
    record("load", f"decisions/s, {many}", hops, "/s", loop=loop)
    record("load", f"peak RSS of the daemon, {many}", result.peak_rss_mb, "MB", loop=loop)
    failures = len(result.lost) + len(result.duplicated) + len(result.wrong)
    failures += len(result.bad_threads) + result.dead_letters
    record(
        "load",
        f"failures (lost, doubled, crossed, bad thread, dead letter), {many}",
        failures,
        "",
        loop=loop,
        target="0",
        met=result.ok,
    )
    return 0 if result.ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--conversations", type=int, default=200)
    add_loop_argument(parser)
    args = parser.parse_args()
    raise SystemExit(per_loop(args.loop, lambda loop: main(args.conversations, loop)))
