"""A histogram in plain integers, for counting on the hot path or on another thread.

:meth:`Tally.add` is a bisect and two additions: no lock, no label lookup. The writer thread
adds to its own tallies while a scrape on the event loop reads them; a scrape may then see a
count and a sum one observation apart, which Prometheus tolerates (the next scrape agrees).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence


class Tally:
    """Counts of observations at most each bound (and above the last), and their sum."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        """Observations in each bucket (not cumulative); the last one is above every bound."""
        self.total = 0.0
        """The sum of every observation."""

    def add(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def copy(self) -> Tally:
        """A copy that stops changing (what a scrape formats off the event loop)."""
        copied = Tally.__new__(Tally)
        copied.bounds = self.bounds
        copied.counts = list(self.counts)
        copied.total = self.total
        return copied

    @property
    def count(self) -> int:
        return sum(self.counts)

    def buckets(self, scale: float = 1.0) -> list[tuple[str, float]]:
        """Cumulative ``(le, count)`` pairs as Prometheus wants them, ``+Inf`` last; each bound
        multiplied by ``scale`` (milliseconds counted, seconds exposed: 0.001)."""
        counts = list(self.counts)  # one copy: the writer thread may add meanwhile
        out: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip(self.bounds, counts, strict=False):
            running += n
            out.append((_le(bound * scale), running))
        out.append(("+Inf", running + counts[-1]))
        return out

    def sum(self, scale: float = 1.0) -> float:
        return self.total * scale


def _le(bound: float) -> str:
    # 0.005, not 0.005000000000000001: the bound is a label value and must read the same
    # in every scrape (and as a user wrote it in a query).
    return repr(round(bound, 9))
