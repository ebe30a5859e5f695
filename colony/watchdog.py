"""The watchdog: a cell that stops draining its mailbox, and a wait-cycle, reported by name.

A cell's deliveries never wait for room (a full mailbox overflows, :mod:`colony.post`), so
cells cannot deadlock on each other's mailboxes. What can still stand still is a cell itself:
a handler that never returns (its backstop off) while messages pile up for it. Every
``watchdog_stall_ms`` at most, the watchdog looks at every mailbox holding messages; one whose
cell took none in that long is reported once (``mailbox_stalled``, an ERROR naming the cell
and how many wait) and said cleared once it moves. A stall is logged, never fatal: a slow
provider looks the same for a while.

Senders from outside the colony may still wait for room (an ingress under at-most-once
delivery). The watchdog keeps looking at who waits on whom every ``watchdog_period_ms``: a
cycle of waits that stays for ``watchdog_threshold`` periods *without any of its mailboxes
moving* is a deadlock, reported as an ERROR naming every cell in it, and, under
``watchdog_on_trip: "exit"``, handed to the daemon to stop with a non-zero exit. No such
cycle can form among cells any more; the check stays as the last line of defence.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from colony.mailbox import HasMailbox
from colony.observability import Logger

__all__ = ["WaitGraph", "Watchdog", "find_cycle"]


class WaitGraph:
    """Which cell is waiting to deliver into which full mailbox, right now."""

    __slots__ = ("_waits",)

    def __init__(self) -> None:
        self._waits: Counter[tuple[str, str]] = Counter()

    @contextmanager
    def waiting(self, sender: str, target: str) -> Iterator[None]:
        key = (sender, target)
        self._waits[key] += 1
        try:
            yield
        finally:
            self._waits[key] -= 1
            if not self._waits[key]:
                del self._waits[key]

    def edges(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for sender, target in self._waits:
            out.setdefault(sender, set()).add(target)
        return out


def find_cycle(edges: Mapping[str, set[str]]) -> list[str] | None:
    """One cycle of the wait graph, starting at its smallest path (stable across periods)."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                found.append(stack[stack.index(nxt) :])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    if not found:
        return None
    cycle = min(found, key=lambda c: (len(c), c))
    start = cycle.index(min(cycle))
    return cycle[start:] + cycle[:start]


class Watchdog:
    """Polls the wait graph; reports a stuck cycle once, and again only after it cleared."""

    def __init__(
        self,
        graph: WaitGraph,
        progress: Callable[[str], Any],
        busy: Callable[[], Mapping[str, tuple[int, int]]] | None = None,
        *,
        period_s: float,
        threshold: int,
        log: Logger,
        on_trip: Callable[[str], None] | None = None,
        stall_s: float = 0,
    ) -> None:
        self.graph = graph
        self.busy = busy
        """The mailboxes holding messages: path -> (messages taken so far, messages waiting)."""
        self.stall_s = stall_s
        """How long a cell may take nothing from a non-empty mailbox (0: never reported)."""
        self.stalled: dict[str, tuple[int, float]] = {}
        """Cells seen waiting with nothing taken: path -> (taken, since when, monotonic)."""
        self.reported: set[str] = set()
        self.progress = progress
        """A path's mailbox state (anything comparable): unchanged means nothing moved."""
        self.period_s = period_s
        self.threshold = threshold
        self.log = log
        self.on_trip = on_trip
        self.trips: list[list[str]] = []

    def check(self, previous: tuple[list[str], list[Any], int] | None) -> Any:
        """One period: the cycle seen, its mailboxes' state and for how many periods it stood."""
        cycle = find_cycle(self.graph.edges())
        if cycle is None:
            if previous is not None and previous[2] >= self.threshold:
                self.log.info("mailbox_wait_cycle_cleared", cells=previous[0])
            return None
        snapshot = [self.progress(path) for path in cycle]
        if previous is None or previous[0] != cycle or previous[1] != snapshot:
            return (cycle, snapshot, 1)
        periods = previous[2] + 1
        if periods == self.threshold:
            self._trip(cycle)
        return (cycle, snapshot, periods)

    def _trip(self, cycle: list[str]) -> None:
        chain = " -> ".join([*cycle, cycle[0]])
        detail = (
            f"mailbox wait cycle {chain}: each cell waits for room in the next one's full "
            "mailbox and none of them is taking messages; raise cell.mailbox_size on one of "
            "them, or break the loop in the graph"
        )
        self.trips.append(cycle)
        self.log.error(
            "mailbox_wait_cycle",
            cells=cycle,
            periods=self.threshold,
            period_ms=round(self.period_s * 1000),
            detail=detail,
        )
        if self.on_trip is not None:
            self.on_trip(detail)

    def check_stalls(self, now: float) -> None:
        """Report each cell that took nothing from a non-empty mailbox for ``stall_s``, once;
        say it cleared once it takes a message or its mailbox empties."""
        if self.busy is None or not self.stall_s:
            return
        busy = self.busy()
        seen: dict[str, tuple[int, float]] = {}
        for path, (taken, waiting) in busy.items():
            before = self.stalled.get(path)
            since = before[1] if before is not None and before[0] == taken else now
            seen[path] = (taken, since)
            if now - since >= self.stall_s and path not in self.reported:
                self.reported.add(path)
                self.log.error(
                    "mailbox_stalled",
                    cell=path,
                    waiting=waiting,
                    stalled_ms=round((now - since) * 1000),
                    detail=f"{path} has {waiting} message(s) waiting and took none in "
                    f"{round(now - since)} s: its handler may be stuck (a backstop turned "
                    "off?) or far slower than what is sent to it",
                )
        for path in [p for p in self.reported if seen.get(p, (0, now))[1] == now]:
            self.reported.discard(path)
            self.log.info("mailbox_stall_cleared", cell=path)
        self.stalled = seen

    async def run(self) -> None:
        state = None
        loop = asyncio.get_running_loop()
        every = max(self.period_s, self.stall_s / 4)
        next_scan = loop.time() + every
        while True:
            await asyncio.sleep(self.period_s)
            state = self.check(state)
            now = loop.time()
            if now >= next_scan:
                self.check_stalls(now)
                next_scan = now + every


def mailbox_probes(
    cells: Mapping[str, HasMailbox],
) -> tuple[Callable[[str], tuple[int, int]], Callable[[], dict[str, tuple[int, int]]]]:
    """What the watchdog reads of ``cells``' mailboxes: one path's ``(delivered, queued)``,
    and every non-empty mailbox's ``(taken, waiting)``."""

    def progress(path: str) -> tuple[int, int]:
        cell = cells.get(path)
        if cell is None:
            return (0, 0)
        stats = cell.mailbox.statistics()
        return (stats.delivered, stats.queued)

    def busy() -> dict[str, tuple[int, int]]:
        out: dict[str, tuple[int, int]] = {}
        for path, cell in cells.items():
            if waiting := cell.mailbox.qsize():
                out[path] = (cell.mailbox.statistics().delivered - waiting, waiting)
        return out

    return progress, busy
