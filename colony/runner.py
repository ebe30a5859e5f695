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
failure (``cell_start_failed``, ``cell_io_crashed``, with the traceback), a long-running cell's
message that could not be settled (``cell_settle_failed``, with the traceback).

* stateful: one message at a time; built on the first message; sleeps after
  ``idle_timeout_ms`` without messages (``cell.timeout`` 0), after every message (> 0), or
  never (-1);
* stateless: up to ``params.max_concurrency`` messages at once, one shared instance;
* long-running: built at boot; its ``run(ctx)`` I/O loop runs beside the message handler.

A long-running cell handles each message it takes in a task of its own, outside the task group
of its I/O loop and its intake (one at a time, or concurrently when its type
``handles_concurrently``). A crash of the I/O loop, or a restart caused by a message, stops the
intake, and the messages in hand finish and settle first (after a message's restart, while the
I/O loop still runs: an mcp or subcolony cell's replies come through it), for at most
``RESTART_DRAIN_S`` (10 s; a handling still running then settles as a backstop expiry, or is
dropped when this cluster node lost its conversation's partition): it has no
``message_timeout`` backstop. The first restart is immediate; each further one waits
``RESTART_PAUSE_FIRST_S`` (0.1 s) doubling up to ``RESTART_PAUSE_MAX_S`` (5 s), and an instance
that ran ``RESTART_PAUSE_RESET_S`` (60 s) starts that series again. A stop cancels the messages
in hand and does not wait for them: they are counted out unsettled, so under at-least-once
they stay in the journal and the next boot delivers them again (as the queued ones).
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


RESTART_DRAIN_S = 10.0
"""How long a restarting long-running cell lets the messages it has in hand finish (it has no
``message_timeout`` backstop: a call to the outside may take long); a handling still running
then settles as a backstop expiry (in a cluster, one of a partition this node lost is dropped),
and the new instance starts."""

RESTART_PAUSE_FIRST_S = 0.1
RESTART_PAUSE_MAX_S = 5.0
RESTART_PAUSE_RESET_S = 60.0
"""The pauses between a long-running cell's restarts (:class:`_RestartPause`): so an outside
server that is slow to come up does not use up the restart budget within moments."""


def _traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)).rstrip()


