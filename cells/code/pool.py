"""``isolation: "pool"``: warm worker processes that run one python3 cell's script message
after message, without a fork or an exec per message (``pool_worker.py`` is the worker).

Each cell has its own pool of at most ``max_concurrency`` workers, started on demand. A worker
is a job of the cell's zygote (:meth:`cells.code.zygote_client.Zygote.launch`), so it starts
with exactly what a forked job gets: the allow-listed environment, the cell's folder, its own
session and process tree, the address-space and process limits. A message is one frame over a
socket, its answer a few frames back; the result is the :class:`~cells.code.process.RunResult`
a forked child would have produced, so the cell reads it the same way.

A worker is replaced — killed, and the next message gets a fresh one — when the message
timed out, printed past ``max_output_bytes``, killed the process (``os._exit``, a crash, the CPU
limit), raised ``MemoryError``, left threads or processes behind, or grew past
``pool_max_rss_mb``; and recycled after ``pool_max_jobs`` messages.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import struct
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cells.code.process import (
    KILL_GRACE,
    Limits,
    ProcessError,
    RunResult,
    close_fds,
    exit_fields,
)
from cells.code.zygote_client import Zygote, ZygoteJob

__all__ = ["WORKER_SCRIPT", "PoolSettings", "PoolStats", "WorkerPool", "pool_stats"]

WORKER_SCRIPT = Path(__file__).with_name("pool_worker.py")

_LENGTH = struct.Struct(">I")
_FRAME = struct.Struct(">cI")
_END = struct.Struct(">ib")
_RETIRE = 1
_UNREAD = 64
"""The worker's fds 1 and 2 held bytes not read yet when it ended the message."""
_REASONS = {
    2: "the script left a thread running",
    4: "the script raised MemoryError",
    8: "the script left a process behind",
    16: "the worker's peak resident memory passed pool_max_rss_mb",
}
"""Why a worker retired by itself (the bits of its end frame's flags, see pool_worker.py)."""
_CHUNK = 1 << 16
_STDERR_TAIL = 8 * 1024


@dataclass(frozen=True, slots=True)
class PoolSettings:
    """What every worker of one cell gets."""

    script: str | None
    """The inline script's source (or None: ``path``)."""
    path: str | None
    """The script file, absolute."""
    cwd: str
    env: Mapping[str, str]
    limits: Limits
    """``cpu_seconds`` applies to each message; the others to the worker's whole life."""
    max_output_bytes: int
    max_jobs: int
    max_rss_mb: int | None
    size: int
    """Idle workers kept: the cell's ``max_concurrency``."""


class _PoolMessage:
    """The message a worker is running: what it printed so far, and how it ended."""

    __slots__ = (
        "cap",
        "deadline",
        "ended",
        "overflow",
        "size",
        "stderr",
        "stderr_total",
        "stdout",
        "timed_out",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, cap: int, deadline: float) -> None:
        self.cap = cap
        self.deadline = deadline
        self.stdout: list[bytes] = []
        """What was printed, chunk by chunk (usually one: joining it copies nothing)."""
        self.size = 0
        self.stderr = bytearray()
        self.stderr_total = 0
        self.overflow = False
        self.timed_out = False
        self.ended: asyncio.Future[tuple[int, int] | None] = loop.create_future()
        """``(status, flags)`` from the worker's end frame; None: the worker is gone."""

    def out(self, data: bytes) -> bool:
        """Keep stdout up to the cap; True when this passed the cap (the first time)."""
        if self.overflow:
            return False
        room = self.cap - self.size
        if len(data) > room:
            self.stdout.append(data[:room])
            self.size = self.cap
            self.overflow = True
            return True
        self.stdout.append(data)
        self.size += len(data)
        return False

    def err(self, data: bytes) -> None:
        self.stderr_total += len(data)
        self.stderr += data
        if len(self.stderr) > 2 * _STDERR_TAIL:
            del self.stderr[:-_STDERR_TAIL]

    def end(self, value: tuple[int, int] | None) -> None:
        if not self.ended.done():
            self.ended.set_result(value)

    def time_out(self) -> None:
        if not self.ended.done():
            self.timed_out = True
            self.ended.set_result(None)


