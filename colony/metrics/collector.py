"""What a scrape of ``GET /metrics`` reads: the colony's own counters, in two steps.

:func:`snapshot` runs on the event loop, where the counters change, so none changes while it
reads: it copies numbers into tuples (per cell a few attribute reads), nothing more.
:func:`families` turns a snapshot into Prometheus families, and runs on a worker thread with
the writing of the text: a colony of 10,000 cells has 10,000 series per per-cell family, and
making those objects must not hold the loop. Nothing here runs between scrapes.

Sources added by the composition root (a cell type's workers, :mod:`cells.metrics`) are
called at the snapshot and return their families.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from colony.metrics.tally import Tally
from colony.metrics.tap import HandoffTap

if TYPE_CHECKING:
    from colony.colony import Colony

Source = Callable[[], Iterable[Metric]]
"""More families, made at scrape (registered by the composition root)."""

MS = 0.001


@dataclass
class Snapshot:
    """One scrape's numbers, copied off the live colony."""

    decisions: int = 0
    in_flight: int = 0
    queued_bytes: int = 0
    spilled_bytes: int = 0
    letters: list[tuple[str, str, int]] = field(default_factory=list)
    cells: list[tuple[str, int, int, int, int, int, int]] = field(default_factory=list)
    """(path, delivered, queued, overflowing, capacity, busy, restarts) per cell."""
    states: dict[str, int] = field(default_factory=dict)
    waiting: dict[str, int] = field(default_factory=dict)
    handling: list[tuple[str, str, Tally, dict[str, int], Tally]] = field(default_factory=list)
    """(path, type, durations in ms, failed handlings by outcome, mailbox waits in ms) per
    cell seen handling."""
    rows: int = 0
    journalled: int = 0
    rejected: int = 0
    kept: int = 0
    available: bool = True
    commit_seconds: Tally | None = None
    batch_items: Tally | None = None
    llm: list[tuple[str, str, int, int, int, int, Tally]] = field(default_factory=list)
    """(provider, model, calls, errors, prompt tokens, completion tokens, latency in ms)."""
    extra: list[Metric] = field(default_factory=list)


def snapshot(colony: Colony, tap: HandoffTap, sources: Iterable[Source]) -> Snapshot:
    """Copy what a scrape reports (on the event loop: see the module docstring)."""
    snap = Snapshot(
        decisions=colony.decisions,
        in_flight=colony.in_flight.count,
        queued_bytes=colony.queued.value,
        spilled_bytes=colony.spilled.value,
        letters=[(code, cell, n) for (code, cell), n in tap.letters.items()],
    )
    states = snap.states
    cells = snap.cells
    for path, runner in colony.runners.items():
        mailbox = runner.mailbox
        stats = mailbox.statistics()
        cells.append(
            (
                path,
                stats.delivered,
                stats.queued,
                mailbox.overflowing,
                stats.capacity,
                runner.busy,
                runner.restarts,
            )
        )
        state = runner.state.value
        states[state] = states.get(state, 0) + 1
    for targets in colony.waits.edges().values():
        for target in targets:
            snap.waiting[target] = snap.waiting.get(target, 0) + 1
    runners = colony.runners
    for path, tally in tap.cells.items():
        known = runners.get(path)
        kind = known.type.name if known is not None else ""
        snap.handling.append(
            (path, kind, tally.handling.copy(), dict(tally.failed), tally.wait.copy())
        )
    db = colony.db.statistics()
    snap.rows, snap.journalled, snap.rejected = db.rows_written, db.journalled, db.rejected
    snap.kept, snap.available = db.kept, db.unavailable is None
    if db.commit_seconds is not None and db.batch_items is not None:
        snap.commit_seconds, snap.batch_items = db.commit_seconds.copy(), db.batch_items.copy()
    for (provider, model), call in tap.calls.items():
        snap.llm.append(
            (
                provider,
                model,
                call.calls,
                call.errors,
                call.prompt,
                call.completion,
                call.latency.copy(),
            )
        )
    for source in sources:
        snap.extra.extend(source())
    return snap


