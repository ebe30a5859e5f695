"""Routing decisions per second through a real colony, against a bare queue hand-off.

The colony: a root hive, a chain of nested hives whose doors carry CEL conditions and a
context modifier, and a capture cell at the end, so each message costs DEPTH + 2 routing
decisions (the root transit, one transit per hive, the delivery). It runs in five modes in the
same process — the journal (at-least-once delivery) on and off, the message log on and off,
one sender or fifty at once (the journal's group commit), and with one client reading the live
event stream (``GET /colony/events``, a separate process that reads and discards; the target:
within 10% of the rate with none) — next to the floor: the same number
of ``asyncio.Queue`` hand-offs between two tasks, each also evaluating the doors' condition once
(compiled by the default CEL engine, activation built per hand-off; colony/edges.py builds one
per set of headers, so down this chain it builds two per message, not five), since no router
can decide for less. A bare hand-off is printed too. The machine is shared and
noisy, so the ratio is the figure; absolute rates move from run to run.

    python bench/routing.py [--messages N] [--depth D] [--repeats R] [--loop asyncio|uvloop|both]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _loops import add_loop_argument, per_loop
from _table import record

from colony.api import build_app, serve
from colony.expressions import JsonValue, default_engine
from colony.testing import ColonyHarness

CONDITION = "has(hop.route) && hop.route == 'fire' && int(context.iter) < 12"
TARGET = 5.0
"""The issue's target: a routing decision costs at most this many floors."""
RATE_TARGET = 20_000
"""Decisions per second with the journal and the message log on (one sender)."""
WATCHED_TARGET = 0.90
"""With one client on the event stream, at least this share of the rate with none."""
READER = (
    "import sys, urllib.request\n"
    "with urllib.request.urlopen(sys.argv[1]) as r:\n"
    "    while r.read(65536): pass\n"
)
"""The event-stream client: reads every byte and throws it away, in a process of its own."""

_Headers = tuple[dict[str, JsonValue], dict[str, JsonValue]]
"""(hop, context), what the floor hands over."""


def build_tree(root: Path, depth: int) -> Path:
    def write(rel: str, doc: dict[str, Any]) -> None:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc))

    door = {
        "condition": CONDITION,
        "modifier": {"set_context": {"iter": "int(context.iter) + 1"}},
    }
    write(
        "main/config.json",
        {
            "cell": {"type": "hive"},
            "params": {"graph": {"edges": [{"from": ".", "to": "./h0", **door}]}},
        },
    )
    folder = "main"
    for level in range(depth):
        folder = f"{folder}/h{level}"
        nxt = f"./h{level + 1}" if level + 1 < depth else "/sink"
        write(
            f"{folder}/config.json",
            {
                "cell": {"type": "hive"},
                "params": {
                    "graph": {"edges": [{"from": ".", "to": nxt, "condition": door["condition"]}]}
                },
            },
        )
    return root


async def watched(colony: ColonyHarness, clients: int) -> Any:
    """Serve the colony's API and start ``clients`` event-stream readers; returns a stopper."""
    runner = await serve(build_app(colony.colony), "127.0.0.1", 0)
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/colony/events"
    readers = [
        await asyncio.create_subprocess_exec(sys.executable, "-c", READER, url)
        for _ in range(clients)
    ]
    while len(colony.colony.events.watchers) < clients:  # noqa: ASYNC110 (nothing to await)
        await asyncio.sleep(0.01)

    async def stop() -> None:
        for reader in readers:
            reader.kill()
            await reader.wait()
        await runner.cleanup()

    return stop


