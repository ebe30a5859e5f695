"""The running colony: it owns the cells and carries out routing decisions.

Routing happens in the task of whoever produced the message (the ingress, or the cell whose
emission it is), so a cell's emissions are routed in the order it made them and a full mailbox
slows exactly the producers feeding it. Each routing call runs to completion, including the
transits and error replies it causes (a FIFO work list), before the next emission is routed.

Everything with a side effect lives here, around :func:`colony.routing.decide`: mailbox puts,
dead letters and message-log rows (handed to the ``colony.db`` writer thread, never awaited),
and log lines. So does ingress admission (:meth:`Colony.admission`): while ``colony.db``
cannot be written, or more bytes are queued than ``colony.json`` allows, an ingress is refused
rather than accepted and then lost or held in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from colony import reads
from colony.activity import active_cells
from colony.admission import Refusal, admit
from colony.cell import CellSpec, CellType, Emission, Output
from colony.config.loader import ColonyTree
from colony.config.models import CellBlock, ColonyConfig, Contract
from colony.contracts import emits_violation
from colony.dead_letters import DeadLetter, DeadLetterCode
from colony.edges import EdgeTable, Skipped, compile_edge
from colony.envelope import Envelope, Headers, JsonObject, split_content
from colony.errors import ColonyError
from colony.expressions import Engine, default_engine
from colony.gc_pause import gc_paused
from colony.ids import uuid7
from colony.mailbox import ByteGauge, MemoryMailbox
from colony.persist import health
from colony.persist.db import ColonyDb, RegistryRow, Unit, UnitRejected, read_registry
from colony.persist.escape import storable_text
from colony.persist.journal import CellBacklog, JournalSnapshot
from colony.queries import ANSWERING_ENDPOINTS
from colony.routing import (
    Deliver,
    Endpoint,
    Expired,
    Inactive,
    InvalidEndpoint,
    RoutingTable,
    Transit,
    Unresolved,
    cascade_reply,
    decide,
    emission_follow_ups,
    substrate_reply,
    transit_follow_ups,
    ttl_notice,
)
from colony.runner import CellRunner
from colony.ubf import body_problem
from colony.watchdog import WaitGraph, Watchdog

EXTERNAL = "@external"
"""``from_path`` of message-log rows for messages born outside the colony."""

_UNIT: ContextVar[Unit | None] = ContextVar("colony_unit", default=None)
"""The unit the current task routes into (at-least-once delivery only)."""

_UNAWAITED_MAX = 256
"""Commits handed to the writer without waiting, at most, before one is waited for: a cell
draining a backlog must not pile up work that everyone else's commits then queue behind."""

_SAMPLE = 20
"""Redelivered messages named one by one in the boot log line."""


class BootError(ColonyError):
    """The tree loaded but cannot run (dangling endpoint, cell type not available, …)."""

    code = "boot_failed"

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


@dataclass(frozen=True, slots=True)
class ExtraCell:
    """A cell the embedding code adds before boot (the harness's capture cells)."""

    path: str
    cell_type: CellType
    params: Any = None


