"""Scale: nothing a colony does per cell, per edge or per queued message may cost more as the
colony or the queue grows.

Each rule is pinned by timing the same work at two sizes and bounding the ratio of the costs
per item, generously (a linear cost gives 1, a quadratic one the size ratio), never by an
absolute time a busy 2-core machine could break. The cyclic garbage collector is off while a
timer runs: a full collection walks the whole heap at moments of its own choosing, which would
make a window of 1,000 messages cost whatever one collection costs.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import json
import random
import sqlite3
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from colony.activity import active_cells
from colony.cell import CellClass, CellSpec, CellType
from colony.config.loader import load_tree
from colony.effects import Delivery
from colony.envelope import Envelope, source_message
from colony.paths import parent
from colony.persist.db import ColonyDb
from colony.testing import ColonyHarness
from tests.conftest import TreeFactory, cell, hive

SLACK = 3.0
"""How much more an item may cost at the large size than at the small one."""


def _best_of(runs: int, work: Callable[[], float]) -> float:
    return min(work() for _ in range(runs))


@contextlib.contextmanager
def _timer(clock: Callable[[], float] = time.perf_counter) -> Iterator[Callable[[], float]]:
    """Seconds of ``clock`` since the block began (the collector off meanwhile)."""
    gc.disable()
    start = clock()
    try:
        yield lambda: clock() - start
    finally:
        gc.enable()


# -- activity ---------------------------------------------------------------------------------


def _under(path: str, ancestor: str) -> bool:
    if path == ancestor or ancestor == "/":
        return path.startswith("/")
    return path.startswith(ancestor + "/")


def _activity_as_written(
    cells: Collection[str], hives: Collection[str], edges: Iterable[tuple[str, str]]
) -> dict[str, bool]:
    """meclaw's connectivity rule taken word for word: every endpoint compared with every
    cell, every edge with every hive (quadratic; the reference for small trees)."""
    pairs = list(edges)
    endpoints = {p for pair in pairs for p in pair}

    def hive_active(h: str) -> bool:
        if h == "/":
            return True
        crossed = any(_under(a, h) != _under(b, h) for a, b in pairs)
        return crossed and parents_active(h)

    def parents_active(path: str) -> bool:
        up = parent(path)
        if up == "/" or up == path or up not in hives:
            return True
        return hive_active(up)

    scope: set[str] = set()
    for point in endpoints:
        scope.add(point)
        scope.update(c for c in cells if _under(c, point))
        current = point
        while (up := parent(current)) != current:
            scope.add(up)
            if up in hives and any(not _under(p, up) for p in endpoints):
                scope.update(c for c in cells if _under(c, up))
            current = up
    return {
        c: True if c == "/" or c not in scope else (c in endpoints and parents_active(c))
        for c in cells
    }


def _random_tree(rng: random.Random) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    nodes = ["/"]
    for _ in range(rng.randint(1, 24)):
        nodes.append(f"{rng.choice(nodes).rstrip('/')}/{rng.choice('abc')}{rng.choice(['', 'x'])}")
    nodes = sorted(set(nodes))
    hives = [n for n in nodes if n == "/" or rng.random() < 0.4]
    cells = [n for n in nodes if n not in hives]
    ends = [*nodes, "/colony/graph", "/gone", "/a/gone"]
    edges = [(rng.choice(ends), rng.choice(ends)) for _ in range(rng.randint(0, 8))]
    return cells, hives, edges


def test_activity_follows_the_connectivity_rule_as_written() -> None:
    rng = random.Random(7)
    inactive = 0
    for _ in range(2000):
        cells, hives, edges = _random_tree(rng)
        expected = _activity_as_written(cells, set(hives), edges)
        assert active_cells(cells, hives, edges) == expected, (cells, hives, edges)
        inactive += sum(not active for active in expected.values())
    assert inactive > 1000  # the trees exercise both verdicts


def _wide_tree(cells: int) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """``/gN/hN/cN``: hives of 20 cells chained by edges, every hive left through ``..``."""
    paths: list[str] = []
    hives = ["/"]
    edges: list[tuple[str, str]] = [("/", "/g0")]
    for leaf in range(cells // 20):
        group, hive_path = f"/g{leaf // 25}", f"/g{leaf // 25}/h{leaf}"
        if leaf % 25 == 0:
            hives.append(group)
        hives.append(hive_path)
        names = [f"{hive_path}/c{i}" for i in range(20)]
        paths += names
        edges += [(hive_path, names[0]), (names[-2], group), *itertools.pairwise(names[:-1])]
    return paths, hives, edges


def test_activity_costs_the_same_per_cell_in_a_tree_ten_times_larger() -> None:
    def per_cell(size: int) -> Callable[[], float]:
        cells, hives, edges = _wide_tree(size)
        assert len(edges) >= size * 0.95

        def run() -> float:
            with _timer() as elapsed:
                result = active_cells(cells, hives, edges)
                took = elapsed()
            assert len(result) == size
            assert not all(result.values())
            return took / size

        return run

    small = _best_of(5, per_cell(2_000))
    large = _best_of(2, per_cell(20_000))
    assert large / small < SLACK, (small, large)


# -- the loader -------------------------------------------------------------------------------


def test_a_hive_whose_every_edge_names_a_missing_cell_loads_in_time_linear_in_its_edges(
    make_tree: TreeFactory,
) -> None:
    def per_edge(edges: int) -> Callable[[], float]:
        files = {
            "main/config.json": hive(
                *({"from": ".", "to": "/sink"} for _ in range(edges)),
                *({"from": ".", "to": f"./nowhere{i}"} for i in range(edges)),
            )
        }
        tree = make_tree(files)

        def run() -> float:
            with _timer() as elapsed:
                result = load_tree(tree, cell_types=())
                took = elapsed()
            codes = {d.code for d in result.diagnostics}
            assert len(result.diagnostics) == 2 * edges
            assert codes == {"dangling_endpoint"}
            return took / edges

        return run

    small = _best_of(3, per_edge(100))
    large = _best_of(2, per_edge(1_000))
    assert large / small < SLACK, (small, large)


# -- a mailbox holding 100,000 messages -------------------------------------------------------


class _Gated:
    """Takes each message once its gate is open; says when it has taken ``expect``."""

    def __init__(self, expect: int) -> None:
        self.expect = expect
        self.taken = 0
        self.gate = asyncio.Event()
        self.done = asyncio.Event()

    def cell_type(self) -> CellType:
        return CellType("gated", CellClass.STATEFUL, self._make)

    def _make(self, spec: CellSpec) -> _Gated:
        return self

    async def handle(self, message: Envelope) -> None:
        await self.gate.wait()
        self.taken += 1
        if self.taken == self.expect:
            self.done.set()


BODY = {"messages": [{"origin": "user", "type": "text", "text": "ping"}]}
ROUTED = 1_000


def _gated_tree(make_tree: TreeFactory) -> Path:
    return make_tree(
        {"main/config.json": hive({"from": ".", "to": "./q"}), "main/q/config.json": cell("gated")}
    )


async def _queue_costs(tree: Path, queued: int) -> tuple[float, float]:
    """Seconds per message to route one more into /q's mailbox once it holds ``queued``, and
    to drain it all."""
    gated = _Gated(queued + ROUTED)
    harness = ColonyHarness(
        tree,
        cell_types={"gated": gated.cell_type()},
        colony={"delivery": "at_most_once", "mailbox_default_capacity": queued + ROUTED},
        log_messages=False,
        log_level="info",
    )
    async with harness as colony:
        runner = colony.colony.runners["/q"]
        for _ in range(queued):  # what a routing decision's delivery does
            await colony.colony.deliver(Delivery("/q", source_message("/q", BODY), "/"))
        # This thread's CPU, not the wall clock (all of it runs here): a busy machine, the rest
        # of the suite beside it, must not make one size look slower than the other.
        with _timer(time.thread_time) as elapsed:
            for _ in range(ROUTED):
                await colony.colony.route("/", source_message("/q", BODY))
            routed = elapsed() / ROUTED
        assert runner.mailbox.qsize() >= queued + ROUTED - 1  # one may be in handle(), gated
        with _timer(time.thread_time) as elapsed:
            gated.gate.set()
            await gated.done.wait()
            drained = elapsed() / (queued + ROUTED)
    return routed, drained


async def test_a_mailbox_holding_100000_messages_routes_and_drains_at_the_cost_of_1000(
    make_tree: TreeFactory,
) -> None:
    tree = _gated_tree(make_tree)
    small = [await _queue_costs(tree, 1_000) for _ in range(3)]
    large = await _queue_costs(tree, 100_000)
    routed = min(r for r, _ in small)
    drained = min(d for _, d in small)
    assert large[0] / routed < SLACK, (routed, large[0])
    assert large[1] / drained < SLACK, (drained, large[1])


async def test_a_cell_draining_a_backlog_lets_the_rest_of_the_colony_run(
    make_tree: TreeFactory,
) -> None:
    tree = make_tree(
        {
            "main/config.json": hive({"from": ".", "to": "./q"}, {"from": "./other", "to": "./q"}),
            "main/q/config.json": cell("gated"),
            "main/other/config.json": cell("open"),
        }
    )
    backlog, other = _Gated(20_000), _Gated(1)
    other.gate.set()
    types = {
        "gated": backlog.cell_type(),
        "open": CellType("open", CellClass.STATEFUL, lambda spec: other),
    }
    colony_json = {"delivery": "at_most_once", "mailbox_default_capacity": 20_000}
    async with ColonyHarness(
        tree, cell_types=types, colony=colony_json, log_level="info"
    ) as colony:
        for _ in range(20_000):
            await colony.colony.deliver(Delivery("/q", source_message("/q", BODY), "/"))
        backlog.gate.set()
        await asyncio.sleep(0)  # the drain has begun
        await colony.colony.route("/", source_message("/other", BODY))
        await other.done.wait()
        assert backlog.taken < 1_000  # /other was served long before the backlog was gone
        await backlog.done.wait()


# -- the journal ------------------------------------------------------------------------------


def _journal(db: Path, count: int) -> None:
    """``count`` messages for /q, in the rows the writer would have left."""
    rows = []
    for _ in range(count):
        m = source_message("/q", BODY)
        envelope: dict[str, Any] = {
            "id": m.id,
            "trace_id": m.trace_id,
            "parent_message_id": None,
            "correlation_id": None,
            "target": "/q",
            "reply_to": None,
            "ttl": m.ttl,
            "headers": {"context": {}, "hop": {}},
            "created_at": m.created_at,
        }
        rows.append((m.id, "/q", "/", json.dumps(envelope), json.dumps(BODY)))
    conn = sqlite3.connect(db)
    with conn:
        conn.executemany(
            "INSERT INTO journal(id, cell, sender, envelope, body) VALUES (?,?,?,?,?)", rows
        )
    conn.close()


def _read_pages(db: ColonyDb) -> int:
    """Read the journal as boot redelivery does: counted per cell, then a page at a time."""
    snapshot = db.journal()
    read = 0
    for path in snapshot.cells:
        after = 0
        while page := snapshot.page(path, after):
            after = page[-1].seq
            read += len(page)
    return read


async def _redelivery_costs(tree: Path, workdir: Path, count: int) -> tuple[float, float]:
    """Seconds per message to read a journal of ``count`` at boot, and to handle them all."""
    gated = _Gated(count)
    types = {"gated": gated.cell_type()}
    async with ColonyHarness(tree, cell_types=types, workdir=workdir, log_level="info"):
        pass  # the first boot makes colony.db
    db = workdir / "colony" / "colony.db"
    _journal(db, count)
    reader = ColonyDb(db)
    try:
        with _timer() as elapsed:
            assert _read_pages(reader) == count
            read = elapsed() / count
    finally:
        reader.close()
    async with ColonyHarness(tree, cell_types=types, workdir=workdir, log_level="info") as colony:
        assert colony.colony.redelivered == count
        with _timer() as elapsed:
            gated.gate.set()
            await gated.done.wait()
            handled = elapsed() / count
    return read, handled


@pytest.mark.sqlite_only  # a cluster member claims a partition's rows whole
async def test_a_journal_of_50000_messages_is_read_and_redelivered_at_the_cost_of_1000(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    tree = _gated_tree(make_tree)
    small = [await _redelivery_costs(tree, tmp_path / f"small{i}", 1_000) for i in range(3)]
    large = await _redelivery_costs(tree, tmp_path / "large", 50_000)
    read = min(r for r, _ in small)
    handled = min(h for _, h in small)
    assert large[0] / read < SLACK, (read, large[0])
    assert large[1] / handled < SLACK, (handled, large[1])