async def colony_rate(
    tree: Path, messages: int, log_messages: bool, delivery: str, senders: int = 1, clients: int = 0
) -> tuple[float, int]:
    body = {"messages": [{"origin": "user", "type": "text", "text": "ping"}]}
    async with ColonyHarness(
        tree,
        capture=["/sink"],
        log_level="info",
        log_messages=log_messages,
        colony={"delivery": delivery},
    ) as colony:
        stop = await watched(colony, clients) if clients else None

        async def sender(count: int) -> None:
            for _ in range(count):
                await colony.send("/", body, hop={"route": "fire"}, context={"iter": "0"})

        start = time.perf_counter()
        await asyncio.gather(*(sender(messages // senders) for _ in range(senders)))
        await colony.settle(timeout=600)
        elapsed = time.perf_counter() - start
        decisions = colony.colony.decisions
        assert len(colony.captured("/sink")) == messages // senders * senders
        if stop is not None:
            await stop()
    return decisions / elapsed, decisions


async def queue_rate(handoffs: int) -> float:
    queue: asyncio.Queue[object] = asyncio.Queue(1000)
    item = object()

    async def consume() -> None:
        for _ in range(handoffs):
            await queue.get()

    start = time.perf_counter()
    consumer = asyncio.create_task(consume())
    for _ in range(handoffs):
        await queue.put(item)
    await consumer
    return handoffs / (time.perf_counter() - start)


async def floor_rate(handoffs: int) -> float:
    """Queue hand-offs per second where the consumer evaluates one compiled condition each."""
    engine = default_engine()
    condition = engine.compile(CONDITION)
    queue: asyncio.Queue[_Headers] = asyncio.Queue(1000)
    headers: _Headers = ({"route": "fire"}, {"iter": "0"})

    async def consume() -> None:
        for _ in range(handoffs):
            hop, context = await queue.get()
            if condition.evaluate(engine.activation({"context": context, "hop": hop})) is not True:
                raise AssertionError("the floor's condition does not hold")

    start = time.perf_counter()
    consumer = asyncio.create_task(consume())
    for _ in range(handoffs):
        await queue.put(headers)
    await consumer
    return handoffs / (time.perf_counter() - start)


MODES = (
    ("journal on,  log on ", "at_least_once", True, 1, 0),
    ("journal on,  log on, 1 SSE client", "at_least_once", True, 1, 1),
    ("journal on,  log on, 50 senders", "at_least_once", True, 50, 0),
    ("journal off, log on ", "at_most_once", True, 1, 0),
    ("journal off, log off", "at_most_once", False, 1, 0),
)
"""(label, colony.json delivery, message log, concurrent senders, event-stream clients)."""


async def main(messages: int, depth: int, repeats: int, loop: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tree = build_tree(Path(tmp) / "tree", depth)
        rates: dict[str, list[float]] = {label: [] for label, *_ in MODES}
        bares: list[float] = []
        floors: list[float] = []
        decisions = 0
        for _ in range(repeats):
            for label, delivery, log, senders, clients in MODES:
                rate, decisions = await colony_rate(tree, messages, log, delivery, senders, clients)
                rates[label].append(rate)
            bares.append(await queue_rate(decisions))
            floors.append(await floor_rate(decisions))
    bare, floor = statistics.median(bares), statistics.median(floors)
    floor_label = "queue hand-off + 1 CEL evaluation"
    print(f"colony: {messages} messages x {depth + 2} decisions = {decisions} routing decisions")
    medians = {label: statistics.median(v) for label, v in rates.items()}
    for label, rate in medians.items():
        ratio = floor / rate
        print(
            f"  {label:<32}: {rate:>10,.0f} decisions/s  ({1e6 / rate:6.1f} µs each, "
            f"{ratio:5.1f}x the floor)"
        )
        record(
            "routing",
            f"decision, {' '.join(label.split())}",
            1e6 / rate,
            "µs",
            loop=loop,
            floor=1e6 / floor,
            floor_label=floor_label,
            target=f"≤ {TARGET:g}x",
            met=ratio <= TARGET,
        )
    print(f"  floor, queue + CEL evaluation   : {floor:>10,.0f} /s  ({1e6 / floor:6.2f} µs each)")
    print(f"  bare asyncio.Queue hand-off     : {bare:>10,.0f} /s  ({1e6 / bare:6.2f} µs each)")
    journal = medians[MODES[0][0]]
    memory = medians[MODES[2][0]]
    print(f"journal cost: {memory / journal:.2f}x slower per decision with one sender")
    share = medians[MODES[1][0]] / journal
    verdict = "met" if share >= WATCHED_TARGET else "NOT met"
    print(
        f"one client on /colony/events: {share:.2f}x the rate with none "
        f"(target >= {WATCHED_TARGET:.2f}x) -> {verdict}"
    )
    record(
        "routing",
        "decisions/s with one event-stream client, share of none",
        share,
        "x",
        loop=loop,
        target=f"≥ {WATCHED_TARGET:.2f}x",
        met=share >= WATCHED_TARGET,
    )
    verdict = "met" if journal >= RATE_TARGET else "NOT met"
    print(f"target: >= {RATE_TARGET:,} decisions/s with the journal and the log on -> {verdict}")
    print(f"target: a decision <= {TARGET:g}x the floor ({floor_label})")
    record(
        "routing",
        "decisions/s, journal on, log on",
        journal,
        "/s",
        loop=loop,
        target=f"≥ {RATE_TARGET:,}/s",
        met=journal >= RATE_TARGET,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    add_loop_argument(parser)
    args = parser.parse_args()
    raise SystemExit(
        per_loop(args.loop, lambda loop: main(args.messages, args.depth, args.repeats, loop))
    )
