"""What a scrape of ``GET /metrics`` reads: one custom collector over the colony's own counters.

Nothing here runs between scrapes. Each scrape walks the runners once (mailbox depth,
deliveries, busy handlers, states), reads the writer's tallies and totals, and turns the
tap's plain integers (:mod:`colony.metrics.tap`) into families; sources added by the
composition root (a cell type's workers, :mod:`cells.metrics`) follow. A colony of 10,000
cells makes 10,000 series per per-cell family: bounded by the tree, as the labels must be.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from colony.metrics.tap import HandoffTap

if TYPE_CHECKING:
    from colony.colony import Colony

Source = Callable[[], Iterable[Metric]]
"""More families, made at scrape (registered by the composition root)."""

MS = 0.001


class ColonyCollector(Collector):
    """The families of one colony (see the module docstring and docs/metrics.md)."""

    def __init__(self, colony: Colony, tap: HandoffTap, sources: Mapping[str, Source]) -> None:
        self.colony = colony
        self.tap = tap
        self.sources = sources
        """Read at every scrape: a source added later is scraped from then on."""

    def collect(self) -> Iterator[Metric]:
        yield from self._routing()
        yield from self._cells()
        yield from self._handling()
        yield from self._journal()
        yield from self._llm()
        for source in list(self.sources.values()):
            yield from source()

    def _routing(self) -> Iterator[Metric]:
        colony = self.colony
        yield CounterMetricFamily(
            "colony_routing_decisions",
            "Routing decisions taken (each costs a message one TTL unit).",
            value=colony.decisions,
        )
        letters = CounterMetricFamily(
            "colony_dead_letters",
            "Dead letters, by code and by the cell or hive where the message died "
            '(its target, else its sender; "" when neither is in the tree).',
            labels=["code", "cell"],
        )
        for (code, cell), n in sorted(self.tap.letters.items()):
            letters.add_metric([code, cell], n)
        yield letters
        yield GaugeMetricFamily(
            "colony_in_flight_messages",
            "Messages queued, being handled or being routed anywhere in the colony.",
            value=colony.in_flight.count,
        )
        yield GaugeMetricFamily(
            "colony_queued_bytes",
            "Bytes held by (or waiting to enter) every mailbox, in memory.",
            value=colony.queued.value,
        )
        yield GaugeMetricFamily(
            "colony_spilled_bytes",
            "Bytes of the messages that overflowed full mailboxes into the journal.",
            value=colony.spilled.value,
        )

    def _cells(self) -> Iterator[Metric]:
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
        states: dict[str, int] = {}
        for path, runner in self.colony.runners.items():
            mailbox = runner.mailbox
            stats = mailbox.statistics()
            deliveries.add_metric([path], stats.delivered)
            depth.add_metric([path], stats.queued)
            overflow.add_metric([path], mailbox.overflowing)
            capacity.add_metric([path], stats.capacity)
            busy.add_metric([path], runner.busy)
            restarts.add_metric([path], runner.restarts)
            state = runner.state.value
            states[state] = states.get(state, 0) + 1
        yield from (deliveries, depth, overflow, capacity, busy, restarts)
        waiting = GaugeMetricFamily(
            "colony_mailbox_waiting_senders",
            "Senders from outside the colony waiting for room in each full mailbox now "
            "(at-most-once delivery's backpressure on ingress).",
            labels=["cell"],
        )
        waits: dict[str, int] = {}
        for targets in self.colony.waits.edges().values():
            for target in targets:
                waits[target] = waits.get(target, 0) + 1
        for target, n in sorted(waits.items()):
            waiting.add_metric([target], n)
        yield waiting
        cells = GaugeMetricFamily(
            "colony_cells",
            "Cells by state (not_yet_spawned, awake, asleep, failed).",
            labels=["state"],
        )
        for state, n in sorted(states.items()):
            cells.add_metric([state], n)
        yield cells

    def _handling(self) -> Iterator[Metric]:
        runners = self.colony.runners
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
        for path, tally in sorted(self.tap.cells.items()):
            runner = runners.get(path)
            kind = runner.type.name if runner is not None else ""
            seconds.add_metric([path, kind], tally.handling.buckets(MS), tally.handling.sum(MS))
            failed = dict(tally.failed)
            handled.add_metric([path, kind, "ok"], tally.handling.count - sum(failed.values()))
            for outcome, n in sorted(failed.items()):
                handled.add_metric([path, kind, outcome], n)
        yield seconds
        yield handled

    def _journal(self) -> Iterator[Metric]:
        stats = self.colony.db.statistics()
        latency = HistogramMetricFamily(
            "colony_journal_commit_seconds",
            "How long each transaction of the colony's writer took (group commit: one per "
            "batch), from BEGIN to COMMIT.",
        )
        items = HistogramMetricFamily(
            "colony_journal_batch_items",
            "Pieces (hand-offs, cell writes, rows) committed per transaction.",
        )
        if stats.commit_seconds is not None and stats.batch_items is not None:
            latency.add_metric([], stats.commit_seconds.buckets(), stats.commit_seconds.sum())
            items.add_metric([], stats.batch_items.buckets(), stats.batch_items.sum())
            yield latency
            yield items
        yield CounterMetricFamily(
            "colony_journal_rows",
            "Message-log rows and dead letters committed.",
            value=stats.rows_written,
        )
        yield CounterMetricFamily(
            "colony_journal_deliveries",
            "Deliveries made durable (journal rows written, or acknowledged in the same "
            "transaction).",
            value=stats.journalled,
        )
        yield CounterMetricFamily(
            "colony_journal_rejected",
            "Units or rows that could not be stored (dead-lettered unstorable, or reported).",
            value=stats.rejected,
        )
        yield GaugeMetricFamily(
            "colony_journal_kept",
            "Writes waiting for the storage to come back.",
            value=stats.kept,
        )
        yield GaugeMetricFamily(
            "colony_storage_available",
            "1 while the colony's database takes writes, 0 while it refuses them.",
            value=0 if stats.unavailable else 1,
        )

    def _llm(self) -> Iterator[Metric]:
        labels = ["provider", "model"]
        calls = CounterMetricFamily(
            "colony_llm_calls", "LLM calls (answered or failed).", labels=labels
        )
        errors = CounterMetricFamily(
            "colony_llm_errors",
            "LLM calls that failed (the handling did not end ok).",
            labels=labels,
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
        for (provider, model), tally in sorted(self.tap.calls.items()):
            calls.add_metric([provider, model], tally.calls)
            errors.add_metric([provider, model], tally.errors)
            tokens.add_metric([provider, model, "prompt"], tally.prompt)
            tokens.add_metric([provider, model, "completion"], tally.completion)
            latency.add_metric([provider, model], tally.latency.buckets(MS), tally.latency.sum(MS))
        yield from (calls, errors, tokens, latency)
