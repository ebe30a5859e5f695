"""The running colony: it owns the cells and carries out what routing decides.

One hand-off goes one way: :mod:`colony.routing` turns a message (an ingress, or how a cell's
handling ended) into :class:`colony.effects.Effects`; :meth:`Colony._apply` answers its
``/colony/*`` reads, has :class:`colony.journal.Journal` commit it with the handled message's
removal from the journal, then carries it out: mailbox puts (:mod:`colony.post`), egress, log
lines, counters, live events. A runner reports outcomes to :meth:`Colony.settle`. Ingress
admission (:meth:`Colony.admission`) lives here too; boot and stop: :mod:`colony.boot`.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from colony import reads
from colony.admission import Refusal, admit
from colony.cell import CellSpec, CellType
from colony.config.models import ColonyConfig
from colony.edges import EdgeTable
from colony.effects import Effects
from colony.envelope import Envelope
from colony.events import Events
from colony.ids import uuid7
from colony.inflight import InFlightMessages
from colony.journal import Ack, Journal
from colony.mailbox import ByteGauge, MemoryMailbox
from colony.observability import Logger
from colony.outcome import Outcome
from colony.overflow import JournalOverflow, MemoryOverflow
from colony.persist import health
from colony.persist.backend import Backend
from colony.persist.escape import storable_text
from colony.persist.records import RegistryRow
from colony.persist.writer import UnitFenced
from colony.post import Post
from colony.routing import READ_REPLY_SENDER, RoutingTable, route, route_outcome
from colony.runner import CellRunner, Spawn
from colony.watchdog import WaitGraph, Watchdog, mailbox_probes

if TYPE_CHECKING:
    from colony.cluster.member import Member


class Colony:
    """One running colony. :func:`colony.boot.open_colony` builds, starts and stops it."""

    def __init__(
        self,
        *,
        root: Path,
        config: ColonyConfig,
        edges: EdgeTable,
        hives: frozenset[str],
        db: Backend,
        log: Logger,
        log_messages: bool = True,
        cluster: Member | None = None,
    ) -> None:
        self.root = root
        self.cluster = cluster
        """This node's share of a cluster (``colony.json`` ``cluster``), None alone."""
        self.config = config
        self.db = db
        self.log = log
        self.runners: dict[str, CellRunner] = {}
        self.table = RoutingTable(
            self.runners,
            hives,
            edges,
            default_ttl=config.message_default_ttl,
            ttl_notice=config.ttl_notice,
            record=log_messages,
        )
        self.journal = Journal(db, durable=config.delivery == "at_least_once", record=log_messages)
        self.in_flight = InFlightMessages()
        self.decisions = 0
        """Routing decisions taken so far (each one costs a message one TTL unit)."""
        self.dead_lettered = 0
        self.events = Events()
        """Who watches live (``GET /colony/events``), and the rates ``/colony/stats`` shows."""
        self._egress: Callable[[Envelope], Awaitable[None]] | None = None
        self.on_fatal: Callable[[str], None] | None = None
        """Set by the daemon: a watchdog trip under ``watchdog_on_trip: "exit"`` calls it."""
        self.waits = WaitGraph()
        """Deliveries waiting for room in a full mailbox, for the watchdog."""
        self.redelivered = 0
        """Messages taken back from the journal at boot."""
        overflow = "journal" if self.journal.durable else "overflow in memory"
        self.post = Post(self.runners, self.in_flight, self.waits, log, overflow_name=overflow)
        self.deliver = self.post.deliver
        self.queued = ByteGauge()
        """Bytes held by (or waiting to enter) every mailbox, in memory."""
        self.spilled = ByteGauge()
        """Bytes of the messages that overflowed into the journal (kept on disk by id)."""
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def hives(self) -> frozenset[str]:
        return self.table.hives

    @property
    def edges(self) -> EdgeTable:
        return self.table.edges

    @property
    def at_least_once(self) -> bool:
        """Mailboxes are journalled in ``colony.db``."""
        return self.journal.durable

    @property
    def egress(self) -> Callable[[Envelope], Awaitable[None]] | None:
        """Direct mode: where a message goes that finds no out-edge at the root hive."""
        return self._egress

    @egress.setter
    def egress(self, send: Callable[[Envelope], Awaitable[None]] | None) -> None:
        self._egress = send
        self.table.egress = send is not None

    # -- wiring -------------------------------------------------------------------------------

    def add(
        self,
        spec: CellSpec,
        cell_type: CellType,
        active: bool,
        registry: Mapping[str, RegistryRow],
    ) -> None:
        """Wire one cell: its mailbox, its runner, its registry row (ids kept across boots; a
        cell that failed in an earlier run stays failed)."""
        row = registry.get(storable_text(spec.path))  # as the registry stores the path
        capacity = spec.cell.mailbox_size or self.config.mailbox_default_capacity
        overflow = (
            JournalOverflow(self.db.path, spec.path, self.spilled)  # type: ignore[attr-defined]
            if self.journal.durable and self.cluster is None  # (a cluster's: in memory)
            else MemoryOverflow(self.queued)
        )
        limit = self.config.mailbox_max_bytes or None
        mailbox = MemoryMailbox(capacity, max_bytes=limit, gauge=self.queued, overflow=overflow)
        ahead = cell_type.runs_ahead is not None and cell_type.runs_ahead(spec)
        if ahead and self.cluster is None:  # a cluster's units wait for their fence
            self.journal.ahead[spec.path] = mailbox
        runner = CellRunner(
            self,
            spec,
            cell_type,
            mailbox,
            config=self.config,
            log=self.log,
            in_flight=self.in_flight,
            cell_id=row.cell_id if row is not None else uuid7(),
            active=active,
        )
        runner.stale = None if self.cluster is None else self.cluster.lost
        if row is not None and row.status == "failed":
            runner.fail_at_boot()
        self.runners[spec.path] = runner
        self.status_changed(runner)

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self, spawn: Spawn) -> None:
        """Take back what the journal holds, then start every cell, the storage watch and the
        watchdog as tasks of ``spawn``'s group."""
        self.db.listen(health.reporter(self.log))
        # A cluster member takes its partitions' rows as it gains them (colony.cluster.member).
        alone = self.cluster is None
        per_cell = await self.journal.redeliver(self.runners, self.log) if alone else {}
        self.redelivered = sum(per_cell.values())
        self.in_flight.add(self.redelivered)
        for runner in self.runners.values():
            runner.start(spawn)
        self.watchdog = Watchdog(
            self.waits,
            *mailbox_probes(self.runners),
            period_s=self.config.watchdog_period_ms / 1000,
            threshold=self.config.watchdog_threshold,
            log=self.log,
            on_trip=self._trip if self.config.watchdog_on_trip == "exit" else None,
            stall_s=self.config.watchdog_stall_ms / 1000,
        )
        self._tasks = [
            spawn(health.watch_file(self.db, self.log), "colony.db watch"),
            spawn(self.watchdog.run(), "watchdog"),
        ]
        self.log.info(
            "colony_started",
            root=str(self.root),
            cells=len(self.runners),
            hives=len(self.hives),
            edges=len(self.edges),
        )

    async def stop(self) -> None:
        """Stop every cell and commit what the writer holds. Queued messages stay in the
        journal for the next boot (at-least-once) or are dropped with a log line naming how
        many (at-most-once)."""
        self.events.close()
        queued = sum(r.mailbox.qsize() for r in self.runners.values())
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for runner in self.runners.values():
            await runner.stop()
        await self.db.flush()
        health.shutdown_report(self.log, self.db.statistics(), queued, self.at_least_once)
        self.log.info("colony_stopped", decisions=self.decisions, dead_letters=self.dead_lettered)

    def _trip(self, detail: str) -> None:
        if self.on_fatal is not None:
            self.on_fatal(detail)

    async def wait_idle(self) -> None:
        """Return once no message is queued, being handled or being routed anywhere."""
        await self.in_flight.wait_idle()

    # -- ingress ------------------------------------------------------------------------------

    def admission(self, nbytes: int = 0) -> Refusal | None:
        """None when an ingress of about ``nbytes`` may be accepted now, else why not (503
        while the storage cannot be written, 429 past ``queued_max_bytes``: see
        :mod:`colony.admission`). Costs a few attribute reads: ask it for every ingress."""
        queued = self.queued.value + self.spilled.value
        return admit(self.db.unavailable(), queued, self.config.queued_max_bytes, nbytes)

    async def send(self, message: Envelope, sender: str = "/", *, key: str | None = None) -> bool:
        """Route a message born outside the colony (HTTP, stdio, a test). Returns once the
        message is journalled (at-least-once), so the caller may acknowledge it; False when
        ``key`` was taken in before and the message was dropped as a duplicate.

        Raises :class:`colony.persist.db.StorageUnavailable` when ``colony.db`` cannot be
        written now (answer 503 and let the client retry) and
        :class:`colony.persist.db.UnitRejected` when this message cannot be stored (it was
        dead-lettered ``unstorable``): in both cases nothing was delivered."""
        self.in_flight.add()
        try:
            if self.cluster is not None:
                self.cluster.assign(message)
            fx = route(self.table, sender, message)
            return await self._apply(
                fx, key=key, message=message, fail_fast=True, wait=not self.at_least_once
            )
        finally:
            self.in_flight.done()

    async def route(self, sender: str, message: Envelope) -> None:
        """Route one message as if ``sender`` had sent it, and carry it out."""
        self.in_flight.add()
        try:
            fx = route(self.table, sender, message)
            await self._apply(fx, message=message, wait=not self.at_least_once)
        finally:
            self.in_flight.done()

    # -- what runners report --------------------------------------------------------------------

    async def settle(
        self,
        runner: CellRunner,
        message: Envelope | None,
        outcome: Outcome,
        *,
        key: str | None = None,
        started_ms: int | None = None,
    ) -> None:
        """Carry out how ``runner``'s handling of ``message`` (begun at ``started_ms``) ended,
        committed with its removal from the journal and its ``handling`` row (``message``
        None: a long-running cell's own emissions, committed before this returns)."""
        cluster = self.cluster
        if cluster is not None and message is not None and not cluster.holds(message):
            cluster.dropped(runner.path, message)  # another node owns it now
            return
        try:
            fx = route_outcome(self.table, runner.emitter, message, outcome)
        except Exception as exc:  # a bug in routing: say so, keep the cell alive
            self.log.error(
                "route_failed",
                cell=runner.path,
                message_id=None if message is None else message.id,
                trace_id=None if message is None else message.trace_id,
                error=f"{type(exc).__name__}: {exc}",
                traceback="".join(traceback.format_exception(exc)).rstrip(),
            )
            fx = Effects()
        if message is not None:
            fx.handled = runner.account(message, outcome, started_ms)
        if cluster is not None and message is None:  # new conversations: each its partition
            for delivery in fx.deliveries:
                cluster.assign(delivery.message)
        ack = None if message is None else Ack(message.id, runner.path)
        # A cell's own emissions (no handled message) may wait for room, as an ingress does:
        # the cell's I/O loop waits, never its handler, so no cycle can close on it.
        wait = ack is None and not self.at_least_once
        await self._apply(fx, ack=ack, key=key, message=message, wait=wait)

    def status_changed(self, runner: CellRunner) -> None:
        """Record the runner's status (active, inactive or failed) in the registry."""
        status = "failed" if runner.state.value == "failed" else None
        status = status or ("active" if runner.active else "inactive")
        self.db.set_registry(runner.path, runner.cell_id, runner.type.name, status)

    # -- carrying effects out -------------------------------------------------------------------

    async def _apply(
        self,
        fx: Effects,
        *,
        ack: Ack | None = None,
        key: str | None = None,
        message: Envelope | None = None,
        fail_fast: bool = False,
        wait: bool = False,
    ) -> bool:
        """Answer the reads, commit, then deliver (``wait``: for room, else overflowing),
        egress, log and count; False when the hand-off was dropped (its ``key`` taken in
        before, or it could not be stored)."""
        while fx.reads:  # reading is I/O, so routing left it here; the reply joins this unit
            asked, fx.reads = fx.reads, []
            for read in asked:
                reply = await reads.answer(self, read.endpoint, read.message)
                fx.extend(route(self.table, READ_REPLY_SENDER, reply))
        try:
            result = await self.journal.commit(
                fx, ack=ack, key=key, message=message, fail_fast=fail_fast
            )
        except UnitFenced:  # (the writer logged it) the partition moved to another node
            return False
        if result == "duplicate":
            self.log.info("ingress_duplicate", key=key, detail="this key was taken in before")
        if result != "applied":
            return False
        for delivery in fx.deliveries:
            if delivery.message.epoch is not None:  # None: another node's, to claim
                await self.post.deliver(delivery, wait=wait)
        if fx.egress:
            assert self._egress is not None  # routing egresses only when it is set
            for leaving in fx.egress:
                await self._egress(leaving)
        self.decisions += fx.decisions
        self.dead_lettered += len(fx.letters)
        self.events.applied(fx)
        log = self.log
        for note in fx.notes:
            getattr(log, note.level)(note.event, **note.fields)
        return True