def _stop_if_asked() -> None:
    """Raise CancelledError when this task was cancelled (a stop) and something swallowed it:
    a task group that was already aborting swallows its parent's cancel in its errors (Python
    3.11, 3.12), and a restart must not then run over the stop."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


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

    def _count_restart(self, *, pause_s: float = 0.0) -> bool:
        """Count a restart (made after ``pause_s``); True when the cell has now failed."""
        self.restarts += 1
        if self.restarts <= self.restart_limit:
            self.log.warning(
                "cell_restarting",
                cell=self.path,
                restarts=self.restarts,
                limit=self.restart_limit,
                pause_ms=int(pause_s * 1000),
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
        loop = asyncio.get_running_loop()
        pause = _RestartPause()
        while True:
            began = loop.time()
            try:
                cell = await self._make_cell()
            except Exception as exc:
                self.log.error(
                    "cell_start_failed",
                    cell=self.path,
                    error=f"{type(exc).__name__}: {exc}",
                    traceback=_traceback(exc),
                )
            else:
                await self._live(cell)
            _stop_if_asked()  # a stop a cell's factory or close() swallowed
            delay = pause.next(loop.time() - began)
            if self._count_restart(pause_s=delay):
                await self._retire()
                return
            if delay:
                await asyncio.sleep(delay)

    async def _live(self, cell: Cell) -> None:
        """Run one instance until it must restart (its I/O loop crashed, or a message's outcome
        restarts it): the I/O loop beside the message intake. The instance is closed however
        this ends; a stop (a cancel) ends it at once."""
        in_hand = _InHand(self.in_flight, self._settle_failed)
        try:
            try:
                async with asyncio.TaskGroup() as group:
                    if isinstance(cell, LongRunning):
                        group.create_task(self._io(cell))
                    if self.type.handles_concurrently:
                        group.create_task(self._concurrent_handler(cell, in_hand))
                    else:
                        group.create_task(self._handler(cell, in_hand))
                    # Wait in the body, not in the group's exit: the group's own cancel of this
                    # task (on a failure) then lands here and is taken back; one that lands in
                    # the exit, Python 3.11 leaves counted in cancelling().
                    await asyncio.get_running_loop().create_future()
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
            _stop_if_asked()  # a stop while the group wound down: its exit swallowed it
            await self._drain(in_hand)
        finally:
            try:
                await self._cancel(in_hand)  # what a stop left in hand
            finally:
                await self._close(cell)

    async def _drain(self, in_hand: _InHand) -> None:
        """Let the messages still in hand finish and settle before the instance goes (their
        replies are made by a live cell), for at most ``RESTART_DRAIN_S`` in all: a handling
        still running then is cut short and settles as a backstop expiry. A restart caused by
        a message drains in the intake, beside the I/O loop; one caused by the I/O loop's crash
        drains once the task group has ended."""
        tasks = set(in_hand.tasks)
        if not tasks:
            return
        if in_hand.deadline is None:  # (an I/O loop crash during an intake's drain: go on)
            in_hand.cut_short_at(asyncio.get_running_loop().time() + RESTART_DRAIN_S)
        await asyncio.wait(tasks)

    async def _cancel(self, in_hand: _InHand) -> None:
        """Cancel the handlings still in hand and wait for them (a stop does not wait for a
        slow call to the outside). Their messages are counted out unsettled: under
        at-least-once they stay in the journal and the next boot delivers them again."""
        tasks = set(in_hand.tasks)
        if not tasks:
            return
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)

    def _settle_failed(self, message: Envelope, failure: BaseException) -> None:
        """The one line of a handling in hand that raised past its outcome (settling it
        failed), logged as it ends, whenever that is: a restart, a drain or a stop."""
        self.log.error(
            "cell_settle_failed",
            cell=self.path,
            message_id=message.id,
            trace_id=message.trace_id,
            error=f"{type(failure).__name__}: {failure}",
            traceback=_traceback(failure),
            detail="a message the cell had in hand could not be settled; under at-least-once "
            "it stays in the journal for the next boot; the cell restarts (unless it is already "
            "restarting or stopping)",
        )

    def _ends_instance(self, task: asyncio.Task[Outcome]) -> bool:
        """Whether a handling that ended restarts its instance: its outcome does, or it raised
        past it (logged by :class:`_InHand`)."""
        if task.cancelled():
            return False
        return task.exception() is not None or self._restarts(task.result())

    async def _io(self, cell: LongRunning) -> None:
        await cell.run(_Context(self))

    def _take_in(self, cell: Cell, message: Envelope, in_hand: _InHand) -> asyncio.Task[Outcome]:
        """Handle ``message`` in a task of its own, kept in ``in_hand``."""
        task = asyncio.create_task(self._handle_in_hand(cell, message, in_hand))
        in_hand.add(task, message)
        return task

    async def _handle_in_hand(self, cell: Cell, message: Envelope, in_hand: _InHand) -> Outcome:
        started = now_ms()
        bound = asyncio.timeout_at(in_hand.deadline)
        try:
            async with bound:
                in_hand.bounds.add(bound)
                try:
                    outcome = await self._process(cell, message)
                finally:
                    in_hand.bounds.discard(bound)
        except TimeoutError:
            if not bound.expired():
                raise
            stale = self.stale
            then = (
                "this node no longer owns its conversation's partition, so it is dropped "
                "(the partition's owner runs it from the journal)"
                if stale is not None and stale(message)
                else "it is settled as a backstop expiry"
            )
            self.log.warning(
                "message_timeout",
                cell=self.path,
                message_id=message.id,
                trace_id=message.trace_id,
                timeout_ms=int(RESTART_DRAIN_S * 1000),
                detail="the cell restarted while it handled the message and it did not finish "
                f"within the restart drain; {then}",
            )
            outcome = TimedOut()
        await self.host.settle(self, message, outcome, started_ms=started)
        return outcome

    async def _handler(self, cell: Cell, in_hand: _InHand) -> None:
        """The mailbox of a cell that handles one message at a time, in order; a message whose
        outcome restarts the cell, or whose settling fails, stops the intake."""
        while True:
            message = await self._next(None)
            assert message is not None  # no idle timeout: it waits for one
            task = self._take_in(cell, message, in_hand)
            await asyncio.wait({task})  # a crash of the I/O loop (or a stop) leaves it in hand
            if self._ends_instance(task):
                raise _Restart

    async def _concurrent_handler(self, cell: Cell, in_hand: _InHand) -> None:
        """The mailbox of a cell that handles concurrently: at most ``max_concurrency``
        messages in hand at once; a message whose outcome restarts the cell, or whose settling
        fails, stops the intake."""
        slots = asyncio.Semaphore(_max_concurrency(self.spec, self.type))
        restart: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        """Set once the intake must stop."""

        def ended(task: asyncio.Task[Outcome]) -> None:
            slots.release()
            if not restart.done() and self._ends_instance(task):
                restart.set_result(None)

        def take_in(taking: asyncio.Task[Envelope | None]) -> None:
            message = taking.result()
            assert message is not None  # no idle timeout: it waits for one
            self._take_in(cell, message, in_hand).add_done_callback(ended)

        while not restart.done():
            await slots.acquire()
            if restart.done():  # the slot was freed by the handling that restarts the cell
                slots.release()
                break
            taking = asyncio.create_task(self._next(None))
            try:
                pending: set[asyncio.Future[Any]] = {taking, restart}
                await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            except BaseException:
                # The I/O loop crashed (or a stop came) in the very turn a message was taken:
                # it is in hand, so the drain settles it (a stop cancels it, counted out).
                if not taking.done():
                    taking.cancel()
                elif not taking.cancelled() and taking.exception() is None:
                    take_in(taking)
                raise
            if taking.done():
                take_in(taking)
            else:  # a restart came first; the message stays in the mailbox
                taking.cancel()
        # The others in hand finish while the I/O loop still runs: the replies of an mcp or
        # subcolony cell come through it.
        await self._drain(in_hand)
        raise _Restart


class _InHand:
    """The messages one instance of a long-running cell has taken and not yet settled, each
    handled in a task of its own outside the instance's task group, so that neither a crash of
    its I/O loop nor a restart caused by another message cancels it. A task counts its message
    out of ``in_flight`` when it ends, even when it was cancelled before it ever ran, and one
    that raised past its outcome is told to ``failed`` then: a drain or a stop that takes stock
    of the tasks later would miss it."""

    def __init__(
        self, in_flight: InFlightMessages, failed: Callable[[Envelope, BaseException], None]
    ) -> None:
        self.tasks: dict[asyncio.Task[Outcome], Envelope] = {}
        self.deadline: float | None = None
        """When the handlings still running are cut short (loop time; None until the restart
        drain begins)."""
        self.bounds: set[asyncio.Timeout] = set()
        """The cut-off of each handling running now."""
        self._in_flight = in_flight
        self._failed = failed

    def add(self, task: asyncio.Task[Outcome], message: Envelope) -> None:
        self.tasks[task] = message
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[Outcome]) -> None:
        message = self.tasks.pop(task)
        self._in_flight.done()
        failure = None if task.cancelled() else task.exception()
        if failure is not None:
            self._failed(message, failure)

    def cut_short_at(self, deadline: float) -> None:
        self.deadline = deadline
        for bound in self.bounds:
            bound.reschedule(deadline)


class _RestartPause:
    """The pause before a long-running cell's next instance: none after the first failure,
    then ``RESTART_PAUSE_FIRST_S`` doubling up to ``RESTART_PAUSE_MAX_S``; an instance that
    ran ``RESTART_PAUSE_RESET_S`` or longer starts the series again."""

    def __init__(self) -> None:
        self._next = 0.0

    def next(self, ran_s: float) -> float:
        """The pause before the next start, after an instance that lasted ``ran_s``."""
        if ran_s >= RESTART_PAUSE_RESET_S:
            self._next = 0.0
        pause = self._next
        self._next = RESTART_PAUSE_FIRST_S if pause == 0 else min(pause * 2, RESTART_PAUSE_MAX_S)
        return pause


def _max_concurrency(spec: CellSpec, cell_type: CellType) -> int:
    params = spec.params if isinstance(spec.params, dict) else {}
    value = params.get("max_concurrency")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    return cell_type.default_max_concurrency