def families(snap: Snapshot) -> Iterator[Metric]:
    """The families of a snapshot (see docs/metrics.md for each)."""
    yield from _routing(snap)
    yield from _cells(snap)
    yield from _handling(snap)
    yield from _journal(snap)
    yield from _llm(snap)
    yield from snap.extra


class ColonyCollector(Collector):
    """The families of one colony, for a :class:`prometheus_client.CollectorRegistry`."""

    def __init__(self, colony: Colony, tap: HandoffTap, sources: Mapping[str, Source]) -> None:
        self.colony = colony
        self.tap = tap
        self.sources = sources
        """Read at every scrape: a source added later is scraped from then on."""

    def snapshot(self) -> Snapshot:
        return snapshot(self.colony, self.tap, list(self.sources.values()))

    def collect(self) -> Iterator[Metric]:
        return families(self.snapshot())


def _routing(snap: Snapshot) -> Iterator[Metric]:
    yield CounterMetricFamily(
        "colony_routing_decisions",
        "Routing decisions taken (each costs a message one TTL unit).",
        value=snap.decisions,
    )
    letters = CounterMetricFamily(
        "colony_dead_letters",
        "Dead letters, by code and by the cell or hive where the message died "
        '(its target, else its sender; "" when neither is in the tree).',
        labels=["code", "cell"],
    )
    for code, cell, n in sorted(snap.letters):
        letters.add_metric([code, cell], n)
    yield letters
    yield GaugeMetricFamily(
        "colony_in_flight_messages",
        "Messages queued, being handled or being routed anywhere in the colony.",
        value=snap.in_flight,
    )
    yield GaugeMetricFamily(
        "colony_queued_bytes",
        "Bytes held by (or waiting to enter) every mailbox, in memory.",
        value=snap.queued_bytes,
    )
    yield GaugeMetricFamily(
        "colony_spilled_bytes",
        "Bytes of the messages that overflowed full mailboxes into the journal.",
        value=snap.spilled_bytes,
    )


def _cells(snap: Snapshot) -> Iterator[Metric]:
    deliveries = CounterMetricFamily(
        "colony_deliveries",
        "Messages put into each cell's mailbox (journal redelivery at boot included).",
        labels=["cell"],
    )
    depth = GaugeMetricFamily(
        "colony_mailbox_messages",
        "Messages waiting in each cell's mailbox (its overflow and journal backlog too).",
        labels=["cell"],
    )
    overflow = GaugeMetricFamily(
        "colony_mailbox_overflow_messages",
        "Messages of each mailbox kept in its overflow because the mailbox was full.",
        labels=["cell"],
    )
    capacity = GaugeMetricFamily(
        "colony_mailbox_capacity", "Each mailbox's bound, in messages.", labels=["cell"]
    )
    busy = GaugeMetricFamily(
        "colony_cell_busy", "Messages each cell is handling now.", labels=["cell"]
    )
    restarts = GaugeMetricFamily(
        "colony_cell_restarts",
        "Restarts of each cell since boot or its last revive (it fails past its limit).",
        labels=["cell"],
    )
    for path, delivered, queued, overflowing, bound, handling, restarted in snap.cells:
        labels = [path]
        deliveries.add_metric(labels, delivered)
        depth.add_metric(labels, queued)
        overflow.add_metric(labels, overflowing)
        capacity.add_metric(labels, bound)
        busy.add_metric(labels, handling)
        restarts.add_metric(labels, restarted)
    yield from (deliveries, depth, overflow, capacity, busy, restarts)
    waiting = GaugeMetricFamily(
        "colony_mailbox_waiting_senders",
        "Senders from outside the colony waiting for room in each full mailbox now "
        "(at-most-once delivery's backpressure on ingress).",
        labels=["cell"],
    )
    for target, n in sorted(snap.waiting.items()):
        waiting.add_metric([target], n)
    yield waiting
    cells = GaugeMetricFamily(
        "colony_cells",
        "Cells by state (not_yet_spawned, awake, asleep, failed).",
        labels=["state"],
    )
    for state, n in sorted(snap.states.items()):
        cells.add_metric([state], n)
    yield cells


