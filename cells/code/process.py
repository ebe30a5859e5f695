"""One job's OS process, supervised: its pipes, its stdin fed while stdout and stderr are read
(capped), its wall-clock timeout and its kill.

Every process a cell runs is a job of a zygote (:mod:`cells.code.zygote_client`); what is
here does not care how the process was started, only that :class:`Child` can wait for it and
kill it. The supervisor writes stdin while it reads stdout and stderr (a script that answers
before it has read everything cannot deadlock), keeps at most ``max_stdout_bytes`` of stdout
(more kills the script: reading on would only buffer what is thrown away; or, ``overflow=
"close"``, closes the pipe so the writer gets SIGPIPE as under ``| head -c``) and only the tail
of stderr, and kills the job's whole tree when the wall-clock timeout elapses.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

_CHUNK = 1 << 16
KILL_GRACE = 5.0  # how long a SIGKILLed process may take to be reported as exited
_DRAIN_GRACE = 0.5  # after a timeout: how long a process outside the group may hold the pipes


DEFAULT_MAX_PROCESSES = 512
"""Processes (and threads) one job may run at once, by default: ``params.max_processes``."""


@dataclass(frozen=True, slots=True)
class Limits:
    """Kernel resource limits for one job, set in the forked child before the script runs or
    the program is exec'd (so they hold from its first instruction)."""

    cpu_seconds: int | None = None
    """RLIMIT_CPU: SIGXCPU at this many CPU seconds, SIGKILL one second later."""
    address_space_mb: int | None = None
    """RLIMIT_AS: allocations beyond it fail (MemoryError in Python)."""
    max_processes: int | None = None
    """Tasks the job may run at once: ``pids.max`` of its own cgroup where a pids cgroup is
    writable, else RLIMIT_NPROC set that far above the machine's task count (ignored for root;
    see ``zygote.py``). Forks beyond it fail (EAGAIN)."""


@dataclass(frozen=True, slots=True)
class RunResult:
    """What happened to one run."""

    exit_code: int
    """The exit status; -1 when a signal ended the process (including our kill)."""
    stdout: bytes
    """At most ``max_stdout_bytes``: the first ones."""
    stderr: bytes
    """The last ``max_stderr_bytes`` bytes, as written."""
    stderr_truncated: bool
    duration_ms: int
    """Wall clock from the start to the exit."""
    timed_out: bool
    """The timeout elapsed before the run finished; the process group was killed."""
    stdout_overflow: bool
    """The script wrote more than ``max_stdout_bytes``: it was killed, ``stdout`` is the head."""
    term_signal: int | None = None
    """The signal that ended the process, if one did (SIGXCPU for a CPU limit, SIGKILL…)."""
    stderr_overflow: bool = False
    """``overflow="close"`` only: stderr passed its cap and its pipe was closed."""


Overflow = Literal["kill", "close"]
"""What happens to a job whose output passes its cap (see :func:`supervise`)."""


class ProcessError(Exception):
    """The process could not be started or supervised (binary missing, zygote down…)."""


# ---------------------------------------------------------------------------------------------
# Pipes and the supervisor.


class Pipes:
    """Three pipes: the child's ends (``child``) and ours (``stdin``, ``stdout``, ``stderr``)."""

    def __init__(self) -> None:
        ends: list[int] = []
        try:
            for _ in range(3):
                ends.extend(os.pipe())
        except OSError as exc:
            close_fds(ends)
            raise ProcessError(f"cannot create pipes: {exc}") from None
        in_r, self.stdin, self.stdout, out_w, self.stderr, err_w = ends
        self.child = [in_r, out_w, err_w]

    def close_child(self) -> None:
        close_fds(self.child)
        self.child = []

    def close_ours(self) -> None:
        close_fds([self.stdin, self.stdout, self.stderr])


