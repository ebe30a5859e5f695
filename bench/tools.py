"""What the colony adds to a tool call through an ``mcp`` cell and to a request through a
``subcolony`` cell, against the same call made directly, in the same process and event loop.

* **mcp**: one ``tools/call`` of the fixture server's ``echo`` tool (fixtures/mcp/server.py
  over stdio). Through the colony: a source message to the mcp cell, the cell's call on its
  session, its ``tool_result`` routed by its out-edge to a waiter cell that wakes the caller.
  Direct: the official SDK's ``ClientSession`` over ``stdio_client`` to a second copy of the
  same server. Timed one call at a time (median, p99), and as throughput with N calls in
  flight (the cell's ``max_concurrency`` is N).
* **subcolony**: one user turn to a subcolony cell whose child runs
  fixtures/trees/subcolony-echo (its answer comes from a code cell). Direct: the same JSON
  frame written straight to a child ``python -m colony --root <copy> --stdio-format json``,
  and its reply line read back. One request at a time (median, p99).

The colony runs as a daemon runs (journal and message log on), and beside it a second one
without the journal (``delivery: at_most_once``), to tell the journal's share. Everything is
booted once and warmed up; the modes then take turns in every repeat (the order rotates), so
the machine's drift hits them alike, and the samples of all repeats are pooled.
``--profile`` prints where the colony side's time goes (cProfile of the event loop's thread,
own time, one extra round after the measured ones).

    python bench/tools.py [--calls N] [--concurrent C] [--burst B] [--requests R]
                          [--repeats K] [--only mcp|subcolony] [--profile]
                          [--loop asyncio|uvloop|both]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import json
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from _loops import add_loop_argument, per_loop
from _table import record
from _trees import CONTRACT, write_tree
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from colony.cell import CellClass, CellType
from colony.envelope import Envelope
from colony.ids import uuid7
from colony.testing import ColonyHarness

REPO = Path(__file__).resolve().parent.parent
SERVER = REPO / "fixtures" / "mcp" / "server.py"
ECHO_TREE = REPO / "fixtures" / "trees" / "subcolony-echo"
PASSTHROUGH = ("PATH", "HOME", "USER", "LANG", "TERM")
"""What the subcolony cell keeps of this environment for its child (its default)."""
CHILD_ENV = {"PYTHONPATH": str(REPO)}
"""Both children run this checkout's colony, whatever the interpreter has installed."""
WARMUP = 20
COLONIES = {"colony": "at_least_once", "colony, no journal": "at_most_once"}
"""The colony modes: as a daemon runs (the journal on), and without the journal, to tell its
share."""


class Waiter:
    """The replies' end: wakes the caller waiting on the reply's trace."""

    def __init__(self) -> None:
        self.waiting: dict[str, asyncio.Future[Envelope]] = {}

    async def handle(self, message: Envelope) -> None:
        future = self.waiting.pop(message.trace_id, None)
        if future is not None and not future.done():
            future.set_result(message)


def _tree(root: Path, name: str, cell: dict[str, Any]) -> Path:
    """A root hive, the cell under test at ``/name`` and the waiter behind its out-edge."""
    return write_tree(
        root,
        {
            "main/config.json": {
                "cell": {"type": "hive"},
                "params": {"graph": {"edges": [{"from": f"./{name}", "to": "./waiter"}]}},
            },
            f"main/{name}/config.json": {**cell, "contract": CONTRACT},
            "main/waiter/config.json": {"cell": {"type": "waiter"}, "contract": CONTRACT},
        },
    )


@contextlib.asynccontextmanager
async def colony_with(
    tree: Path, name: str, delivery: str
) -> AsyncIterator[Callable[[Any], Awaitable[Envelope]]]:
    """The colony booted from ``tree`` with ``delivery``; yields ``ask(body)``: the reply of
    the cell at ``/name`` to a source message sent to it."""
    waiter = Waiter()
    types = {"waiter": CellType("waiter", CellClass.STATEFUL, lambda spec: waiter)}
    overrides = {"delivery": delivery}
    async with ColonyHarness(tree, cell_types=types, colony=overrides, log_level="info") as colony:
        loop = asyncio.get_running_loop()

        async def ask(body: Any) -> Envelope:
            trace = uuid7()
            future: asyncio.Future[Envelope] = loop.create_future()
            waiter.waiting[trace] = future
            await colony.send(f"/{name}", body, trace_id=trace)
            return await future

        yield ask


# -- the timing ---------------------------------------------------------------------------------


async def sequential(one: Callable[[int], Awaitable[None]], calls: int) -> list[float]:
    """Milliseconds of each of ``calls`` calls made one after another."""
    times = []
    for n in range(calls):
        start = time.perf_counter()
        await one(n)
        times.append((time.perf_counter() - start) * 1000)
    return times


async def burst(one: Callable[[int], Awaitable[None]], calls: int, width: int) -> float:
    """Seconds ``calls`` calls take with ``width`` of them in flight at all times."""
    counter = iter(range(calls))

    async def worker() -> None:
        for n in counter:
            await one(n)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(width)))
    return time.perf_counter() - start


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98]


