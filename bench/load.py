"""Throughput of the store-backed tool loop under load: N conversations started at once.

Each conversation runs three rounds of two parallel tool calls and an answer through
fixtures/trees/ttl-budget (code cells, a SQLite store cell, the guarded fan-in) against a
zero-latency scripted model. Printed: turns/s and routing decisions/s, the time to the last
answer, each with the same-run baseline of one conversation alone (the latency floor), peak RSS,
the journal's peak depth (rows in colony.db's journal, sampled), and the checks: nothing lost,
doubled, crossed or dead-lettered. ``--kill-midway`` runs the colony in a daemon process, kills
it (-9) halfway through and starts it again on the same folder: the run must still complete.

A run that cannot finish is stopped, at ``--timeout`` seconds or when the journal has stood
still for ``--stall`` seconds (a deadlock), and ends with what failed and exit code 1 (2 when
the benchmark itself broke), never a traceback.

    python bench/load.py [--conversations N] [--kill-midway] [--timeout S] [--stall S]
                         [--capacity C] [--loop asyncio|uvloop|both]
"""

from __future__ import annotations

import argparse
import sys

from _loops import add_loop_argument, per_loop
from _table import record

from colony.load import LoadResult, run_load
from colony.load.restart import run_load_with_restart

ROUNDS, TOOLS = 3, 2


async def main(args: argparse.Namespace, loop: str) -> int:
    try:
        return await measure(args, loop)
    except Exception as exc:  # the benchmark broke (not the colony): say what, and exit 2
        print(f"FAILED: the load benchmark broke: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


async def measure(args: argparse.Namespace, loop: str) -> int:
    n: int = args.conversations
    timeout: float = args.timeout if args.timeout is not None else max(600.0, float(n))
    colony = {"mailbox_default_capacity": args.capacity} if args.capacity is not None else None
    kill = " (kill -9 halfway, then a restart)" if args.kill_midway else ""
    print(
        f"{n} conversations at once{kill}, {ROUNDS} rounds x {TOOLS} tools each, zero-latency "
        f"model; stopped at {timeout:g} s, or after {args.stall:g} s standing still",
        flush=True,
    )
    alone = await run_load(
        1, rounds=ROUNDS, tools=TOOLS, timeout=timeout, stall=args.stall, colony=colony
    )
    if not alone.ok:
        print("FAILED: one conversation alone (the baseline) did not complete:")
        print(alone.summary())
        return 1
    if args.kill_midway:
        result = await run_load_with_restart(
            n,
            rounds=ROUNDS,
            tools=TOOLS,
            timeout=timeout,
            stall=args.stall,
            colony=colony,
            loop=loop,
        )
    else:
        result = await run_load(
            n, rounds=ROUNDS, tools=TOOLS, timeout=timeout, stall=args.stall, colony=colony
        )
    report(result, alone, loop, kill=bool(args.kill_midway))
    return 0 if result.ok else 1


def report(result: LoadResult, alone: LoadResult, loop: str, *, kill: bool) -> None:
    n = result.conversations
    many = f"{n} at once" + (", kill -9 halfway" if kill else "")
    if result.stopped is None:
        turns = n / result.seconds
        print(f"  {result.seconds:8.2f} s   {turns:8.1f} turns/s", end="")
        if not kill:  # the killed daemon's decisions are gone with it
            print(f"   {result.decisions / result.seconds:8.0f} hops/s", end="")
        print()
        print(f"  one conversation alone: {alone.seconds:.3f} s ({alone.decisions} hops)")
        print(f"  concurrency gain: {turns * alone.seconds:.1f}x the turns/s of one at a time")
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
        if not kill:
            hops = result.decisions / result.seconds
            record("load", f"decisions/s, {many}", hops, "/s", loop=loop)
    last, floor = result.last_answer_seconds, alone.last_answer_seconds
    if last is not None and floor:
        print(f"  last answer after {last:.2f} s ({last / floor:.0f}x one conversation alone)")
        if result.stopped is None:
            record(
                "load",
                f"time to the last answer, {many}",
                last,
                "s",
                loop=loop,
                floor=floor,
                floor_label="one conversation alone",
            )
    print(f"  peak RSS (daemon process): {result.peak_rss_mb:.0f} MB")
    print(f"  journal peak depth: {result.journal_peak} rows (sampled)")
    if result.redelivered is not None:
        print(
            f"  redelivered at the restart: {result.redelivered} messages; answers the sink got "
            f"again under the same id (at-least-once, not doubles): {result.redelivered_answers}"
        )
    if result.stopped is None:
        record("load", f"peak RSS of the daemon, {many}", result.peak_rss_mb, "MB", loop=loop)
        record("load", f"journal peak depth, {many}", result.journal_peak, "rows", loop=loop)
    print(result.summary())
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
        note=result.stopped or "",
    )
    print("load: ok" if result.ok else f"load: FAILED ({len(result.failures())} checks)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument(
        "--kill-midway",
        action="store_true",
        help="run the colony in a daemon process, kill -9 it halfway and restart it",
    )
    parser.add_argument(
        "--timeout", type=float, help="stop the run after this many seconds (default: N, >= 600)"
    )
    parser.add_argument(
        "--stall",
        type=float,
        default=60.0,
        help="stop the run when the journal stood still this long (default 60 s)",
    )
    parser.add_argument(
        "--capacity", type=int, help="colony.json mailbox_default_capacity (default: the tree's)"
    )
    add_loop_argument(parser)
    args = parser.parse_args()
    raise SystemExit(per_loop(args.loop, lambda loop: main(args, loop)))