class _PoolWorker:
    """One worker process: its socket (frames), its stdout/stderr pipes (direct writes)."""

    def __init__(self, job: ZygoteJob, sock: socket.socket, out_fd: int, err_fd: int) -> None:
        self.loop = job.loop
        self.job = job
        self.sock = sock
        self.out_fd = out_fd
        self.err_fd = err_fd
        self.jobs = 0
        self.dead = False
        self.retired = 0
        """The flags of the end frame that retired this worker (0: it did not)."""
        self.current: _PoolMessage | None = None
        self._watch: asyncio.TimerHandle | None = None
        """One timer for the timeouts of all its messages, set for ``_watch_at``: a message
        that ends first (nearly all) costs no timer of its own."""
        self._watch_at = 0.0
        self._inbox = bytearray()
        self._outbox = bytearray()
        self._writing = False
        sock.setblocking(False)
        for fd in (out_fd, err_fd):
            os.set_blocking(fd, False)
        self.loop.add_reader(sock.fileno(), self._on_frames)
        self.loop.add_reader(out_fd, self._on_pipe, out_fd)
        self.loop.add_reader(err_fd, self._on_pipe, err_fd)

    # -- sending

    def send(self, body: bytes) -> None:
        if self.dead:  # it died before this (a failed start): nothing will read the frame
            if self.current is not None:
                self.current.end(None)
            return
        frame = _LENGTH.pack(len(body)) + body
        if not self._outbox:  # the usual case: one send takes it all
            try:
                sent = self.sock.send(frame)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                self._gone()
                return
            if sent == len(frame):
                return
            frame = frame[sent:]
        self._outbox += frame
        if not self._writing:
            self._flush()

    def _flush(self) -> None:
        while self._outbox and not self.dead:
            try:
                sent = self.sock.send(self._outbox)
            except (BlockingIOError, InterruptedError):
                if not self._writing:
                    self.loop.add_writer(self.sock.fileno(), self._flush)
                    self._writing = True
                return
            except OSError:
                self._gone()
                return
            del self._outbox[:sent]
        if self._writing:
            self._writing = False
            if not self.dead:
                self.loop.remove_writer(self.sock.fileno())

    # -- receiving

    def _on_frames(self) -> None:
        try:
            data = self.sock.recv(_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._gone()
            return
        inbox = self._inbox
        if inbox:  # the rest of a frame an earlier recv began
            inbox += data
            data = bytes(inbox)
            inbox.clear()
        at, size = 0, len(data)
        while size - at >= _FRAME.size:
            kind, length = _FRAME.unpack_from(data, at)
            start = at + _FRAME.size
            end = start + length
            if end > size:
                break
            self._frame(kind, data[start:end])
            at = end
        if at < size:
            inbox += data[at:]

    def _frame(self, kind: bytes, body: bytes) -> None:
        message = self.current
        if message is None or message.ended.done():
            return  # after its message was reported (the worker is being replaced)
        if kind == b"o":
            if message.out(body):
                self.kill()  # as a forked child past its cap; its end frame may be on its way
        elif kind == b"e":
            message.err(body)
        elif kind == b"x":
            status, flags = _END.unpack_from(body)
            if flags & _UNREAD:
                self._drain()  # what the script wrote to fds 1 and 2 before it ended
            message.end((status, flags))

    def _on_pipe(self, fd: int) -> None:
        try:
            data = os.read(fd, _CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.loop.remove_reader(fd)
            return
        self._take(fd, data)

    def _take(self, fd: int, data: bytes) -> None:
        message = self.current
        if message is None or message.ended.done():
            return
        if fd == self.err_fd:
            message.err(data)
        elif message.out(data):
            self.kill()

    def _drain(self) -> None:
        for fd in (self.out_fd, self.err_fd):
            while True:
                try:
                    data = os.read(fd, _CHUNK)
                except OSError:  # BlockingIOError: nothing more; else closed
                    break
                if not data:
                    break
                self._take(fd, data)

    # -- running one message

    async def run(self, stdin: bytes, timeout: float, cap: int) -> tuple[RunResult, bool]:  # noqa: ASYNC109
        """Run one message: its result, and whether this worker may run another."""
        loop = self.loop
        started = loop.time()
        deadline = started + timeout
        message = self.current = _PoolMessage(loop, cap, deadline)
        self.jobs += 1
        try:
            self.send(stdin)
            if self._watch is None or self._watch_at > deadline:
                self._arm(deadline)
            outcome = await message.ended
            ended_at = loop.time()
            if outcome is not None:  # the script ended (past its output cap or not)
                status, flags = outcome
                if flags & _RETIRE:
                    self.retired = flags
                reusable = not flags & _RETIRE and not message.overflow
                return self._result(message, status, started, ended_at), reusable
            # Timed out, or the worker died (killed past its output cap, crashed, exited).
            self.kill()
            status = await self._status()
            self._drain()
            timed_out = message.timed_out
            return self._result(message, status, started, ended_at, timed_out=timed_out), False
        except BaseException:
            self.close()  # cancelled mid-message, or the zygote is gone: never leave it running
            raise
        finally:
            self.current = None

    def _arm(self, deadline: float) -> None:
        if self._watch is not None:
            self._watch.cancel()
        self._watch = self.loop.call_at(deadline, self._on_watch)
        self._watch_at = deadline

    def _on_watch(self) -> None:
        """The timer is due: the running message timed out if its deadline has passed, else
        the timer waits for it (a later message's)."""
        self._watch = None
        message = self.current
        if message is None or message.ended.done():
            return
        if message.deadline <= self._watch_at:
            message.time_out()
        else:
            self._arm(message.deadline)

    async def _status(self) -> int:
        """The worker's exit status, from the zygote that reaps it."""
        try:
            return await asyncio.wait_for(self.job.wait(), KILL_GRACE)
        except TimeoutError:
            raise ProcessError("a pool worker did not exit after SIGKILL") from None

    @staticmethod
    def _result(
        message: _PoolMessage, status: int, started: float, ended: float, *, timed_out: bool = False
    ) -> RunResult:
        exit_code, term_signal = exit_fields(status)
        return RunResult(
            exit_code=exit_code,
            stdout=b"".join(message.stdout),
            stderr=bytes(message.stderr[-_STDERR_TAIL:]),
            stderr_truncated=message.stderr_total > _STDERR_TAIL,
            duration_ms=round((ended - started) * 1000),
            timed_out=timed_out,
            stdout_overflow=message.overflow,
            term_signal=term_signal,
        )

    # -- ending

    def _gone(self) -> None:
        """End of file on the socket: the worker exited (or is exiting)."""
        if self.dead:
            return
        self.dead = True
        self._unwatch()
        if self.current is not None:
            self.current.end(None)

    def _unwatch(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.remove_reader(self.sock.fileno())
        if self._writing:
            self.loop.remove_writer(self.sock.fileno())
            self._writing = False

    def kill(self) -> None:
        """SIGKILL the worker and whatever its script left running (the zygote kills its tree)."""
        self.job.kill()

    def close(self) -> None:
        """Kill the worker and let go of its fds (a message it runs ends as if it crashed)."""
        self.kill()
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        if self.current is not None:
            self.current.end(None)
        if not self.dead:
            self.dead = True
            self._unwatch()
        if not self.loop.is_closed():
            for fd in (self.out_fd, self.err_fd):
                self.loop.remove_reader(fd)
        self.sock.close()
        close_fds([self.out_fd, self.err_fd])
        self.out_fd = self.err_fd = -1


@dataclass(frozen=True, slots=True)
class PoolStats:
    """One pool's workers, as metrics read them (``colony_code_workers``)."""

    cell: str
    workers: int
    """Workers alive now, idle or busy."""
    restarts: int
    """Workers replaced so far: killed or retired after a message, or recycled."""


_POOLS: weakref.WeakSet[WorkerPool] = weakref.WeakSet()
"""Every pool not closed yet (a scrape reads them; a dropped pool leaves by itself)."""


def pool_stats() -> list[PoolStats]:
    """The workers of every open pool of this process, by cell."""
    return [pool.stats() for pool in list(_POOLS)]


class WorkerPool:
    """The warm workers of one ``isolation: "pool"`` cell (see the module docstring)."""

    def __init__(
        self, zygote: Zygote, settings: PoolSettings, *, log: Any = None, cell: str = ""
    ) -> None:
        self.zygote = zygote
        self.settings = settings
        self.log = log
        self.cell = cell
        self._told: set[int] = set()
        self._idle: list[_PoolWorker] = []
        self._busy: set[_PoolWorker] = set()
        self.restarts = 0
        """Workers replaced after a message (see :class:`PoolStats`)."""
        s = settings
        self._hello = json.dumps(
            {
                "script": s.script,
                "path": s.path,
                "cpu": s.limits.cpu_seconds,
                "max_rss_kb": None if s.max_rss_mb is None else s.max_rss_mb * 1024,
                "stdout_cap": s.max_output_bytes,
            }
        ).encode()
        _POOLS.add(self)

    def stats(self) -> PoolStats:
        return PoolStats(self.cell, len(self.pids), self.restarts)

    @property
    def pids(self) -> list[int]:
        """The pids of the workers alive now (idle or busy)."""
        workers = [*self._idle, *self._busy]
        return [w.job.pid for w in workers if not w.dead and w.job.pid is not None]

    async def run(self, stdin: bytes, *, timeout: float) -> RunResult:  # noqa: ASYNC109
        """Run one message on an idle worker (or a new one); raises :class:`ProcessError`
        when no worker can be started."""
        worker = self._idle_worker() or await self._start()
        self._busy.add(worker)
        try:
            result, reusable = await worker.run(stdin, timeout, self.settings.max_output_bytes)
        finally:
            self._busy.discard(worker)
        if (
            reusable
            and not worker.dead
            and worker.jobs < self.settings.max_jobs
            and len(self._idle) < self.settings.size
        ):
            self._idle.append(worker)
        else:
            if not reusable or worker.dead or worker.jobs >= self.settings.max_jobs:
                self.restarts += 1  # (not merely one more idle worker than the pool keeps)
            worker.close()
            self._tell(worker.retired)
        return result

    def _tell(self, flags: int) -> None:
        """Log, once per cell and reason, why a worker retired by itself: a script that does
        it every message pays for a new worker every message (``fork`` is then cheaper)."""
        if self.log is None:
            return
        for bit, why in _REASONS.items():
            if flags & bit and bit not in self._told:
                self._told.add(bit)
                self.log.warning(
                    "code_pool_worker_replaced",
                    cell=self.cell,
                    reason=why,
                    detail="the next message starts a new worker; if every message does this, "
                    "isolation 'fork' costs less (logged once per cell and reason)",
                )

    def _idle_worker(self) -> _PoolWorker | None:
        """An idle worker still alive on this event loop, if there is one."""
        if not self._idle:
            return None
        loop = asyncio.get_running_loop()
        while self._idle:
            worker = self._idle.pop()
            if not worker.dead and worker.loop is loop:
                return worker
            worker.close()
        return None

    async def _start(self) -> _PoolWorker:
        s = self.settings
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            job = await self.zygote.launch(
                str(WORKER_SCRIPT),
                [theirs.fileno(), out_w, err_w],
                cwd=s.cwd,
                env=s.env,
                limits=Limits(
                    address_space_mb=s.limits.address_space_mb,
                    max_processes=s.limits.max_processes,
                ),
            )
        except BaseException:
            ours.close()
            close_fds([out_r, err_r])
            raise
        finally:
            theirs.close()
            close_fds([out_w, err_w])
        worker = _PoolWorker(job, ours, out_r, err_r)
        worker.send(self._hello)
        return worker

    async def close(self) -> None:
        """Kill every worker (a message still running fails as its worker is gone)."""
        _POOLS.discard(self)
        workers = [*self._idle, *self._busy]
        self._idle.clear()
        for worker in workers:
            worker.close()