@contextlib.contextmanager
def profiled(label: str, top: int = 20) -> Iterator[None]:
    """Profile the block (this thread: the event loop) and print its ``top`` entries by own
    time."""
    profile = cProfile.Profile()
    profile.enable()
    try:
        yield
    finally:
        profile.disable()
        out = io.StringIO()
        stats = pstats.Stats(profile, stream=out).sort_stats("tottime")
        stats.print_stats(top)
        stats.print_callers(5)  # who pays the five largest
        print(f"-- profile: {label} (own time) --")
        print(out.getvalue().split("\n\n", 2)[-1].rstrip())


# -- mcp ----------------------------------------------------------------------------------------


def echo_call(n: int) -> dict[str, Any]:
    text = json.dumps({"name": "echo", "arguments": {"text": f"ping {n}"}})
    return {"messages": [{"origin": "assistant", "type": "tool_call", "text": text, "id": str(n)}]}


@contextlib.asynccontextmanager
async def direct_session() -> AsyncIterator[ClientSession]:
    """An initialized SDK session over stdio to a server of its own (its stderr, quiet at
    level WARNING, is this process's)."""
    server = StdioServerParameters(command=sys.executable, args=[str(SERVER), "stdio"])
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def bench_mcp(args: argparse.Namespace, loop: str, tmp: Path) -> None:
    cell = {
        "cell": {"type": "mcp", "timeout": -1},
        "params": {
            "transport": "stdio",
            "command": sys.executable,
            "args": [str(SERVER), "stdio"],
            "max_concurrency": args.concurrent,
        },
    }
    tree = _tree(tmp / "mcp", "mcp", cell)
    async with contextlib.AsyncExitStack() as stack:
        modes: dict[str, Callable[[int], Awaitable[None]]] = {}
        for label, delivery in COLONIES.items():
            ask = await stack.enter_async_context(colony_with(tree, "mcp", delivery))
            modes[label] = mcp_via(ask)
        session = await stack.enter_async_context(direct_session())

        async def direct(n: int) -> None:
            result = await session.call_tool("echo", {"text": f"ping {n}"})
            assert not result.is_error, result

        modes["direct"] = direct
        seq, per_call = await interleaved(modes, args, args.calls, args.burst)
        if args.profile:
            with profiled("an mcp call through the colony, one at a time"):
                await sequential(modes["colony"], args.calls)
    print(
        f"mcp: tools/call echo over stdio, {args.repeats} repeats of {args.calls} calls one at "
        f"a time and {args.burst} with {args.concurrent} in flight"
    )
    baseline = "the same call, SDK ClientSession direct"
    _report_latency("mcp", "call", seq, baseline, loop)
    floor = min(per_call["direct"])
    print(f"  {args.concurrent} in flight (best repeat), direct {1e6 / floor:7.0f} calls/s")
    for label in COLONIES:
        cost = min(per_call[label])
        print(f"    {label:<18} {1e6 / cost:7.0f} calls/s: {cost / floor:4.2f}x the time a call")
        record(
            "tools",
            f"mcp call, {args.concurrent} in flight (time per call), {label}",
            cost,
            "µs",
            loop=loop,
            floor=floor,
            floor_label=baseline,
        )


def mcp_via(ask: Callable[[Any], Awaitable[Envelope]]) -> Callable[[int], Awaitable[None]]:
    """One echo call through a colony's mcp cell, its answer checked."""

    async def one(n: int) -> None:
        reply = await ask(echo_call(n))
        turn = reply.body["messages"][0]
        assert "error_code" not in reply.headers.hop, turn
        assert turn["text"] == f"ping {n}", turn

    return one


async def interleaved(
    modes: dict[str, Callable[[int], Awaitable[None]]],
    args: argparse.Namespace,
    calls: int,
    burst_calls: int,
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Each mode warmed up, then in every repeat each mode's ``calls`` one at a time and (with
    ``burst_calls``) a burst, in an order that rotates from repeat to repeat. The latencies
    (ms) of all repeats pooled per mode, and each repeat's µs per call of the burst."""
    for one in modes.values():
        await sequential(one, WARMUP)
    seq: dict[str, list[float]] = {m: [] for m in modes}
    per_call: dict[str, list[float]] = {m: [] for m in modes}
    names = list(modes)
    for repeat in range(args.repeats):
        order = names[repeat % len(names) :] + names[: repeat % len(names)]
        for mode in order:
            seq[mode] += await sequential(modes[mode], calls)
        if burst_calls:
            for mode in order:
                took = await burst(modes[mode], burst_calls, args.concurrent)
                per_call[mode].append(took / burst_calls * 1e6)
    return seq, per_call