def _handling(snap: Snapshot) -> Iterator[Metric]:
    seconds = HistogramMetricFamily(
        "colony_cell_handling_seconds",
        "How long each cell's handling of one message took, whatever its outcome.",
        labels=["cell", "type"],
    )
    handled = CounterMetricFamily(
        "colony_cell_handled",
        "Handlings each cell finished, by outcome (ok, error, crashed, timed_out, refused).",
        labels=["cell", "type", "outcome"],
    )
    waited = HistogramMetricFamily(
        "colony_mailbox_wait_seconds",
        "How long each cell's messages waited from their making to the start of their "
        "handling (in the mailbox, its backlog, or across a restart).",
        labels=["cell", "type"],
    )
    for path, kind, tally, failed, wait in sorted(snap.handling, key=lambda h: h[0]):
        seconds.add_metric([path, kind], tally.buckets(MS), tally.sum(MS))
        waited.add_metric([path, kind], wait.buckets(MS), wait.sum(MS))
        handled.add_metric([path, kind, "ok"], tally.count - sum(failed.values()))
        for outcome, n in sorted(failed.items()):
            handled.add_metric([path, kind, outcome], n)
    yield seconds
    yield waited
    yield handled


def _journal(snap: Snapshot) -> Iterator[Metric]:
    if snap.commit_seconds is not None and snap.batch_items is not None:
        latency = HistogramMetricFamily(
            "colony_journal_commit_seconds",
            "How long each transaction of the colony's writer took (group commit: one per "
            "batch), from BEGIN to COMMIT.",
        )
        latency.add_metric([], snap.commit_seconds.buckets(), snap.commit_seconds.sum())
        items = HistogramMetricFamily(
            "colony_journal_batch_items",
            "Pieces (hand-offs, cell writes, rows) committed per transaction.",
        )
        items.add_metric([], snap.batch_items.buckets(), snap.batch_items.sum())
        yield latency
        yield items
    yield CounterMetricFamily(
        "colony_journal_rows", "Message-log rows and dead letters committed.", value=snap.rows
    )
    yield CounterMetricFamily(
        "colony_journal_deliveries",
        "Deliveries made durable (journal rows written, or acknowledged in the same transaction).",
        value=snap.journalled,
    )
    yield CounterMetricFamily(
        "colony_journal_rejected",
        "Units or rows that could not be stored (dead-lettered unstorable, or reported).",
        value=snap.rejected,
    )
    yield GaugeMetricFamily(
        "colony_journal_kept", "Writes waiting for the storage to come back.", value=snap.kept
    )
    yield GaugeMetricFamily(
        "colony_storage_available",
        "1 while the colony's database takes writes, 0 while it refuses them.",
        value=1 if snap.available else 0,
    )


def _llm(snap: Snapshot) -> Iterator[Metric]:
    labels = ["provider", "model"]
    calls = CounterMetricFamily(
        "colony_llm_calls", "LLM calls (answered or failed).", labels=labels
    )
    errors = CounterMetricFamily(
        "colony_llm_errors", "LLM calls that failed (the handling did not end ok).", labels=labels
    )
    tokens = CounterMetricFamily(
        "colony_llm_tokens",
        "Tokens the providers reported, by kind (prompt, completion).",
        labels=[*labels, "kind"],
    )
    latency = HistogramMetricFamily(
        "colony_llm_latency_seconds",
        "How long each answered LLM call took (as the cell measured it).",
        labels=labels,
    )
    for provider, model, n, failed, prompt, completion, took in sorted(
        snap.llm, key=lambda c: c[:2]
    ):
        calls.add_metric([provider, model], n)
        errors.add_metric([provider, model], failed)
        tokens.add_metric([provider, model, "prompt"], prompt)
        tokens.add_metric([provider, model, "completion"], completion)
        latency.add_metric([provider, model], took.buckets(MS), took.sum(MS))
    yield from (calls, errors, tokens, latency)
