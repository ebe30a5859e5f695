"""The daemon's side of the zygote (``zygote.py``, where the protocol is described).

A zygote is a warm single-threaded Python worker the daemon starts with an allow-listed
environment (see :mod:`cells.code.isolation`); every job a cell runs is forked by it:

* :meth:`Zygote.run` with ``script``/``path`` forks the job from the warm interpreter, which
  skips the interpreter start-up (about 2 ms a message instead of 30-45 ms on the machine this
  was written on) while still giving every message a fresh process. Python scripts only.
* :meth:`Zygote.run` with ``argv`` (and :func:`run_spawned`, which uses the shared zygote of the
  daemon's own Python) forks a child that ``exec``s the program: ``python3 -c``, ``bash -c``,
  ``node -e``, the bash cell's ``/bin/sh -c``.

Either way the job gets real pipes for stdin, stdout and stderr, created here and handed over
the socket, and is then supervised by :func:`cells.code.process.supervise`. A job is a tree,
not a process group: its leader is a child subreaper, so a grandchild that called ``setsid()``
is still found and killed (see ``zygote.py``); when the leader exits, what is left of the tree
is killed too.

The daemon itself never forks: it runs threads, and only ``exec`` is safe from a threaded
process. The zygote is a separate single-threaded process started with ``subprocess``.
"""

from __future__ import annotations

import array
import asyncio
import collections
import contextlib
import itertools
import json
import os
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from cells.code.isolation import job_environment, seal_daemon
from cells.code.process import (
    Limits,
    Overflow,
    Pipes,
    ProcessError,
    RunResult,
    close_fds,
    supervise,
)

T = TypeVar("T")

__all__ = [
    "ZYGOTE_SCRIPT",
    "Zygote",
    "ZygoteJob",
    "close_shared_zygotes",
    "run_spawned",
    "shared_zygote",
]

ZYGOTE_SCRIPT = Path(__file__).with_name("zygote.py")

# ``python3 -c`` semantics for the zygote (PYTHONPATH, user site-packages, the environment's
# PYTHON* settings all apply, as they do to a spawned ``python3 -c``), minus the working
# directory on sys.path while the zygote imports: scripts get theirs back in the child.
_BOOTSTRAP = (
    "import sys\n"
    "if sys.path and sys.path[0] == '':\n"
    "    del sys.path[0]\n"
    "import runpy\n"
    "runpy.run_path(sys.argv[1], run_name='__zygote__')\n"
)

_RECV_CHUNK = 1 << 16
_HEADER = struct.Struct(">I")
_START_TIMEOUT = 15.0  # the zygote's start-up, once
_CLOSE_GRACE = 2.0  # how long a closed zygote gets to kill its jobs and exit by itself
_NO_LIMITS = Limits()


class _UndeliveredError(ProcessError):
    """The zygote died before it took the job: nothing ran, so the job may be retried."""


class _Job:
    __slots__ = ("pid", "started", "status")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.pid: int | None = None
        self.started: asyncio.Future[int] = loop.create_future()
        self.status: asyncio.Future[int] = loop.create_future()


