"""Scale in one process: 10,000 idle cells at boot, 100,000 messages queued in one mailbox.

Boot: a tree of N idle cells (default 10,000) in nested hives, wired by about one edge per
cell, is written to a temporary folder, then booted the way the daemon boots it (load and
check every file, start the code cells' shared warm worker, open ``colony.db``, wire, start
every cell's task) in a fresh interpreter, so the peak RSS is the boot's own and nothing an
earlier run left behind counts. Boots come in two kinds, on a fresh ``colony.db`` and on the
one an earlier boot left (cells keep their ids), three of each; the quickest of a kind counts,
the median is shown, and the verdict takes the slower kind. Beside them a floor: reading and
parsing every ``config.json``, which says how fast the shared machine runs at the time. The
mix is mostly stateful cells, built on their first message (``store`` and ``llm``, so nothing
talks to the network at boot), plus stateless ``file`` and ``code`` cells, built at boot. A
forking ``code`` cell starts no worker of its own: every one of them shares one warm worker
per interpreter (cells/code/zygote_client.py).

Queues: a parked cell (its ``handle`` waits on a gate) fills its mailbox with 1,000, then
100,000 messages (``mailbox_default_capacity`` raised in colony.json), in both delivery modes,
sent by 50 concurrent senders through a root hive and a hive with CEL conditions. Measured at
each size, in µs per message: the fill, the fill's end (its last 999 messages, in three
windows, the mailbox then almost full), other traffic routed through the same hive to
another cell meanwhile (the probe: 2,000 messages, three times), and the drain once the gate
opens; of windows the quickest counts, so one stall of a shared machine does not. While the
drain runs, 100 messages for another cell are sent: how long they wait shows whether a cell
emptying a backlog lets the rest of the colony run. Each figure also says how much of it was the
cyclic garbage collector's: it walks the whole heap, queue included, at moments of its own
choosing (amortised, every time the heap has grown by a quarter), so a short window may or may
not pay for a walk. The verdict compares costs net of it: none may grow with the queue. Last,
at-least-once only: the colony is stopped with 100,000 messages queued (they stay in the
journal) and booted again; the figure is the time until all of them have been handled.

    python bench/scale.py [--cells N] [--queued N] [--loop asyncio|uvloop|both]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import itertools
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from _loops import add_loop_argument, per_loop, run_on
from _table import record
from _trees import CONTRACT, write_tree

from colony.cell import CellClass, CellSpec, CellType
from colony.envelope import Envelope

if TYPE_CHECKING:
    from colony.testing import ColonyHarness

BOOT_TARGET_S = 2.0
RSS_TARGET_MB = 300.0
SLOWDOWN_TARGET = 1.5
BOOTS = 3
"""Boots of each kind, each in a fresh interpreter; the quickest counts."""
"""A per-message cost with the big queue may be at most this many times the small queue's."""

CELLS_PER_HIVE = 20
HIVES_PER_GROUP = 25
MIX = ("store",) * 12 + ("llm",) * 5 + ("file",) * 2 + ("code",)
"""Cell types of one leaf hive, in order: 60% store, 25% llm, 10% file, 5% code."""
SCRIPT = "import json, sys\nprint(json.dumps(json.load(sys.stdin)['body']))\n"
PROBES = 2_000
DURING = 100
"""Messages for another cell sent as the backlog starts draining."""
WINDOWS = 3
PHASES = (
    ("fill", "fill"),
    ("fill_tail", "fill's end"),
    ("probe", "probe"),
    ("drain", "drain"),
)
JUDGED = PHASES[1:]
"""The phases that run with the whole queue in place (a fill's average includes its start)."""
SENDERS = 50
BODY = {"messages": [{"origin": "user", "type": "text", "text": "ping"}]}


# -- the big tree ------------------------------------------------------------------------------


