"""The backpressure watchdog: a wait-cycle among full mailboxes is reported by name.

A delivery into a full mailbox waits (backpressure, never a drop). That is safe until the
waits form a cycle — ``/a`` waits for room in ``/b``'s mailbox while ``/b`` waits for room in
``/a``'s — and nothing in the cycle can take a message any more: the colony would hang with
no log line at all. Every ``watchdog_period_ms`` the watchdog looks at who is waiting on whom;
a cycle that stays for ``watchdog_threshold`` periods *without any of its mailboxes moving*
is a deadlock, reported once as an ERROR naming every cell and mailbox in it, and, under
``watchdog_on_trip: "exit"``, handed to the daemon to stop with a non-zero exit.

A cycle whose mailboxes still move (a stateless cell with a free worker, say) is just load and
is never reported.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

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
        *,
        period_s: float,
        threshold: int,
        log: Logger,
        on_trip: Callable[[str], None] | None = None,
    ) -> None:
        self.graph = graph
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

    async def run(self) -> None:
        state = None
        while True:
            await asyncio.sleep(self.period_s)
            state = self.check(state)