class Colony:
    """One running colony. Build it with :meth:`from_tree`, then ``await start()``."""

    def __init__(
        self,
        *,
        root: Path,
        config: ColonyConfig,
        edges: EdgeTable,
        hives: frozenset[str],
        db: ColonyDb,
        log: Any,
        log_messages: bool = True,
    ) -> None:
        self.root = root
        self.config = config
        self.edges = edges
        self.hives = hives
        self.db = db
        self.log = log
        self.log_messages = log_messages
        self.runners: dict[str, CellRunner] = {}
        self.table = RoutingTable(self.runners, hives, edges)
        self.decisions = 0
        """Routing decisions taken so far (each one costs a message one TTL unit)."""
        self.dead_lettered = 0
        self.egress: Callable[[Envelope], Awaitable[None]] | None = None
        """Direct mode: where a message goes that finds no out-edge at the root hive."""
        self.on_fatal: Callable[[str], None] | None = None
        """Set by the daemon: a watchdog trip under ``watchdog_on_trip: "exit"`` calls it."""
        self.waits = WaitGraph()
        """Deliveries waiting for room in a full mailbox, for the watchdog."""
        self.at_least_once = config.delivery == "at_least_once"
        """Mailboxes are journalled in ``colony.db`` (see :meth:`unit`)."""
        self.redelivered = 0
        """Messages taken back from the journal at boot."""
        self._unawaited = 0
        """Commits handed over since the last one waited for (see ``_UNAWAITED_MAX``)."""
        self.queued = ByteGauge()
        """Bytes held by (or waiting to enter) every mailbox: what admission bounds."""
        self._storage_watch: asyncio.Task[None] | None = None
        self._pending = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._started = False
        self._watchdog: asyncio.Task[None] | None = None

    # -- building -----------------------------------------------------------------------------

    @classmethod
    @gc_paused()  # everything made here lives as long as the colony
    def from_tree(
        cls,
        tree: ColonyTree,
        cell_types: Mapping[str, CellType],
        *,
        db: ColonyDb,
        log: Any,
        extra: Sequence[ExtraCell] = (),
        engine: Engine | None = None,
        log_messages: bool = True,
    ) -> Colony:
        """Wire a loaded tree into a colony. An edge endpoint that names nothing is no
        refusal (the loader warned about it, as ``--validate`` does): what is routed there is
        dead-lettered ``unresolved_path``."""
        engine = engine or default_engine()
        edges = EdgeTable((compile_edge(d, engine) for d in tree.edges), engine)
        colony = cls(
            root=tree.root,
            config=tree.colony,
            edges=edges,
            hives=frozenset(tree.hives),
            db=db,
            log=log,
            log_messages=log_messages,
        )
        activity = active_cells(
            list(tree.cells), tree.hives, ((d.from_path, d.to_path) for d in tree.edges)
        )
        registry = read_registry(db.path)  # ids kept across boots, and who failed before
        for node in tree.cells.values():
            spec = CellSpec(
                path=node.path,
                type=node.type,
                folder=node.folder,
                params=node.config.params,
                contract=node.config.contract,
                cell=node.config.cell,
                colony=tree.colony,
                log=log.bind(cell=node.path),
            )
            colony._add(spec, cell_types[node.type], activity[node.path], registry)
        for cell in extra:
            spec = CellSpec(
                path=cell.path,
                type=cell.cell_type.name,
                folder=None,
                params=cell.params,
                contract=Contract(version="1", settings={}),
                cell=CellBlock(type=cell.cell_type.name, timeout=-1),
                colony=tree.colony,
                log=log.bind(cell=cell.path),
            )
            colony._add(spec, cell.cell_type, True, registry)
        return colony

    def _add(
        self, spec: CellSpec, cell_type: CellType, active: bool, registry: Mapping[str, RegistryRow]
    ) -> None:
        row = registry.get(storable_text(spec.path))  # as the registry stores the path
        capacity = spec.cell.mailbox_size or self.config.mailbox_default_capacity
        mailbox = MemoryMailbox(
            capacity, max_bytes=self.config.mailbox_max_bytes or None, gauge=self.queued
        )
        runner = CellRunner(
            self,
            spec,
            cell_type,
            mailbox,
            cell_id=row.cell_id if row is not None else uuid7(),
            active=active,
        )
        if row is not None and row.status == "failed":  # failed in an earlier run: stays so
            runner.fail_at_boot()
        self.runners[spec.path] = runner
        self.db.set_registry(spec.path, runner.cell_id, cell_type.name, _status(runner))

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        self.db.listen(health.reporter(self.log))
        with gc_paused():
            await self._redeliver()
            for runner in self.runners.values():
                runner.start()
        self._started = True
        self._storage_watch = asyncio.create_task(
            health.watch_file(self.db, self.log), name="colony.db watch"
        )
        self.watchdog = Watchdog(
            self.waits,
            self._mailbox_progress,
            period_s=self.config.watchdog_period_ms / 1000,
            threshold=self.config.watchdog_threshold,
            log=self.log,
            on_trip=self._trip if self.config.watchdog_on_trip == "exit" else None,
        )
        self._watchdog = asyncio.create_task(self.watchdog.run(), name="watchdog")
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
        queued = sum(r.mailbox.qsize() for r in self.runners.values())
        for task in (self._watchdog, self._storage_watch):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for runner in self.runners.values():
            await runner.stop()
        if queued and self.at_least_once:
            self.log.info(
                "shutdown_kept_messages",
                queued=queued,
                detail="queued messages stay in the journal and are delivered at the next boot",
            )
        elif queued:
            self.log.warning("shutdown_dropped_messages", queued=queued)
        await self.db.flush()
        stats = self.db.statistics()
        if stats.unavailable is not None:
            self.log.error(
                "shutdown_storage_unavailable",
                error=stats.unavailable,
                kept=stats.kept,
                detail="colony.db could not be written at shutdown; the writer tries once more, "
                "and handled messages whose effects were not committed run again at the next "
                "boot",
            )
        self.log.info("colony_stopped", decisions=self.decisions, dead_letters=self.dead_lettered)

    async def _redeliver(self) -> None:
        """Attach what the journal holds to the mailboxes, before any cell runs: each cell
        then reads its own messages a page at a time, oldest first and ahead of anything
        delivered later, so per cell the order is the order of the first delivery and a
        journal larger than memory is never read whole."""
        if not self.at_least_once:
            return
        snapshot = await asyncio.to_thread(self.db.journal)
        if not snapshot.cells:
            return
        head = await asyncio.to_thread(snapshot.head, _SAMPLE)
        stored = {storable_text(path): runner for path, runner in self.runners.items()}
        per_cell: dict[str, int] = {}
        gone = 0
        for cell, count in snapshot.cells.items():
            runner = stored.get(cell)
            if runner is None or not runner.active:
                gone += await self._dead_letter_journalled(snapshot, cell, runner is None)
                continue
            runner.mailbox.attach(CellBacklog(snapshot, cell))
            self._pending += count
            self._idle.clear()
            per_cell[runner.path] = count
        self.redelivered = sum(per_cell.values())
        self.log.warning(
            "journal_redelivered",
            messages=self.redelivered,
            dead_lettered=gone,
            cells=per_cell,
            traces=sorted({e.message.trace_id for e in head}),
            sample=[
                {
                    "id": e.message.id,
                    "cell": e.cell,
                    "sender": e.sender,
                    "trace_id": e.message.trace_id,
                }
                for e in head
            ],
            detail="these messages were in flight when the daemon last stopped; each is "
            "delivered again, in order per cell (at-least-once delivery)",
        )

    async def _dead_letter_journalled(
        self, snapshot: JournalSnapshot, cell: str, gone: bool
    ) -> int:
        """Dead-letter, a page at a time, what the journal holds for a cell that left the
        tree (``unresolved_path``) or is inactive (``cell_inactive``)."""
        code = DeadLetterCode.UNRESOLVED_PATH if gone else DeadLetterCode.CELL_INACTIVE
        after = done = 0
        while page := await asyncio.to_thread(snapshot.page, cell, after):
            for entry in page:
                self._dead(
                    code,
                    entry.sender,
                    entry.message.target,
                    entry.cell,
                    entry.message,
                    "the journal held this message for a cell that is no longer in the tree "
                    "or no longer active",
                )
            self.db.forget([entry.seq for entry in page])
            after = page[-1].seq
            done += len(page)
            await self.db.flush()  # one page in memory at a time
        return done

    def _mailbox_progress(self, path: str) -> tuple[int, int]:
        runner = self.runners.get(path)
        if runner is None:
            return (0, 0)
        stats = runner.mailbox.statistics()
        return (stats.delivered, stats.queued)

    def _trip(self, detail: str) -> None:
        if self.on_fatal is not None:
            self.on_fatal(detail)

    # -- accounting for settle() ----------------------------------------------------------------

    def message_queued(self) -> None:
        self._pending += 1
        self._idle.clear()

    def message_done(self) -> None:
        self._pending -= 1
        if self._pending == 0:
            self._idle.set()

    @property
    def busy(self) -> bool:
        return self._pending > 0

    async def wait_idle(self) -> None:
        """Return once no message is queued, being handled or being routed anywhere."""
        while True:
            await self._idle.wait()
            for _ in range(3):  # let tasks woken by the last hand-off run
                await asyncio.sleep(0)
            if self._pending == 0:
                return

    # -- ingress ------------------------------------------------------------------------------

    def admission(self, nbytes: int = 0) -> Refusal | None:
        """None when an ingress of about ``nbytes`` may be accepted now; otherwise why not:
        503 ``storage_unavailable`` while ``colony.db`` cannot be written (disk full, I/O
        error, the file deleted), 429 ``overloaded`` while the mailboxes hold more than
        ``colony.json`` ``queued_max_bytes`` (see :mod:`colony.admission`). Costs a few
        attribute reads: ask it for every ingress."""
        return admit(self.db.unavailable(), self.queued.value, self.config.queued_max_bytes, nbytes)

    async def send(self, message: Envelope, sender: str = "/", *, key: str | None = None) -> bool:
        """Route a message born outside the colony (HTTP, stdio, a test). Returns once the
        message is journalled (at-least-once), so the caller may acknowledge it; False when
        ``key`` was taken in before and the message was dropped as a duplicate.

        Raises :class:`colony.persist.db.StorageUnavailable` when ``colony.db`` cannot be
        written now (answer 503 and let the client retry) and
        :class:`colony.persist.db.UnitRejected` when this message cannot be stored (it was
        dead-lettered ``unstorable``): in both cases nothing was delivered."""
        self.message_queued()
        try:
            if not self.at_least_once:
                await self.route(sender, message)
                return True
            async with self._open(None, key, message=message, fail_fast=True) as unit:
                await self.route(sender, message)
            return not unit.duplicate
        finally:
            self.message_done()

    # -- the journal (at-least-once delivery) -------------------------------------------------

    def unit(self, runner: CellRunner, message: Envelope) -> AbstractAsyncContextManager[Any]:
        """The scope of handling ``message`` in ``runner``: what the handling routes is
        committed with the message's removal from the journal, then delivered."""
        if not self.at_least_once:
            return contextlib.nullcontext()
        return self._open((message.id, runner.path), message=message)

    @contextlib.asynccontextmanager
    async def _open(
        self,
        ack: tuple[str, str] | None,
        key: str | None = None,
        *,
        message: Envelope | None = None,
        fail_fast: bool = False,
    ) -> AsyncIterator[Unit]:
        unit = Unit(ack=ack, key=key, message=message, fail_fast=fail_fast)
        token = _UNIT.set(unit)
        try:
            yield unit
        finally:  # on an error or a cancel nothing is committed: the message stays journalled
            unit.closed = True
            _UNIT.reset(token)
        if (
            unit.ack is None
            and unit.key is None
            and not (unit.deliveries or unit.logs or unit.letters)
        ):
            return
        if unit.ack is not None and not unit.deliveries and self._unawaited < _UNAWAITED_MAX:
            # Nothing waits on this commit: the writer applies units in order, so a later
            # unit never lands without it; a crash before it only redelivers the message.
            self._unawaited += 1
            self.db.commit_later(unit)
            return
        # Awaited: once it is in, so is every unit handed over before it (the writer is FIFO).
        self._unawaited = 0
        try:
            # Waits while the storage is unavailable (the writer retries), except an ingress
            # (fail_fast), which gets StorageUnavailable at once and answers 503.
            await self.db.commit(unit)
        except UnitRejected:
            # The writer logged it and dead-lettered the message (``unstorable``); nothing
            # of it is delivered. Only an ingress's caller has someone to tell.
            if fail_fast:
                raise
            return
        if unit.duplicate:
            self.log.info("ingress_duplicate", key=key, detail="this key was taken in before")
            return
        for runner, message, sender in unit.deliveries:
            await runner.deliver(message, sender)

    @staticmethod
    def _open_unit() -> Unit | None:
        """The unit this task routes into, if one is open."""
        unit = _UNIT.get()
        return None if unit is None or unit.closed else unit

    def _sink(self) -> ColonyDb | Unit:
        """Where this task's message-log rows and dead letters go: its unit, if any."""
        return self._open_unit() or self.db

    # -- routing ------------------------------------------------------------------------------

    async def route(self, sender: str, message: Envelope) -> None:
        """Route one message and everything its transits and error replies cause."""
        if self.at_least_once and self._open_unit() is None:
            async with self._open(None):
                await self.route(sender, message)
            return
        work: deque[tuple[str, Envelope]] = deque(((sender, message),))
        while work:
            who, item = work.popleft()
            await self._route_one(who, item, work)

    async def _route_one(
        self, sender: str, message: Envelope, work: deque[tuple[str, Envelope]]
    ) -> None:
        decision = decide(sender, message, self.table)
        kind = type(decision)
        if kind is Deliver:
            assert isinstance(decision, Deliver)
            self.decisions += 1
            message.ttl = decision.ttl
            message.target = decision.resolved
            unit = self._open_unit()
            if unit is not None:  # delivered once committed
                unit.deliveries.append((decision.cell, message, sender))
            else:
                await decision.cell.deliver(message, sender)
            if self.log_messages:
                origin = EXTERNAL if message.parent_message_id is None else sender
                (unit or self.db).log(message, origin, decision.resolved)
        elif kind is Transit:
            assert isinstance(decision, Transit)
            self.decisions += 1
            message.ttl = decision.ttl
            if self.log_messages:
                origin = EXTERNAL if message.parent_message_id is None else sender
                self._sink().log(message, origin, decision.hive)
            if decision.skipped:
                self._log_skipped(decision.skipped, message)
            if decision.taken:
                for copy in transit_follow_ups(message, decision, self.config.message_default_ttl):
                    work.append((decision.hive, copy))
            elif decision.hive == "/" and self.egress is not None:
                await self.egress(message)
            else:
                self._dead(
                    DeadLetterCode.HIVE_NO_ROUTE,
                    message.reply_to or decision.hive,
                    message.target,
                    decision.hive,
                    message,
                    "no out-edge of the hive matched the message",
                )
        elif kind is Expired:
            assert isinstance(decision, Expired)
            self.decisions += 1
            self._expired(sender, message, decision.resolved, work)
        elif kind is Inactive:
            assert isinstance(decision, Inactive)
            self._dead(
                DeadLetterCode.CELL_INACTIVE,
                sender,
                message.target,
                decision.resolved,
                message,
                "the target cell is inactive or failed",
            )
        elif kind is Unresolved:
            assert isinstance(decision, Unresolved)
            self.decisions += 1
            message.ttl = decision.ttl
            if message.reply_to is not None:
                self.log.warning(
                    "unresolved_path_reply",
                    sender=sender,
                    target=decision.resolved,
                    reply_to=message.reply_to,
                    trace_id=message.trace_id,
                    message_id=message.id,
                )
                work.append(("/colony", cascade_reply(message, decision.resolved, decision.ttl)))
            else:
                self._dead(
                    DeadLetterCode.UNRESOLVED_PATH,
                    sender,
                    message.target,
                    decision.resolved,
                    message,
                    "no cell or hive at this path",
                )
        elif kind is InvalidEndpoint:
            assert isinstance(decision, InvalidEndpoint)
            self.decisions += 1
            message.ttl = decision.ttl
            self._dead(
                DeadLetterCode.COLONY_ENDPOINT_INVALID,
                sender,
                message.target,
                decision.resolved,
                message,
                "/colony itself is not an endpoint",
            )
        else:
            assert isinstance(decision, Endpoint)
            self.decisions += 1
            message.ttl = decision.ttl
            if decision.resolved in ANSWERING_ENDPOINTS:
                if message.reply_to is not None:
                    reply = await reads.answer(self, decision.resolved, message)
                    work.append((reads.REPLY_SENDER, reply))
                else:
                    self.log.warning(
                        "colony_read_unanswered",
                        endpoint=decision.resolved,
                        sender=sender,
                        trace_id=message.trace_id,
                        message_id=message.id,
                        detail="the message has no reply_to, so nobody receives the answer",
                    )
                return
            self._dead(
                DeadLetterCode.COLONY_ENDPOINT_UNIMPLEMENTED,
                sender,
                message.target,
                decision.resolved,
                message,
                f"{decision.resolved} answers no routed messages in this version",
            )

    def _expired(
        self, sender: str, message: Envelope, resolved: str, work: deque[tuple[str, Envelope]]
    ) -> None:
        default_ttl = self.config.message_default_ttl
        self.log.error(
            "ttl_expired",
            message_id=message.id,
            sender=sender,
            target=resolved,
            trace_id=message.trace_id,
            reason="ttl_expired",
            message_default_ttl=default_ttl,
            detail="message died of TTL exhaustion — terminal, dead-lettered, nothing reaches "
            "the origin; a loop may need a larger colony.json message_default_ttl or a "
            "bounded restore_ttl edge",
        )
        self.dead_lettered += 1
        self._sink().dead_letter(
            DeadLetter(DeadLetterCode.TTL_EXPIRED, sender, message.target, message.target, message)
        )
        if self.config.ttl_notice and message.reply_to is not None:
            work.append(("/colony", ttl_notice(message, resolved, default_ttl)))

    def _dead(
        self,
        code: DeadLetterCode,
        sender: str,
        original: str,
        resolved: str,
        message: Envelope,
        detail: str | None = None,
    ) -> None:
        self.dead_lettered += 1
        self._sink().dead_letter(DeadLetter(code, sender, original, resolved, message, detail))
        self.log.warning(
            "dead_lettered",
            error_code=str(code),
            sender=sender,
            original=original,
            target=resolved,
            trace_id=message.trace_id,
            message_id=message.id,
            detail=detail,
        )

    def _log_skipped(self, skipped: Iterable[Skipped], message: Envelope) -> None:
        for skip in skipped:
            edge = skip.edge
            fields = {
                "edge_id": edge.id,
                "from": edge.from_path,
                "to": edge.to_path,
                "trace_id": message.trace_id,
                "error": skip.reason,
            }
            if skip.stage == "condition" and skip.missing_key:
                self.log.debug(
                    "edge_condition_missing_key", condition=edge.condition_source, **fields
                )
            elif skip.stage == "condition":
                self.log.warning("edge_condition_failed", condition=edge.condition_source, **fields)
            else:
                self.log.warning("edge_modifier_failed", key=skip.key, **fields)

    # -- what cells emit ----------------------------------------------------------------------

    async def route_outputs(
        self,
        runner: CellRunner,
        message: Envelope | None,
        outputs: Sequence[Output],
        *,
        key: str | None = None,
    ) -> None:
        """Route a cell's emissions, each to completion, in the order the cell made them.

        A long-running cell's own emissions (``message`` None) are one unit: this returns once
        they are journalled, so the cell may then acknowledge its outside source; ``key``
        drops an emission whose key was taken in before."""
        if message is None and self.at_least_once and self._open_unit() is None:
            async with self._open(None, key):
                await self.route_outputs(runner, None, outputs)
            return
        for output in outputs:
            if isinstance(output, Emission):
                await self._route_emission(runner, message, output.content, output.target)
            else:
                await self._route_emission(runner, message, output, None)

    async def _route_emission(
        self, runner: CellRunner, message: Envelope | None, content: Any, target: str | None
    ) -> None:
        sender = runner.path
        default_ttl = self.config.message_default_ttl
        if message is None:  # a long-running cell's own emission starts a new trace
            parent = _origin(sender, default_ttl)
            parent_id = None
            raw_target = target or sender
        else:
            parent = message
            parent_id = message.id
            raw_target = target or message.reply_to or message.target
        if not isinstance(content, dict):
            record = _record(parent, parent_id, raw_target, {}, content)
            self._dead(
                DeadLetterCode.INVALID_UBF_BODY,
                sender,
                raw_target,
                raw_target,
                record,
                "a cell's content must be a JSON object",
            )
            return
        hop, body = split_content(content)
        problem = body_problem(body)
        if problem is not None:
            self._dead(
                DeadLetterCode.INVALID_UBF_BODY,
                sender,
                raw_target,
                raw_target,
                _record(parent, parent_id, raw_target, hop, body),
                problem,
            )
            return
        if self.config.strict_validation and runner.type.name != "code":
            violation = emits_violation(runner.spec.contract, hop, body)
            if violation is not None:
                if message is not None and message.reply_to is not None:
                    await self.route(
                        sender, substrate_reply(message, "contract_violation", violation)
                    )
                else:
                    self._dead(
                        DeadLetterCode.CONTRACT_VIOLATION,
                        sender,
                        raw_target,
                        raw_target,
                        _record(parent, parent_id, raw_target, hop, body),
                        violation,
                    )
                return
        ttl = parent.ttl
        context = parent.headers.context
        if raw_target == "/colony" or raw_target.startswith("/colony/"):
            direct = _record(parent, parent_id, raw_target, hop, body)
            direct.reply_to = sender
            direct.headers = Headers(context, hop)
            await self.route(sender, direct)
            return
        taken, skipped = self.edges.evaluate(sender, Headers(context, hop))
        if skipped:
            self._log_skipped(skipped, parent)
        if not taken:
            self._dead(
                DeadLetterCode.NO_ROUTE,
                sender,
                raw_target,
                raw_target,
                _record(parent, parent_id, raw_target, hop, body),
                "the emission matched none of the cell's out-edges",
            )
            return
        for follow in emission_follow_ups(parent, sender, taken, body, ttl, default_ttl):
            if message is None:
                follow.parent_message_id = None
            await self.route(sender, follow)

    # -- substrate replies (consumes gate, message backstop) ----------------------------------

    async def substrate_reply(
        self, runner: CellRunner, message: Envelope, code: DeadLetterCode, text: str
    ) -> None:
        if message.reply_to is not None:
            await self.route(runner.path, substrate_reply(message, str(code), text))
        else:
            self._dead(code, runner.path, message.target, runner.path, message, text)

    def dead_letter_message(
        self, code: DeadLetterCode, sender: str, message: Envelope, resolved: str, detail: str
    ) -> None:
        self._dead(code, sender, message.target, resolved, message, detail)

    def status_changed(self, runner: CellRunner) -> None:
        self.db.set_registry(runner.path, runner.cell_id, runner.type.name, _status(runner))


def _status(runner: CellRunner) -> str:
    if runner.state.value == "failed":
        return "failed"
    return "active" if runner.active else "inactive"


def _origin(sender: str, ttl: int) -> Envelope:
    """The stand-in parent of a long-running cell's own emission: a fresh trace, no context."""
    trace = uuid7()
    return Envelope(
        id=trace,
        trace_id=trace,
        parent_message_id=None,
        correlation_id=None,
        target=sender,
        reply_to=None,
        ttl=ttl,
        headers=Headers({}, {}),
        body={},
        created_at=int(time.time()),
    )


def _record(
    parent: Envelope, parent_id: str | None, target: str, hop: JsonObject, body: Any
) -> Envelope:
    """The message an emission would have become (what a dead letter stores)."""
    return Envelope(
        id=uuid7(),
        trace_id=parent.trace_id,
        parent_message_id=parent_id,
        correlation_id=parent.correlation_id,
        target=target,
        reply_to=None,
        ttl=parent.ttl,
        headers=Headers(parent.headers.context, hop),
        body=body,
        created_at=int(time.time()),
    )