def _report_latency(
    what: str, unit: str, samples: dict[str, list[float]], baseline: str, loop: str
) -> None:
    for stat, figure in (("median", statistics.median), ("p99", p99)):
        d = figure(samples["direct"])
        print(f"  {stat}, one at a time: direct {d:7.3f} ms")
        for label in COLONIES:
            c = figure(samples[label])
            print(f"    {label:<18} {c:7.3f} ms: {c / d:4.2f}x ({c - d:+.3f} ms)")
            record(
                "tools",
                f"{what} {unit}, one at a time, {stat}, {label}",
                c * 1000,
                "µs",
                loop=loop,
                floor=d * 1000,
                floor_label=baseline,
            )


# -- subcolony ----------------------------------------------------------------------------------


def subcolony_via(
    ask: Callable[[Any], Awaitable[Envelope]],
) -> Callable[[int], Awaitable[None]]:
    """One user turn through a colony's subcolony cell, its answer checked."""

    async def one(n: int) -> None:
        reply = await ask(user_turn(n))
        assert reply.headers.hop == {"subcolony_event": "reply"}, reply.body
        assert reply.body["messages"][0]["text"] == f"child-colony saw: hello {n}"

    return one


def user_turn(n: int) -> dict[str, Any]:
    return {"messages": [{"origin": "user", "type": "text", "text": f"hello {n}"}]}


class DirectChild:
    """A child colony on stdio JSON frames, spoken to by hand."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, root: Path) -> DirectChild:
        env = {k: os.environ[k] for k in PASSTHROUGH if k in os.environ} | CHILD_ENV
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            *("-m", "colony", "--root", str(root), "--stdio-format", "json"),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env=env,
            cwd=root,
            limit=1 << 26,
        )
        child = cls(proc)
        ready = await child.frame()
        assert ready.get("type") == "ready", ready
        return child

    async def frame(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = await self.proc.stdout.readline()
        assert line, "the child colony closed its output"
        frame: dict[str, Any] = json.loads(line)
        return frame

    async def ask(self, body: Any) -> dict[str, Any]:
        """The reply frame to one message frame (the same frame the subcolony cell writes)."""
        assert self.proc.stdin is not None
        turn = uuid7()
        frame = {
            "v": 1,
            "type": "message",
            "trace_id": uuid7(),
            "ttl": 63,
            "context": {"turn_id": turn},
            "body": body,
        }
        self.proc.stdin.write((json.dumps(frame, ensure_ascii=False) + "\n").encode())
        await self.proc.stdin.drain()
        reply = await self.frame()
        assert reply.get("context", {}).get("turn_id") == turn, reply
        return reply

    async def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            async with asyncio.timeout(10):
                await self.proc.wait()
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()


async def bench_subcolony(args: argparse.Namespace, loop: str, tmp: Path) -> None:
    async with contextlib.AsyncExitStack() as stack:
        modes: dict[str, Callable[[int], Awaitable[None]]] = {}
        for n, (label, delivery) in enumerate(COLONIES.items()):
            mine = tmp / f"child-of-cell-{n}"  # no two colonies share one state
            shutil.copytree(ECHO_TREE, mine)
            cell = {"cell": {"type": "subcolony"}, "params": {"root": str(mine), "env": CHILD_ENV}}
            tree = _tree(tmp / f"parent-{n}", "child", cell)
            ask = await stack.enter_async_context(colony_with(tree, "child", delivery))
            modes[label] = subcolony_via(ask)
        theirs = tmp / "child-direct"
        shutil.copytree(ECHO_TREE, theirs)
        child = await DirectChild.start(theirs)
        stack.push_async_callback(child.close)

        async def direct(n: int) -> None:
            reply = await child.ask(user_turn(n))
            assert reply["body"]["messages"][0]["text"] == f"child-colony saw: hello {n}"

        modes["direct"] = direct
        seq, _ = await interleaved(modes, args, args.requests, 0)
        if args.profile:
            with profiled("a subcolony request through the colony (the parent's side)"):
                await sequential(modes["colony"], args.requests)
    print(
        f"subcolony: a user turn to fixtures/trees/subcolony-echo, {args.repeats} repeats of "
        f"{args.requests} requests one at a time"
    )
    _report_latency("subcolony", "request", seq, "the same frame written to a child", loop)


async def main(args: argparse.Namespace, loop: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        if args.only in (None, "mcp"):
            await bench_mcp(args, loop, Path(tmp))
        if args.only in (None, "subcolony"):
            await bench_subcolony(args, loop, Path(tmp))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=200, help="mcp calls one at a time")
    parser.add_argument("--concurrent", type=int, default=16, help="mcp calls in flight")
    parser.add_argument("--burst", type=int, default=800, help="mcp calls with N in flight")
    parser.add_argument("--requests", type=int, default=100, help="subcolony requests")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only", choices=("mcp", "subcolony"), default=None)
    parser.add_argument("--profile", action="store_true", help="profile the colony side")
    add_loop_argument(parser)
    args = parser.parse_args()
    raise SystemExit(per_loop(args.loop, lambda loop: main(args, loop)))