class _Connection:
    """One running zygote process and its socket, bound to the event loop that started it."""

    def __init__(self, popen: subprocess.Popen[bytes], sock: socket.socket) -> None:
        self.loop = asyncio.get_running_loop()
        self.popen = popen
        self.sock = sock
        self.dead: str | None = None
        self.fatal: str | None = None
        self.ready: asyncio.Future[int] = self.loop.create_future()
        self.cgroups = False
        self.jobs: dict[int, _Job] = {}
        self._ids = itertools.count(1)
        self._inbox = bytearray()
        self._outbox: collections.deque[tuple[memoryview, list[int]]] = collections.deque()
        self._writing = False
        sock.setblocking(False)
        self.loop.add_reader(sock.fileno(), self._on_readable)

    # -- sending: synchronous, so a kill can be posted even from a cancelled task

    def post(self, message: dict[str, Any], fds: list[int] | None = None) -> None:
        """Queue a frame; ``fds`` (now owned here) go with its first byte and are then closed."""
        payload = json.dumps(message).encode()
        self._outbox.append((memoryview(_HEADER.pack(len(payload)) + payload), fds or []))
        if self.dead is not None:
            self._drop_outbox()
            raise _UndeliveredError(self.dead)
        if not self._writing:
            self._flush()

    def _flush(self) -> None:
        while self._outbox and self.dead is None:
            view, fds = self._outbox[0]
            ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
            try:
                sent = self.sock.sendmsg([view], ancillary if fds else [])
            except (BlockingIOError, InterruptedError):
                if not self._writing:
                    self.loop.add_writer(self.sock.fileno(), self._flush)
                    self._writing = True
                return
            except OSError as exc:
                self.fail(f"the zygote is gone ({exc.strerror})")
                return
            close_fds(fds)  # in flight now: the kernel holds its own references
            if sent < len(view):
                self._outbox[0] = (view[sent:], [])
            else:
                self._outbox.popleft()
        if self._writing:
            self.loop.remove_writer(self.sock.fileno())
            self._writing = False

    def _drop_outbox(self) -> None:
        while self._outbox:
            close_fds(self._outbox.popleft()[1])

    def kill_job(self, job_id: int) -> None:
        """Ask the zygote to SIGKILL the job's group (it knows whether the pid is still its)."""
        if self.dead is None and job_id in self.jobs:
            with contextlib.suppress(ProcessError):
                self.post({"op": "kill", "job": job_id})

    # -- receiving

    def _on_readable(self) -> None:
        try:
            data = self.sock.recv(_RECV_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self.fail(f"the zygote exited ({self.fatal})" if self.fatal else "the zygote exited")
            return
        self._inbox += data
        while (end := self._inbox.find(b"\n")) >= 0:
            line = bytes(self._inbox[:end])
            del self._inbox[: end + 1]
            try:
                self._dispatch(json.loads(line))
            except (ValueError, KeyError, TypeError):
                self.fail("the zygote sent an unreadable report")
                return

    def _dispatch(self, message: dict[str, Any]) -> None:
        if "ready" in message:
            self.cgroups = bool(message.get("cgroup"))
            if not self.ready.done():
                self.ready.set_result(int(message["ready"]))
            return
        if "fatal" in message:  # its last words; the end of file follows
            self.fatal = str(message["fatal"])
            return
        job_id = int(message["job"])
        job = self.jobs.get(job_id)
        if job is None:
            return
        if "pid" in message:
            job.pid = int(message["pid"])
            if not job.started.done():
                job.started.set_result(job.pid)
        elif "status" in message:
            del self.jobs[job_id]
            if not job.status.done():
                job.status.set_result(int(message["status"]))
        elif "error" in message:
            del self.jobs[job_id]
            if not job.started.done():
                job.started.set_exception(ProcessError(f"zygote: {message['error']}"))
                job.started.exception()  # whoever awaits it still gets it; nobody else logs it

    # -- running a job

    async def start(
        self,
        message: dict[str, Any],
        child_fds: list[int],
        *,
        timeout: float,  # noqa: ASYNC109 (how long the fork may take)
    ) -> ZygoteJob:
        """Post ``message`` with ``child_fds`` (owned here from now on: they become the job's
        fds 0-2 and are closed on our side) and wait until the zygote has forked the job."""
        job_id = next(self._ids)
        job = _Job(self.loop)
        self.jobs[job_id] = job
        try:
            self.post({**message, "job": job_id}, child_fds)
            try:
                await asyncio.wait_for(asyncio.shield(job.started), timeout)
            except TimeoutError:
                raise ProcessError("the zygote did not start the job in time") from None
        except BaseException:
            if self.dead is None:
                self.kill_job(job_id)  # cancelled while it starts: killed once it is forked
            else:
                self.jobs.pop(job_id, None)
            raise
        return ZygoteJob(self, job_id, job)

    async def run(
        self,
        message: dict[str, Any],
        stdin: bytes,
        *,
        timeout: float,  # noqa: ASYNC109 (the script's wall-clock limit)
        max_stdout_bytes: int,
        max_stderr_bytes: int,
        overflow: Overflow,
    ) -> RunResult:
        pipes = Pipes()
        started = self.loop.time()
        child_fds, pipes.child = pipes.child, []
        try:
            child = await self.start(message, child_fds, timeout=timeout)
        except BaseException:
            pipes.close_ours()
            raise
        return await supervise(
            child,
            pipes,
            stdin,
            started=started,
            timeout=timeout,
            max_stdout_bytes=max_stdout_bytes,
            max_stderr_bytes=max_stderr_bytes,
            overflow=overflow,
        )

    # -- ending

    def fail(self, reason: str) -> None:
        """The zygote is gone or broken: kill it and its jobs' groups, fail the jobs."""
        if self.dead is not None:
            return
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait()
        for job in self.jobs.values():
            if job.pid is not None:  # nobody else can kill them now
                for kill in (os.killpg, os.kill):
                    with contextlib.suppress(OSError):
                        kill(job.pid, signal.SIGKILL)
        if not self.ready.done():
            reason = f"{reason} during start-up (exit status {self.popen.returncode})"
        self._shut(reason, retry_unstarted=True)

    async def close(self) -> None:
        """Close the socket; the zygote then kills its jobs' groups, reaps them and exits."""
        self._shut("the zygote was closed")
        for _ in range(int(_CLOSE_GRACE / 0.01)):
            if self.popen.poll() is not None:
                return
            await asyncio.sleep(0.01)
        self.popen.kill()
        self.popen.wait()

    def _shut(self, reason: str, *, retry_unstarted: bool = False) -> None:
        """Mark the connection dead and fail its jobs; ``retry_unstarted``: jobs the zygote
        had not forked yet fail with :class:`_UndeliveredError`, so :meth:`Zygote.run` retries them.
        """
        if self.dead is None:
            self.dead = reason
            if not self.loop.is_closed():
                self.loop.remove_reader(self.sock.fileno())
                if self._writing:
                    self.loop.remove_writer(self.sock.fileno())
                    self._writing = False
            self.sock.close()
            self._drop_outbox()
        if self.loop.is_closed():  # its futures can no longer call back; nobody awaits them
            self.jobs.clear()
            return
        futures: list[tuple[asyncio.Future[int], ProcessError]] = [
            (self.ready, ProcessError(reason))
        ]
        for job in self.jobs.values():
            retry = retry_unstarted and not job.started.done()
            error = _UndeliveredError(reason) if retry else ProcessError(reason)
            futures += [(job.started, error), (job.status, ProcessError(reason))]
        self.jobs.clear()
        for future, error in futures:
            if not future.done():
                future.set_exception(error)
                future.exception()  # awaiting it still raises; an unawaited one stays quiet


class ZygoteJob:
    """A job the zygote has forked: what :func:`~cells.code.process.supervise` needs of it
    (a :class:`~cells.code.process.Child`), and what a pool worker's owner needs."""

    def __init__(self, conn: _Connection, job_id: int, job: _Job) -> None:
        self._conn = conn
        self._job_id = job_id
        self._job = job

    @property
    def pid(self) -> int | None:
        return self._job.pid

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop of the zygote connection it belongs to."""
        return self._conn.loop

    async def wait(self) -> int:
        return await self._job.status

    def kill(self) -> None:
        if not self._job.status.done():
            self._conn.kill_job(self._job_id)

    def exited(self) -> None:
        pass  # the zygote killed the group before it reaped the child


class Zygote:
    """A warm Python worker that forks a fresh process per job (see ``zygote.py``).

    Bound to the event loop that starts it; used from another loop, it restarts there. If the
    worker dies, the jobs it was running fail with :class:`ProcessError` and the next
    :meth:`run` starts a new one. Starting the first one seals the daemon
    (:func:`cells.code.isolation.seal_daemon`).
    """

    def __init__(self, interpreter: str) -> None:
        self.interpreter = interpreter
        self._conn: _Connection | None = None
        self._starting: asyncio.Task[_Connection] | None = None

    @property
    def pid(self) -> int | None:
        """The worker's pid while it runs."""
        conn = self._conn
        return conn.popen.pid if conn is not None and conn.dead is None else None

    async def start(self) -> None:
        """Start the worker unless it runs; raises :class:`ProcessError` if it cannot start."""
        await self._connection()

    @property
    def counts_in_cgroups(self) -> bool:
        """Whether each job gets its own pids cgroup (else RLIMIT_NPROC holds the count)."""
        conn = self._conn
        return conn is not None and conn.dead is None and conn.cgroups

    async def run(
        self,
        *,
        script: str | None = None,
        path: str | None = None,
        argv: Sequence[str] | None = None,
        stdin: bytes,
        timeout: float,  # noqa: ASYNC109 (the documented API: the script's wall-clock limit)
        limits: Limits = _NO_LIMITS,
        max_stdout_bytes: int = 4 * 1024 * 1024,
        max_stderr_bytes: int = 8 * 1024,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        overflow: Overflow = "kill",
    ) -> RunResult:
        """Run ``script`` (source) or ``path`` (a .py file) as ``python3 -c`` / ``python3 PATH``
        in a forked child, or exec ``argv`` (any program, looked up on the job's ``PATH``).

        ``__name__`` is ``"__main__"``, ``sys.argv`` is ``["-c"]`` or ``[path]``, and the
        working directory or the script's directory comes first on ``sys.path``. ``env`` is the
        job's whole environment (default: :func:`cells.code.isolation.job_environment`); a
        forked script sees it in ``os.environ``, but variables the interpreter reads at start-up
        (``PYTHONPATH``…) are the zygote's. Raises :class:`ProcessError` if the job cannot
        start (a program not found, a missing working directory, the zygote down).
        """
        if sum(x is not None for x in (script, path, argv)) != 1:
            raise ValueError("give exactly one of script, path and argv")
        if argv is not None and not argv:
            raise ValueError("argv is empty")
        message = _run_message(script, path, argv, cwd, env, limits)
        return await self._on_connection(
            lambda conn: conn.run(
                message,
                stdin,
                timeout=timeout,
                max_stdout_bytes=max_stdout_bytes,
                max_stderr_bytes=max_stderr_bytes,
                overflow=overflow,
            )
        )

    async def launch(
        self,
        path: str,
        fds: Sequence[int],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        limits: Limits = _NO_LIMITS,
    ) -> ZygoteJob:
        """Fork a long-lived job running the Python file ``path`` (as :meth:`run` would) whose
        fds 0, 1 and 2 are copies of ``fds`` (the caller keeps and closes its own), and return it
        once it runs, unsupervised: its owner talks to it over those fds, kills it and waits for
        its status. This is how pool workers start (:mod:`cells.code.pool`)."""
        if len(fds) != 3:
            raise ValueError("a job has exactly three fds: 0, 1 and 2")
        message = _run_message(None, path, None, cwd, env, limits)
        # Copied anew for each attempt: start() owns (and closes) the copies it is given.
        return await self._on_connection(
            lambda conn: conn.start(message, [os.dup(fd) for fd in fds], timeout=_START_TIMEOUT)
        )

    async def _on_connection(self, attempt: Callable[[_Connection], Awaitable[T]]) -> T:
        """``attempt`` on the zygote's connection, once more on a new zygote if the first one
        died before it forked the job (then it is safe to run it anew)."""
        for tries in range(2):
            conn = await self._connection()
            try:
                return await attempt(conn)
            except _UndeliveredError as exc:
                if tries:
                    raise ProcessError(str(exc)) from None
        raise AssertionError("unreachable")

    async def close(self) -> None:
        """Stop the worker; jobs still running are killed (their runs raise ProcessError)."""
        loop = asyncio.get_running_loop()
        task, self._starting = self._starting, None
        if task is not None and task.get_loop() is loop:
            with contextlib.suppress(Exception):
                await asyncio.shield(task)
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    async def _connection(self) -> _Connection:
        loop = asyncio.get_running_loop()
        while (conn := self._conn) is not None:
            if conn.loop is loop and conn.dead is None:
                return conn
            self._conn = None
            await conn.close()  # dead, or left behind by another event loop; then look again
        task = self._starting
        if task is None or task.get_loop() is not loop:
            task = self._starting = loop.create_task(self._spawn())
            task.add_done_callback(self._started)
        return await asyncio.shield(task)

    def _started(self, task: asyncio.Task[_Connection]) -> None:
        if self._starting is task:
            self._starting = None
        if not task.cancelled():
            task.exception()  # awaiters get it; an abandoned start stays quiet

    async def _spawn(self) -> _Connection:
        seal_daemon()  # before the first process that is not the daemon exists
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        # Its fds 0-2 are pipes (with nobody at the other end), so the std streams its
        # interpreter builds at start-up are the ones a spawned script gets on its pipes:
        # every forked child inherits them ready-made.
        stdin_r, stdin_w = os.pipe()
        output_r, output_w = os.pipe()
        try:
            # Not asyncio's subprocess: its child watcher would tie the zygote to this loop.
            popen = subprocess.Popen(  # noqa: ASYNC220 (once; fork+exec returns at once)
                [self.interpreter, "-c", _BOOTSTRAP, str(ZYGOTE_SCRIPT), str(theirs.fileno())],
                stdin=stdin_r,
                stdout=output_w,
                stderr=output_w,
                pass_fds=(theirs.fileno(),),
                env=job_environment(),  # the allow-list only: jobs can read the zygote's
                start_new_session=True,  # the terminal's Ctrl-C is the daemon's to handle
            )
        except OSError as exc:
            ours.close()
            what = "not found" if isinstance(exc, FileNotFoundError) else f"failed: {exc}"
            raise ProcessError(f"cannot start the zygote: {self.interpreter!r} {what}") from None
        finally:
            theirs.close()
            close_fds([stdin_r, stdin_w, output_r, output_w])
        conn = _Connection(popen, ours)
        try:
            async with asyncio.timeout(_START_TIMEOUT):
                await asyncio.shield(conn.ready)
        except TimeoutError:
            await conn.close()
            raise ProcessError("the zygote did not start in time") from None
        except BaseException:
            await conn.close()
            raise
        self._conn = conn
        return conn


def _run_message(
    script: str | None,
    path: str | None,
    argv: Sequence[str] | None,
    cwd: str | None,
    env: Mapping[str, str] | None,
    limits: Limits,
) -> dict[str, Any]:
    """The zygote's ``run`` frame (see ``zygote.py``); the working directory checked first."""
    if cwd is not None and not os.path.isdir(cwd):
        raise ProcessError(f"working directory {cwd!r} not found")
    return {
        "op": "run",
        "script": script,
        "path": path,
        "argv": None if argv is None else list(argv),
        "cwd": cwd,
        "env": job_environment() if env is None else dict(env),
        "cpu": limits.cpu_seconds,
        "as_mb": limits.address_space_mb,
        "nproc": limits.max_processes,
    }


_shared: dict[str, Zygote] = {}


def shared_zygote(interpreter: str) -> Zygote:
    """The process-wide zygote for ``interpreter`` (created here, started by the caller)."""
    zygote = _shared.get(interpreter)
    if zygote is None:
        zygote = _shared[interpreter] = Zygote(interpreter)
    return zygote


async def close_shared_zygotes() -> None:
    """Close every shared zygote (daemon shutdown, tests)."""
    zygotes = list(_shared.values())
    _shared.clear()
    for zygote in zygotes:
        await zygote.close()


async def run_spawned(
    argv: Sequence[str],
    stdin: bytes,
    *,
    timeout: float,  # noqa: ASYNC109 (the documented API: the program's wall-clock limit)
    max_stdout_bytes: int = 4 * 1024 * 1024,
    max_stderr_bytes: int = 8 * 1024,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    limits: Limits = _NO_LIMITS,
    overflow: Overflow = "kill",
) -> RunResult:
    """Exec ``argv`` as a job of the daemon's own Python's shared zygote (see
    :meth:`Zygote.run`). Raises :class:`ProcessError` if it cannot be started."""
    return await shared_zygote(sys.executable).run(
        argv=argv,
        stdin=stdin,
        timeout=timeout,
        limits=limits,
        max_stdout_bytes=max_stdout_bytes,
        max_stderr_bytes=max_stderr_bytes,
        cwd=cwd,
        env=env,
        overflow=overflow,
    )
