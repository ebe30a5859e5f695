"""Running one cell: its mailbox, its class of concurrency, and its supervision.

Per message, in order: the ``consumes`` gate (a violation never reaches the cell), then
``handle()`` under the ``message_timeout`` backstop, then routing of what it emitted. A crash
or a backstop expiry restarts the cell with a fresh instance, keeping the queued messages in
order; past ``cell.restart_limit`` restarts (else ``colony.json restart_max_retries``, 5) the
cell is *failed*: it stays failed across daemon restarts (the registry keeps the status) and
deliveries dead-letter ``cell_inactive`` until an operator revives it (``meclaw cells revive``,
``POST /colony/cells/revive``).

Every failure leaves one log line with its cause: an error emission (``cell_error``, with the
text the emission carries), a crash (``cell_crashed``, with the traceback), a start or I/O loop
failure (``cell_start_failed``, ``cell_io_crashed``, with the traceback).

* stateful: one message at a time; built on the first message; sleeps after
  ``idle_timeout_ms`` without messages (``cell.timeout`` 0), after every message (> 0), or
  never (-1);
* stateless: up to ``params.max_concurrency`` messages at once, one shared instance;
* long-running: built at boot; its ``run(ctx)`` I/O loop runs beside the message handler.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import traceback
from collections.abc import Callable, Coroutine, Sequence
from enum import StrEnum
from typing import Any, Protocol

from colony.cell import Cell, CellClass, CellSpec, CellType, Closable, Emission, LongRunning, Output
from colony.config.models import ColonyConfig
from colony.contracts import ConsumesGate
from colony.dead_letters import DeadLetterCode
from colony.effects import Handled
from colony.envelope import Envelope, JsonObject, split_content
from colony.events import Events
from colony.failures import error_code, error_text, error_traceback
from colony.handling import handled
from colony.ids import now_ms
from colony.inflight import InFlightMessages
from colony.mailbox import Mailbox
from colony.observability import Logger
from colony.outcome import Crashed, Outcome, Outputs, Refused, TimedOut
from colony.persist.writer import UnitFenced
from colony.routing import Emitter


class CellState(StrEnum):
    NOT_YET_SPAWNED = "not_yet_spawned"
    """A stateful cell before its first message: no instance exists."""
    AWAKE = "awake"
    """An instance exists and takes messages."""
    ASLEEP = "asleep"
    """A stateful cell whose instance was closed after idling; the next message wakes it."""
    FAILED = "failed"
    """Restarted more than its restart limit (in this run or an earlier one); deliveries
    dead-letter ``cell_inactive`` until an operator revives it."""
    STOPPED = "stopped"
    """The colony shut down."""


class Host(Protocol):
    """What a runner needs from the colony (implemented by :class:`colony.colony.Colony`)."""

    events: Events
    """Told when a handling begins (the rest it learns from what the colony settles)."""

    async def settle(
        self,
        runner: CellRunner,
        message: Envelope | None,
        outcome: Outcome,
        *,
        key: str | None = None,
        started_ms: int | None = None,
    ) -> None:
        """Carry out how handling ``message`` ended (``message`` None: a long-running cell's
        own emissions; ``key`` drops one taken in before; ``started_ms``: when the handling
        began). Returns once it is committed with the message's removal from the journal, so
        the cell may acknowledge its source."""
        ...

    def status_changed(self, runner: CellRunner) -> None:
        """The runner became failed, or was revived: the registry records it."""
        ...


Spawn = Callable[[Coroutine[Any, Any, None], str], "asyncio.Task[None]"]
"""Starts a runner's task in the task group that owns every cell task."""


class _Restart(Exception):
    """Internal: tear the cell down and build a new instance."""


class _Context:
    """The :class:`colony.cell.CellContext` a long-running cell's I/O loop gets."""

    def __init__(self, runner: CellRunner) -> None:
        self.path = runner.path
        self._runner = runner

    async def emit(
        self, content: JsonObject, target: str | None = None, *, key: str | None = None
    ) -> None:
        outputs = [Emission(content, target)]
        self._runner.log_failures(None, outputs)
        await self._runner.host.settle(self._runner, None, Outputs(outputs), key=key)


