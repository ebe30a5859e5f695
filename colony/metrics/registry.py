"""One colony's metrics: its registry, its tap, and the text a scrape answers.

:func:`metrics_of` gives the colony's one :class:`ColonyMetrics` (made on first use, so an
API built twice over one colony does not count twice); it is found through its tap in the
colony's ``events.taps``, so it lives exactly as long as the colony. The composition root
describes what the kernel cannot know before traffic flows: which cells call which LLM
provider, and the sources of families a cell type keeps (:mod:`cells.metrics`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from colony.metrics.collector import ColonyCollector, Snapshot, Source, families
from colony.metrics.tap import HandoffTap, LlmLabels

if TYPE_CHECKING:
    from colony.colony import Colony

CONTENT_TYPE = CONTENT_TYPE_LATEST
"""The media type of what ``generate_latest`` writes (Prometheus' text format)."""


class ColonyMetrics:
    """The registry of one colony, fed by one tap on its hand-offs."""

    def __init__(self, colony: Colony) -> None:
        self.colony = colony
        self.registry = CollectorRegistry(auto_describe=False)
        self.tap = HandoffTap(self._known, {})
        self.tap.owner = self
        self.sources: dict[str, Source] = {}
        self.collector = ColonyCollector(colony, self.tap, self.sources)
        self.registry.register(self.collector)
        colony.events.taps.append(self.tap.observe)

    def _known(self, path: str) -> bool:
        colony = self.colony
        return path in colony.runners or path in colony.hives

    def describe_llm(self, path: str, provider: str, model: str | None) -> None:
        """The LLM cell at ``path`` calls ``provider``, with ``model`` unless a call says."""
        self.tap.describe_llm(path, LlmLabels(provider, model))

    def add_source(self, name: str, source: Source) -> None:
        """Scrape ``source``'s families too, from now on (in place of an earlier ``name``)."""
        self.sources[name] = source

    async def exposition(self) -> bytes:
        """The text a scrape answers: the numbers are copied on the event loop (where they
        change, so none changes mid-read), the families made and written on a worker thread.
        Only this colony's collector is read (the registry holds nothing else)."""
        return await asyncio.to_thread(_text, self.collector.snapshot())


def _text(snap: Snapshot) -> bytes:
    return generate_latest(_Frozen(snap))


class _Frozen(Collector):
    """One snapshot's families, as ``generate_latest`` wants a registry."""

    def __init__(self, snap: Snapshot) -> None:
        self._snap = snap

    def collect(self) -> Iterator[Metric]:
        return families(self._snap)


def metrics_of(colony: Colony) -> ColonyMetrics:
    """``colony``'s metrics, made (and its tap registered) on first use."""
    for tap in colony.events.taps:
        counting = getattr(tap, "__self__", None)
        if isinstance(counting, HandoffTap) and isinstance(counting.owner, ColonyMetrics):
            return counting.owner
    return ColonyMetrics(colony)