def _cell(kind: str, files_dir: Path) -> dict[str, Any]:
    params: dict[str, Any]
    if kind == "store":
        params = {"schema": {"notes": {"key": "text", "n": "int", "doc": "json"}}}
    elif kind == "llm":
        params = {
            "provider": "openai",
            "base_url": "http://127.0.0.1:9/v1",
            "api_key": "${LLM_API_KEY:-unused}",
            "model": "small",
        }
    elif kind == "file":
        params = {"base_path": str(files_dir)}
    else:
        params = {"runner": "python3", "script_inline": SCRIPT}
    return {
        "cell": {"type": kind},
        "description": f"a {kind} cell",  # as real trees have: kept, and checked for typos
        "params": params,
        "contract": CONTRACT,
    }


def _hive(edges: list[dict[str, Any]]) -> dict[str, Any]:
    return {"cell": {"type": "hive"}, "params": {"graph": {"edges": edges}}}


def big_tree(root: Path, cells: int) -> Path:
    """``/gNN/hNN/cNN`` for ``cells`` cells: groups of leaf hives of CELLS_PER_HIVE cells.

    A leaf hive chains its cells (every third link conditional), leaves through ``..`` and
    sends one edge across the tree; its last cell is left unwired (inactive). Groups chain
    their hives and the root chains the groups, so every level has edges crossing it.
    """
    files_dir = root / "files"
    files_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, Any] = {}
    leaves = -(-cells // CELLS_PER_HIVE)
    groups = -(-leaves // HIVES_PER_GROUP)
    made = 0
    root_edges: list[dict[str, Any]] = [{"from": ".", "to": "./g000"}]
    for g in range(groups):
        group = f"g{g:03d}"
        if g + 1 < groups:
            root_edges.append({"from": f"./{group}", "to": f"./g{g + 1:03d}"})
        group_edges: list[dict[str, Any]] = [{"from": ".", "to": "./h000"}]
        for h in range(HIVES_PER_GROUP):
            if made >= cells:
                break
            hive = f"h{h:03d}"
            count = min(CELLS_PER_HIVE, cells - made)
            names = [f"c{i:03d}" for i in range(count)]
            edges: list[dict[str, Any]] = [{"from": ".", "to": f"./{names[0]}"}]
            wired = names[:-1] if count > 2 else names
            for i, (a, b) in enumerate(itertools.pairwise(wired)):
                edge: dict[str, Any] = {"from": f"./{a}", "to": f"./{b}"}
                if i % 3 == 0:
                    edge["condition"] = "has(hop.route) && hop.route == 'next'"
                    edge["modifier"] = {"set_context": {"step": "string(int(context.step) + 1)"}}
                edges.append(edge)
            edges.append({"from": f"./{wired[-1]}", "to": ".."})
            edges.append({"from": f"./{wired[len(wired) // 2]}", "to": "/g000/h000/c000"})
            files[f"main/{group}/{hive}/config.json"] = _hive(edges)
            for i, name in enumerate(names):
                kind = MIX[i % len(MIX)]
                files[f"main/{group}/{hive}/{name}/config.json"] = _cell(kind, files_dir)
            made += count
            if h + 1 < HIVES_PER_GROUP and made < cells:
                group_edges.append({"from": f"./{hive}", "to": f"./h{h + 1:03d}"})
        files[f"main/{group}/config.json"] = _hive(group_edges)
    files["main/config.json"] = _hive(root_edges)
    return write_tree(root, files)


# -- boot, in a fresh interpreter ------------------------------------------------------------


def _rss_mb() -> float:
    """The current resident set (not the peak), from /proc."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def boot_once(root: Path) -> dict[str, float]:
    """Boot the tree as colony/daemon.py does, then stop it; phase times in seconds."""
    importlib.import_module("colony.daemon")  # what a daemon has imported before it boots
    from cells import BUILTIN_CELL_TYPES, close_shared_resources, implemented_cell_types, prepare
    from colony.boot import open_colony
    from colony.cell import param_checks
    from colony.config.loader import load_tree
    from colony.observability import file_logger

    types = implemented_cell_types()
    imported = _rss_mb()
    rss: dict[str, float] = {}
    cpu = time.process_time()
    marks = [time.perf_counter()]
    result = load_tree(
        root, cell_types=types.keys() | BUILTIN_CELL_TYPES, param_checks=param_checks(types)
    )
    tree = result.tree
    assert tree is not None, [d.message for d in result.diagnostics][:5]
    marks.append(time.perf_counter())
    rss["load"] = _rss_mb()
    with open(root / "log.jsonl", "a", encoding="utf-8") as stream:  # noqa: ASYNC230

        def phase(name: str) -> None:
            marks.append(time.perf_counter())
            rss[name] = _rss_mb()

        async with open_colony(
            tree,
            types,
            log=file_logger(stream, "info"),
            prepare=prepare,
            release=close_shared_resources,
            on_phase=phase,
        ) as colony:
            for _ in range(3):  # every cell's task has taken its first step
                await asyncio.sleep(0)
            marks[-1] = time.perf_counter()
            cpu = time.process_time() - cpu
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            inactive = sum(not r.active for r in colony.runners.values())
    phases = ("load", "prepare", "wire", "start")
    out = {name: marks[i + 1] - marks[i] for i, name in enumerate(phases)}
    out |= {"total": marks[-1] - marks[0], "cpu": cpu, "rss_mb": peak, "imported_mb": imported}
    out |= {f"rss_{name}_mb": value for name, value in rss.items()}
    out |= {"cells": len(colony.runners), "edges": len(colony.edges), "inactive": inactive}
    folders = [n.folder for n in tree.cells.values()] + [n.folder for n in tree.hives.values()]
    files = [folder / "config.json" for folder in folders]
    out["floor"] = _read_all(files)
    return out


def _read_all(files: list[Path]) -> float:
    """The floor of any boot: seconds to read and parse every ``config.json`` of the tree."""
    start = time.perf_counter()
    for file in files:
        json.loads(file.read_text(encoding="utf-8"))
    return time.perf_counter() - start


def boot_child(root: Path, loop: str) -> None:
    """Runs in the fresh interpreter: one boot, its figures as one JSON line on stdout."""

    async def main() -> None:
        print(json.dumps(await boot_once(root)))

    run_on(loop, main)


def boot(root: Path, loop: str, profile: Path | None = None) -> dict[str, float]:
    argv = [sys.executable]
    if profile is not None:
        argv += ["-m", "cProfile", "-o", str(profile)]
    argv += [__file__, "--boot-child", str(root), "--loop", loop]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=600)
    if done.returncode:
        raise RuntimeError(f"boot failed:\n{done.stderr[-3000:]}")
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


# -- queues --------------------------------------------------------------------------------


class Counted:
    """A cell type whose one instance counts what it takes, each message after a gate opens
    (``/lane/park`` is held shut while its mailbox fills; ``/lane/probe`` is open)."""

    def __init__(self, name: str, expect: int, *, open_gate: bool) -> None:
        self.name = name
        self.expect = expect
        self.gate = asyncio.Event()
        if open_gate:
            self.gate.set()
        self.handled = 0
        self.all_in = asyncio.Event()

    def cell_type(self) -> CellType:
        return CellType(self.name, CellClass.STATEFUL, self._make)

    def _make(self, spec: CellSpec) -> Counted:
        return self

    async def handle(self, message: Envelope) -> None:
        await self.gate.wait()
        self.handled += 1
        if self.handled == self.expect:
            self.all_in.set()


def queue_tree(root: Path) -> Path:
    """Root hive → hive ``/lane`` → ``/lane/park`` or ``/lane/probe``, by ``hop.lane``."""
    lane = "has(hop.lane) && hop.lane == "
    cell = {"contract": CONTRACT}
    return write_tree(
        root,
        {
            "main/config.json": _hive([{"from": ".", "to": "./lane"}]),
            "main/lane/config.json": _hive(
                [
                    {"from": ".", "to": "./park", "condition": lane + "'park'"},
                    {"from": ".", "to": "./probe", "condition": lane + "'probe'"},
                ]
            ),
            "main/lane/park/config.json": {"cell": {"type": "park"}, **cell},
            "main/lane/probe/config.json": {"cell": {"type": "probe"}, **cell},
        },
    )


def _harness(
    tree: Path, cells: list[Counted], workdir: Path | None, **colony: Any
) -> ColonyHarness:
    from colony.testing import ColonyHarness

    return ColonyHarness(
        tree,
        log_level="info",
        cell_types={c.name: c.cell_type() for c in cells},
        colony=colony,
        workdir=workdir,
    )


async def _send_many(colony: ColonyHarness, count: int, lane: str) -> None:
    async def sender(share: int) -> None:
        for _ in range(share):
            await colony.send("/", BODY, hop={"lane": lane})

    shares = [count // SENDERS + (i < count % SENDERS) for i in range(SENDERS)]
    await asyncio.gather(*(sender(s) for s in shares if s))


class GcClock:
    """Seconds the cyclic collector has run so far, in any thread (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.total = 0.0
        self._started = 0.0

    def __enter__(self) -> GcClock:
        gc.callbacks.append(self._tick)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._tick)

    def _tick(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.total += time.perf_counter() - self._started


CLOCK = GcClock()


async def _timed(run: Callable[[], Any]) -> tuple[float, float]:
    """Wall seconds of ``run()``, and how many of them the collector took."""
    collected = CLOCK.total
    start = time.perf_counter()
    await run()
    return time.perf_counter() - start, CLOCK.total - collected


async def queue_case(
    tree: Path, delivery: str, queued: int, workdir: Path | None = None, during: int = 0
) -> dict[str, Any]:
    """Fill /lane/park with ``queued`` messages, probe, drain: µs per message of each phase,
    and (``*_gc``) how many of them the cyclic collector took.

    Each phase starts with ``colony.db``'s writer idle and ends once it has committed what
    the phase gave it, so no phase pays for another's rows. With ``workdir`` the colony is
    stopped with the mailbox full instead of drained (the journal keeps the messages for
    :func:`redelivery`)."""
    park = Counted("park", queued, open_gate=False)
    probe = Counted("probe", PROBES, open_gate=True)
    capacity = max(queued, 1000) + PROBES * (WINDOWS + 1)
    harness = _harness(
        tree, [park, probe], workdir, delivery=delivery, mailbox_default_capacity=capacity
    )
    out: dict[str, Any] = {"delivery": delivery, "queued": queued}

    def per_message(name: str, timed: tuple[float, float], count: int) -> None:
        out[name] = timed[0] / count * 1e6
        out[f"{name}_gc"] = timed[1] / count * 1e6

    async with harness as colony:
        db = colony.colony.db
        last = min(999, queued // 2) // WINDOWS * WINDOWS

        async def fill(count: int) -> None:
            await _send_many(colony, count, "park")
            await db.flush()

        # The fill's last messages go in as WINDOWS windows, and the probe runs WINDOWS
        # times: the quickest of each counts, so one stall of a shared machine does not.
        windows = [await _timed(lambda: fill(queued - last))]
        windows += [await _timed(lambda: fill(last // WINDOWS)) for _ in range(WINDOWS)]
        sent = queued
        per_message("fill", (sum(w[0] for w in windows), sum(w[1] for w in windows)), sent)
        per_message("fill_tail", min(windows[1:]), last // WINDOWS)
        mailbox = colony.colony.runners["/lane/park"].mailbox
        assert mailbox.qsize() >= sent - 1, mailbox.qsize()

        async def probing() -> None:
            probe.expect, probe.all_in = probe.handled + PROBES, asyncio.Event()
            await _send_many(colony, PROBES, "probe")
            await probe.all_in.wait()
            await db.flush()

        per_message("probe", min([await _timed(probing) for _ in range(WINDOWS)]), PROBES)
        if workdir is not None:
            return out  # stopped with the mailbox full: the journal keeps it

        # ``during`` messages for another cell, sent as the backlog starts draining: how long
        # they wait (their routing adds to the drain's cost, so only the large case has them).
        probe.expect, probe.all_in = probe.handled + during, asyncio.Event()
        start = time.perf_counter()

        async def drain() -> None:
            park.gate.set()
            if during:
                await asyncio.sleep(0)  # the drain has begun
                await _send_many(colony, during, "probe")
                await probe.all_in.wait()
                out["during_ms"] = (time.perf_counter() - start) * 1000
            await park.all_in.wait()
            out["drained_ms"] = (time.perf_counter() - start) * 1000
            await colony.settle(timeout=600)

        per_message("drain", await _timed(drain), sent)
    return out


async def redelivery(tree: Path, queued: int) -> dict[str, float]:
    """Stop a colony with ``queued`` messages journalled, boot it again, time the handling."""
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        await queue_case(tree, "at_least_once", queued, workdir)
        park = Counted("park", queued, open_gate=True)
        harness = _harness(tree, [park, Counted("probe", 0, open_gate=True)], workdir)
        start = time.perf_counter()
        async with harness as colony:
            booted = time.perf_counter() - start
            await park.all_in.wait()
            handled = time.perf_counter() - start
            assert colony.colony.redelivered == queued, colony.colony.redelivered
            await colony.settle(timeout=600)
            committed = time.perf_counter() - start
        return {"boot_s": booted, "handled_s": handled, "committed_s": committed}


# -- the report ----------------------------------------------------------------------------


def _best_phases(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each phase's figures from the run where it was fastest."""
    out: dict[str, Any] = {}
    for key, _ in PHASES:
        best = min(runs, key=lambda run: float(run[key]))
        out[key], out[f"{key}_gc"] = best[key], best[f"{key}_gc"]
    return out


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


async def main(cells: int, queued: int, loop: str, profile_dir: Path | None) -> int:
    with tempfile.TemporaryDirectory() as tmp, CLOCK:
        base = Path(tmp)
        print(f"building a tree of {cells:,} cells …", flush=True)
        big = big_tree(base / "big", cells)
        runs: list[dict[str, float]] = []
        peak = 0.0
        for attempt in ("fresh colony.db", "second boot"):
            tries: list[dict[str, float]] = []
            for _ in range(BOOTS):
                if attempt == "fresh colony.db":
                    for stale in big.glob("colony.db*"):
                        stale.unlink()
                prof = profile_dir / f"boot-{len(runs)}-{len(tries)}.prof" if profile_dir else None
                tries.append(boot(big, loop, prof))
            # As timeit does, the quickest counts: a shared machine only ever adds time.
            ranked = sorted(tries, key=lambda t: t["total"])
            f, median = ranked[0], ranked[len(ranked) // 2]["total"]
            peak = max(peak, *(t["rss_mb"] for t in tries))
            runs.append(f)
            print(
                f"  boot ({attempt}, best of {BOOTS}, median {median:.2f} s): "
                f"{f['total']:.2f} s (load {f['load']:.2f}"
                f", prepare {f['prepare']:.2f}, wire {f['wire']:.2f}, start {f['start']:.2f}; "
                f"{f['cpu']:.2f} s of CPU, {f['total'] / f['floor']:.1f}x the floor); peak RSS "
                f"{f['rss_mb']:.0f} MB "
                f"({f['imported_mb']:.0f} MB after imports, {f['rss_load_mb']:.0f} loaded, "
                f"{f['rss_wire_mb']:.0f} wired); {f['cells']:,.0f} cells, {f['edges']:,.0f} "
                f"edges, {f['inactive']:,.0f} inactive"
            )
        seconds = max(r["total"] for r in runs)
        rss = peak
        ok = seconds < BOOT_TARGET_S
        floor = min(r["floor"] for r in runs)
        print(
            f"  floor: reading and parsing every config.json of the tree takes {floor:.2f} s "
            "here (a measure of this machine's speed right now)"
        )
        print(f"target: {cells:,} cells boot in < {BOOT_TARGET_S:g} s -> {_verdict(ok)}")
        fits = rss < RSS_TARGET_MB
        print(
            f"target: peak RSS < {RSS_TARGET_MB:g} MB (the most any boot took) -> {_verdict(fits)}"
        )
        record(
            "scale",
            f"boot, {cells:,} idle cells",
            seconds * 1000,
            "ms",
            loop=loop,
            floor=floor * 1000,
            floor_label="reading and parsing every config.json",
            target=f"< {BOOT_TARGET_S * 1000:g} ms",
            met=seconds < BOOT_TARGET_S,
            note=f"best of {BOOTS}, the worse of a fresh and a second boot, fresh interpreters",
        )
        record(
            "scale",
            f"boot peak RSS, {cells:,} idle cells",
            rss,
            "MB",
            loop=loop,
            target=f"< {RSS_TARGET_MB:g} MB",
            met=rss < RSS_TARGET_MB,
            note=f"{min(r['imported_mb'] for r in runs):.0f} MB of it is the imports",
        )
        shutil.rmtree(big, ignore_errors=True)

        tree = queue_tree(base / "queue")
        small = 1_000
        print(
            f"mailbox of /lane/park holding {small:,} vs {queued:,} messages, µs per message "
            "(of which the cyclic collector):"
        )
        await queue_case(tree, "at_least_once", 200)  # warm-up: caches, lazy imports
        for delivery in ("at_least_once", "at_most_once"):
            # The small case is short and noisy: best of three. Once per size is enough for
            # the large one, whose phases last seconds.
            runs = [await queue_case(tree, delivery, small) for _ in range(3)]
            large = await queue_case(tree, delivery, queued, during=DURING)
            figures = {small: _best_phases(runs), queued: large}
            for size, f in figures.items():
                shown = ", ".join(
                    f"{label} {f[k]:6.1f} ({f[k + '_gc']:4.1f})" for k, label in PHASES
                )
                print(f"  {delivery:<14} {size:>7,} queued: {shown}")
            print(
                f"  {'':<14} {DURING} messages for another cell, sent as the {queued:,} start "
                f"draining, all handled after {large['during_ms']:,.0f} ms (the drain took "
                f"{large['drained_ms']:,.0f} ms)"
            )
            with_gc = max(figures[queued][k] / figures[small][k] for k, _ in JUDGED)
            without = max(
                (figures[queued][k] - figures[queued][k + "_gc"])
                / (figures[small][k] - figures[small][k + "_gc"])
                for k, _ in JUDGED
            )
            ok = without <= SLOWDOWN_TARGET
            print(
                f"  target: with {queued:,} queued no phase costs over {SLOWDOWN_TARGET:g}x its "
                f"{small:,}-queued cost, the collector's time aside (worst {without:.2f}x; "
                f"{with_gc:.2f}x with it) -> {_verdict(ok)}"
            )
            for key, what in (("probe", "routed"), ("drain", "drained")):
                record(
                    "scale",
                    f"message {what}, {queued:,} queued, {delivery}",
                    figures[queued][key],
                    "µs",
                    loop=loop,
                    floor=figures[small][key],
                    floor_label=f"the same with {small:,} queued",
                    target=f"≤ {SLOWDOWN_TARGET:g}x",
                    met=figures[queued][key] / figures[small][key] <= SLOWDOWN_TARGET,
                    note="collector's time included",
                )
        again = await redelivery(tree, queued)
        print(
            f"  redelivery of {queued:,} journalled messages: booted in {again['boot_s']:.2f} s, "
            f"all handled after {again['handled_s']:.2f} s, their acks committed after "
            f"{again['committed_s']:.2f} s ({queued / again['handled_s']:,.0f} messages/s)"
        )
        record(
            "scale",
            f"redelivery of {queued:,} journalled messages at boot",
            again["handled_s"],
            "s",
            loop=loop,
            note=f"boot part {again['boot_s']:.2f} s",
        )
    # A missed target is a figure (the table says so), not a failure: make bench goes on to
    # the other benchmarks and writes the table.
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--cells", type=int, default=10_000)
    parser.add_argument("--queued", type=int, default=100_000)
    parser.add_argument("--profile", type=Path, default=None, help="write cProfile files here")
    parser.add_argument("--boot-child", type=Path, default=None, help=argparse.SUPPRESS)
    add_loop_argument(parser)
    args = parser.parse_args()
    if args.boot_child is not None:
        boot_child(args.boot_child, "asyncio" if args.loop == "both" else args.loop)
        raise SystemExit(0)
    if args.profile is not None:
        os.makedirs(args.profile, exist_ok=True)
    raise SystemExit(
        per_loop(args.loop, lambda loop: main(args.cells, args.queued, loop, args.profile))
    )