_FAIR_SHARE = 64
"""Messages a cell takes in a row from its backlog before it lets the rest of the colony run.
Taking a queued message never waits, so a cell whose handling does not wait either (a store,
a sink) would otherwise hold the event loop until its mailbox is empty: seconds, with 100,000
queued, during which nothing else is routed."""


def _traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)).rstrip()


def _seconds(ms: int | None) -> float | None:
    return ms / 1000 if ms is not None and ms > 0 else None


class CellRunner:
    """One cell at runtime."""

    def __init__(
        self,
        host: Host,
        spec: CellSpec,
        cell_type: CellType,
        mailbox: Mailbox,
        *,
        config: ColonyConfig,
        log: Logger,
        in_flight: InFlightMessages,
        cell_id: str,
        active: bool = True,
    ) -> None:
        self.host = host
        self.stale: Callable[[Envelope], bool] | None = None
        """In a cluster: whether a message's conversation is no longer this node's (it is
        then not handled; the partition's owner runs it from the journal)."""
        self.config = config
        self.log = log
        self.in_flight = in_flight
        self.spec = spec
        self.path = spec.path
        self.type = cell_type
        self.mailbox = mailbox
        self.cell_id = cell_id
        self.active = active
        self.wired_active = active
        """Whether the edges make this cell active (``active`` is also False once failed)."""
        self.restarts = 0
        self.handled = 0
        """Messages this cell finished handling since the daemon started (``failed``: of
        them, those that did not end ``ok``; ``busy``: being handled now)."""
        self.failed = 0
        self.busy = 0
        self.restart_limit = (
            spec.cell.restart_limit
            if spec.cell.restart_limit is not None
            else config.restart_max_retries
        )
        self.gate = ConsumesGate.from_contract(spec.contract)
        checked = config.strict_validation and not cell_type.checks_own_emits
        self.emitter = Emitter(spec.path, spec.contract if checked else None)
        """What routing needs of this cell to route its emissions."""
        colony = config
        idle_ms = (
            spec.cell.idle_timeout_ms
            if spec.cell.idle_timeout_ms is not None
            else colony.idle_timeout_default_ms
        )
        self.idle_timeout = _seconds(idle_ms) if spec.cell.timeout == 0 else None
        self.one_shot = spec.cell.timeout > 0
        self.state = (
            CellState.NOT_YET_SPAWNED
            if cell_type.cell_class is CellClass.STATEFUL
            else CellState.AWAKE
        )
        self._in_a_row = 0
        """Messages taken without waiting since the loop last ran anything else."""
        self._task: asyncio.Task[None] | None = None
        self._spawn: Spawn | None = None

    @functools.cached_property
    def message_timeout(self) -> float | None:
        """The backstop on one message, in seconds (None: none). Worked out when first needed:
        a cell type's floor may parse the cell's params once more (the llm cell's does), which
        a colony of 10,000 cells, most never woken, would otherwise pay for at boot."""
        spec, cell_type = self.spec, self.type
        timeout_ms = (
            spec.cell.message_timeout
            if spec.cell.message_timeout is not None
            else self.config.message_timeout_default_ms
        )
        if spec.cell.message_timeout is None and timeout_ms > 0 and cell_type.backstop_floor_ms:
            floor = cell_type.backstop_floor_ms(spec.params)
            if floor is not None:
                timeout_ms = max(timeout_ms, floor)
        return None if cell_type.cell_class is CellClass.LONG_RUNNING else _seconds(timeout_ms)

    # -- lifecycle --------------------------------------------------------------------------

    def start(self, spawn: Spawn) -> None:
        """Start the cell's task in the colony's task group (``spawn``)."""
        self._spawn = spawn
        self._task = spawn(self._main(), f"cell {self.path}")

    def fail_at_boot(self) -> None:
        """The registry says this cell failed in an earlier run: wire it, never spawn it."""
        self.state = CellState.FAILED
        self.active = False

    async def revive(self) -> bool:
        """Bring a failed cell back with a fresh restart count; False when it is not failed.

        The retired task (which dead-letters whatever still reaches the mailbox) is stopped
        before the new one starts, so the two never share the mailbox or an instance."""
        if self.state is not CellState.FAILED:
            return False
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.restarts = 0
        self.active = self.wired_active
        self.state = (
            CellState.NOT_YET_SPAWNED
            if self.type.cell_class is CellClass.STATEFUL
            else CellState.AWAKE
        )
        self.host.status_changed(self)
        self.log.warning(
            "cell_revived",
            cell=self.path,
            active=self.active,
            detail="an operator revived the failed cell; it takes messages again with a fresh "
            "restart count",
        )
        assert self._spawn is not None  # a failed cell was started before
        self.start(self._spawn)
        return True

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.state = CellState.STOPPED

    async def _main(self) -> None:
        if self.state is CellState.FAILED:  # failed in an earlier run
            await self._retire()
        elif self.type.cell_class is CellClass.STATELESS:
            await self._run_stateless()
        elif self.type.cell_class is CellClass.LONG_RUNNING:
            await self._run_long_running()
        else:
            await self._run_stateful()

    async def _make_cell(self) -> Cell:
        made = self.type.factory(self.spec)
        cell = await made if inspect.isawaitable(made) else made
        self.state = CellState.AWAKE
        return cell

    async def _close(self, cell: Cell | None) -> None:
        # None first: a runtime-checkable protocol's isinstance costs tens of µs, and every
        # cell never woken (most of a big colony) is closed as None at shutdown.
        if cell is not None and isinstance(cell, Closable):
            try:
                await cell.close()
            except Exception as exc:
                self.log.warning(
                    "cell_close_failed",
                    cell=self.path,
                    error=f"{type(exc).__name__}: {exc}",
                    traceback=_traceback(exc),
                )

    # -- one message ------------------------------------------------------------------------

    async def _process(self, cell: Cell, message: Envelope) -> Outcome:
        """Handle one message: the ``consumes`` gate, then the cell under the backstop."""
        stale = self.stale
        if stale is not None and stale(message):
            return Outputs(())  # another node owns its conversation now: settle drops it
        self.host.events.began(self.path, self.type.name, message)
        self.busy += 1
        try:
            return await self._gated(cell, message)
        finally:
            self.busy -= 1

    async def _gated(self, cell: Cell, message: Envelope) -> Outcome:
        problem = self.gate.violation(message)
        if problem is not None:
            return Refused(DeadLetterCode.CONSUMES_VIOLATION, problem)
        backstop = asyncio.timeout(self.message_timeout)
        try:
            async with backstop:
                outputs = await cell.handle(message)
        except TimeoutError:
            if not backstop.expired():
                return self._crashed(message, TimeoutError("the cell raised TimeoutError"))
            self.log.warning(
                "message_timeout",
                cell=self.path,
                message_id=message.id,
                trace_id=message.trace_id,
                timeout_ms=int((self.message_timeout or 0) * 1000),
            )
            return TimedOut()
        except UnitFenced:  # a write of the cell's was refused: the conversation moved on
            return Outputs(())  # (settle drops the hand-off; no crash, no restart counted)
        except Exception as exc:
            return self._crashed(message, exc)
        if outputs:
            self.log_failures(message, outputs)
        return Outputs(outputs or ())

    def account(
        self, message: Envelope, outcome: Outcome, started_ms: int | None
    ) -> Handled | None:
        """The ``handling`` row of ``message`` (begun at ``started_ms``; None: now), counted
        in this cell's ``handled`` and ``failed``; None for a message a failed cell never
        took (its dead letter is the record)."""
        if isinstance(outcome, Refused) and outcome.code is DeadLetterCode.CELL_INACTIVE:
            return None
        ended = now_ms()
        row = handled(self.path, self.type.name, message, outcome, started_ms or ended, ended)
        self.handled += 1
        self.failed += row.outcome != "ok"
        return row

    def _restarts(self, outcome: Outcome) -> bool:
        """Whether ``outcome`` tears the instance down (a stateless cell's is shared: never)."""
        return isinstance(outcome, (Crashed, TimedOut)) and (
            self.type.cell_class is not CellClass.STATELESS
        )

    def log_failures(self, message: Envelope | None, outputs: Sequence[Output]) -> None:
        """One ERROR line per error emission (``hop.finish_reason: "error"``), with its code
        and the cause the emission carries: the cell reported a failure, and an operator
        must see it without reading the message log."""
        for output in outputs:
            content = output.content if isinstance(output, Emission) else output
            # On every emission: look at the header before building anything.
            header = content.get("header") if isinstance(content, dict) else None
            code = error_code(header)
            if code is None:
                continue
            _, body = split_content(content)
            self.log.error(
                "cell_error",
                cell=self.path,
                error_code=code,
                error=error_text(body) or "(the emission carries no error text)",
                traceback=error_traceback(body),
                trace_id=None if message is None else message.trace_id,
                message_id=None if message is None else message.id,
            )

    def _crashed(self, message: Envelope, exc: BaseException) -> Crashed:
        self.log.error(
            "cell_crashed",
            cell=self.path,
            message_id=message.id,
            trace_id=message.trace_id,
            error=f"{type(exc).__name__}: {exc}",
            traceback=_traceback(exc),
            detail="the message is dead-lettered cell_crashed; the cell restarts with its "
            "queued messages",
        )
        return Crashed(f"{type(exc).__name__}: {exc}")

    def _count_restart(self) -> bool:
        """Count a restart; True when the cell has now failed."""
        self.restarts += 1
        if self.restarts <= self.restart_limit:
            self.log.warning(
                "cell_restarting", cell=self.path, restarts=self.restarts, limit=self.restart_limit
            )
            return False
        self.state = CellState.FAILED
        self.active = False
        self.log.error(
            "cell_failed",
            cell=self.path,
            restarts=self.restarts - 1,
            limit=self.restart_limit,
            detail="the cell exceeded its restart limit and is marked failed; messages to it "
            f"are dead-lettered cell_inactive until an operator revives it (meclaw cells "
            f"revive {self.path})",
        )
        self.host.status_changed(self)
        return True

    async def _retire(self) -> None:
        """A failed cell: whatever still arrives is dead-lettered, in order."""
        while True:
            message = await self._next(None)
            assert message is not None  # no idle timeout: it waits for one
            try:
                await self.host.settle(
                    self, message, Refused(DeadLetterCode.CELL_INACTIVE, "the cell has failed")
                )
            finally:
                self.in_flight.done()

    # -- the three classes ------------------------------------------------------------------

    async def _yield_if_due(self) -> None:
        """Let the rest of the colony run once every ``_FAIR_SHARE`` messages taken in a row."""
        self._in_a_row += 1
        if self._in_a_row >= _FAIR_SHARE:
            self._in_a_row = 0
            await asyncio.sleep(0)

    async def _next(self, idle: float | None) -> Envelope | None:
        """The next message, waiting at most ``idle`` seconds (None: for ever) before None."""
        await self._yield_if_due()
        message = self.mailbox.get_nowait()
        if message is not None:
            return message
        self._in_a_row = 0
        if idle is None:
            return await self.mailbox.get()
        try:
            return await asyncio.wait_for(self.mailbox.get(), idle)
        except TimeoutError:
            return None

    async def _run_stateful(self) -> None:
        self._cell: Cell | None = None
        try:
            await self._stateful_loop()
        finally:  # stopped (cancelled) or retired: release the instance's files and sockets
            await self._close(self._cell)
            self._cell = None

    async def _stateful_loop(self) -> None:
        cell: Cell | None = None
        while True:
            self._cell = cell
            message = await self._next(self.idle_timeout if cell is not None else None)
            if message is None:  # idled out
                await self._close(cell)
                cell = None
                self.state = CellState.ASLEEP
                continue
            started = now_ms()
            try:
                if cell is None:
                    try:
                        cell = await self._make_cell()
                        self._cell = cell
                    except Exception as exc:
                        outcome: Outcome = self._crashed(message, exc)
                if cell is not None:
                    outcome = await self._process(cell, message)
                await self.host.settle(self, message, outcome, started_ms=started)
            finally:
                self.in_flight.done()
            if self._restarts(outcome):
                await self._close(cell)
                cell = None
                if self._count_restart():
                    await self._retire()
                    return
            elif self.one_shot:
                await self._close(cell)
                cell = None
                self.state = CellState.ASLEEP

    async def _run_stateless(self) -> None:
        try:
            cell = await self._make_cell()
        except Exception as exc:
            self.log.error(
                "cell_start_failed",
                cell=self.path,
                error=f"{type(exc).__name__}: {exc}",
                traceback=_traceback(exc),
            )
            self.state = CellState.FAILED
            self.active = False
            self.host.status_changed(self)
            await self._retire()
            return
        limit = _max_concurrency(self.spec, self.type)
        slots = asyncio.Semaphore(limit)
        try:
            async with asyncio.TaskGroup() as group:
                while True:
                    message = await self.mailbox.get()
                    await slots.acquire()
                    group.create_task(self._work(cell, message, slots))
        finally:
            await self._close(cell)

    async def _work(self, cell: Cell, message: Envelope, slots: asyncio.Semaphore) -> None:
        started = now_ms()
        try:
            outcome = await self._process(cell, message)
            await self.host.settle(self, message, outcome, started_ms=started)
        finally:
            slots.release()
            self.in_flight.done()

    async def _run_long_running(self) -> None:
        while True:
            try:
                cell = await self._make_cell()
            except Exception as exc:
                self.log.error(
                    "cell_start_failed",
                    cell=self.path,
                    error=f"{type(exc).__name__}: {exc}",
                    traceback=_traceback(exc),
                )
                if self._count_restart():
                    await self._retire()
                    return
                continue
            work: set[asyncio.Task[None]] = set()
            try:
                async with asyncio.TaskGroup() as group:
                    if isinstance(cell, LongRunning):
                        group.create_task(self._io(cell))
                    if self.type.handles_concurrently:
                        group.create_task(self._concurrent_handler(cell, work))
                    else:
                        group.create_task(self._handler(cell))
            except* _Restart:
                pass
            except* Exception as errors:
                first = errors.exceptions[0]
                self.log.error(
                    "cell_io_crashed",
                    cell=self.path,
                    error=f"{type(first).__name__}: {first}",
                    traceback=_traceback(first),
                )
            finally:
                await self._drain(work)
                await self._close(cell)
            if self._count_restart():
                await self._retire()
                return

    async def _drain(self, work: set[asyncio.Task[None]]) -> None:
        """Let the messages still in hand settle (each is bounded by the backstop) before the
        instance goes: their replies were made by a live cell. Stopping cancels them."""
        if not work:
            return
        try:
            await asyncio.wait(set(work))
        except asyncio.CancelledError:
            for task in work:
                task.cancel()
            raise

    async def _io(self, cell: LongRunning) -> None:
        await cell.run(_Context(self))

    async def _handler(self, cell: Cell) -> None:
        while True:
            message = await self._next(None)
            assert message is not None  # no idle timeout: it waits for one
            started = now_ms()
            try:
                outcome = await self._process(cell, message)
                await self.host.settle(self, message, outcome, started_ms=started)
            finally:
                self.in_flight.done()
            if self._restarts(outcome):
                raise _Restart

    async def _concurrent_handler(self, cell: Cell, work: set[asyncio.Task[None]]) -> None:
        """The mailbox of a cell that handles concurrently: each message in a task of its own
        (kept in ``work``, outside the cell's task group, so a crash of the I/O loop lets it
        settle), at most ``max_concurrency`` at once; a message whose outcome restarts the
        cell stops the intake."""
        slots = asyncio.Semaphore(_max_concurrency(self.spec, self.type))
        restart: asyncio.Future[Envelope | None] = asyncio.get_running_loop().create_future()

        async def one(message: Envelope) -> None:
            started = now_ms()
            try:
                try:
                    outcome = await self._process(cell, message)
                    await self.host.settle(self, message, outcome, started_ms=started)
                finally:
                    self.in_flight.done()
                if self._restarts(outcome) and not restart.done():
                    restart.set_result(None)
            finally:
                slots.release()

        while True:
            await slots.acquire()
            taking: asyncio.Future[Envelope | None] = asyncio.ensure_future(self._next(None))
            try:
                await asyncio.wait({taking, restart}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not taking.done():  # a restart (or a stop) came first
                    taking.cancel()
            if not taking.done():
                raise _Restart
            message = taking.result()
            assert message is not None  # no idle timeout: it waits for one
            task = asyncio.create_task(one(message))
            work.add(task)
            task.add_done_callback(work.discard)
            if restart.done():
                raise _Restart


def _max_concurrency(spec: CellSpec, cell_type: CellType) -> int:
    params = spec.params if isinstance(spec.params, dict) else {}
    value = params.get("max_concurrency")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    return cell_type.default_max_concurrency