def close_fds(fds: Sequence[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


class _Reader:
    """Read a pipe to its end, keeping its head (stopping past ``limit``) or its tail.

    A head reader that overflows stops reading; with ``close_on_overflow`` it also closes the
    pipe at once, so the writer gets SIGPIPE instead of blocking until it is killed.
    """

    def __init__(self, fd: int, limit: int, *, tail: bool, close_on_overflow: bool = False) -> None:
        self._loop = asyncio.get_running_loop()
        self._fd = fd
        self._limit = limit
        self._tail = tail
        self._close_on_overflow = close_on_overflow
        self.data = bytearray()
        self.total = 0
        self.overflow = False
        self.done: asyncio.Future[None] = self._loop.create_future()
        os.set_blocking(fd, False)
        self._loop.add_reader(fd, self._on_readable)

    def _on_readable(self) -> None:
        try:
            chunk = os.read(self._fd, _CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._stop()
            return
        self.total += len(chunk)
        if self._tail:
            self.data += chunk
            excess = len(self.data) - self._limit
            if excess > 0:
                del self.data[:excess]
            return
        room = self._limit - len(self.data)
        if len(chunk) > room:
            self.data += chunk[:room]
            self.overflow = True
            if self._close_on_overflow:
                self.close()
            else:
                self._stop()  # the pipe stays open, so the writer blocks until it is killed
        else:
            self.data += chunk

    def _stop(self) -> None:
        if not self.done.done():
            self._loop.remove_reader(self._fd)
            self.done.set_result(None)

    def close(self) -> None:
        self._stop()
        if self._fd >= 0:
            close_fds([self._fd])
            self._fd = -1


class _PipeWriter:
    """Write ``data`` to a pipe as it drains, then close it (EPIPE just ends the writing)."""

    def __init__(self, fd: int, data: bytes) -> None:
        self._loop = asyncio.get_running_loop()
        self._fd = fd
        self._data = memoryview(data)
        self._pos = 0
        self._watching = False
        if not data:
            self.close()
            return
        os.set_blocking(fd, False)
        self._loop.add_writer(fd, self._on_writable)
        self._watching = True

    def _on_writable(self) -> None:
        try:
            self._pos += os.write(self._fd, self._data[self._pos : self._pos + _CHUNK])
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # the script closed its stdin or exited: it has read all it wanted
            self.close()
            return
        if self._pos >= len(self._data):
            self.close()

    def close(self) -> None:
        if self._watching:
            self._loop.remove_writer(self._fd)
            self._watching = False
        if self._fd >= 0:
            close_fds([self._fd])
            self._fd = -1


class Child(Protocol):
    """A started process, as the supervisor sees it."""

    async def wait(self) -> int:
        """Its exit status; negative: the signal that ended it."""
        ...

    def kill(self) -> None:
        """SIGKILL its whole process group now (nothing once it is known to have exited)."""
        ...

    def exited(self) -> None:
        """It has exited: kill whatever is left of its process group."""
        ...


def exit_fields(status: int) -> tuple[int, int | None]:
    """A wait status (negative: the signal that ended the process) as a :class:`RunResult`'s
    ``exit_code`` (-1 when a signal ended it) and ``term_signal``; forked, spawned and pool
    runs all read it this way."""
    return (status, None) if status >= 0 else (-1, -status)


async def supervise(
    child: Child,
    pipes: Pipes,
    stdin: bytes,
    *,
    started: float,
    timeout: float,  # noqa: ASYNC109 (a deadline to enforce, not a wait to bound)
    max_stdout_bytes: int,
    max_stderr_bytes: int,
    overflow: Overflow = "kill",
) -> RunResult:
    """Feed stdin, collect stdout/stderr and the exit status, enforce timeout and output cap.

    ``overflow="kill"``: stdout past its cap kills the job, stderr keeps its tail.
    ``overflow="close"``: each stream keeps its head and its pipe is closed past its cap.
    """
    loop = asyncio.get_running_loop()
    writer: _PipeWriter | None = None
    out: _Reader | None = None
    err: _Reader | None = None
    exit_task: asyncio.Task[int] | None = None
    ended: list[float] = []
    try:
        writer = _PipeWriter(pipes.stdin, stdin)
        closing = overflow == "close"
        out = _Reader(pipes.stdout, max_stdout_bytes, tail=False, close_on_overflow=closing)
        err = _Reader(pipes.stderr, max_stderr_bytes, tail=not closing, close_on_overflow=closing)
        exit_task = asyncio.ensure_future(child.wait())
        exit_task.add_done_callback(lambda _task: ended.append(loop.time()))
        deadline = started + timeout
        exit_seen = killed = timed_out = False
        while True:
            if exit_task.done() and not exit_seen:
                exit_task.result()  # raises if supervision failed (the zygote died)
                exit_seen = True
                child.exited()
            if out.overflow and not killed and not closing:
                killed = True
                child.kill()
            waiting = [f for f in (exit_task, out.done, err.done) if not f.done()]
            remaining = deadline - loop.time()
            if not waiting or remaining <= 0:
                break
            await asyncio.wait(waiting, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        if waiting:
            timed_out = True
            if not exit_task.done():
                child.kill()
                done, _ = await asyncio.wait([exit_task], timeout=KILL_GRACE)
                if not done:
                    raise ProcessError("the process did not exit after SIGKILL")
            exit_task.result()
            if not exit_seen:
                child.exited()
            pipes_open = [f for f in (out.done, err.done) if not f.done()]
            if pipes_open:  # only a process that left the group can still hold them
                await asyncio.wait(pipes_open, timeout=_DRAIN_GRACE)
        exit_code, term_signal = exit_fields(exit_task.result())
        return RunResult(
            exit_code=exit_code,
            stdout=bytes(out.data),
            stderr=bytes(err.data),
            stderr_truncated=err.overflow or err.total > max_stderr_bytes,
            duration_ms=round(((ended[0] if ended else loop.time()) - started) * 1000),
            timed_out=timed_out,
            stdout_overflow=out.overflow,
            stderr_overflow=err.overflow,
            term_signal=term_signal,
        )
    finally:
        if exit_task is None or not exit_task.done():
            child.kill()  # cancelled or failed mid-run: never leave the process behind
        if exit_task is not None:
            if exit_task.done():
                if not exit_task.cancelled():
                    exit_task.exception()  # retrieved: it was raised above if it matters
            else:
                exit_task.cancel()
        for closer in (writer, out, err):
            if closer is not None:
                closer.close()
        if writer is None:
            close_fds([pipes.stdin])
        if out is None:
            close_fds([pipes.stdout])
        if err is None:
            close_fds([pipes.stderr])
