"""A warm Python worker that forks one fresh child per job.

Spawning ``python3 -c SCRIPT`` costs tens of milliseconds, nearly all of it interpreter start-up.
This process pays that once: it starts, pre-imports a few stdlib modules, then waits for jobs
and ``os.fork()``s a child per job, which runs the script with its own stdin/stdout/stderr and
exits. Every message still gets a fresh process; it just starts warm.

It is a standalone stdlib-only script, never imported by the daemon: ``cells/code/process.py``
starts it as ``INTERPRETER -c BOOTSTRAP zygote.py FD`` (the bootstrap drops the working
directory from ``sys.path``, so this folder's modules are never importable by scripts) and
talks to it over the Unix stream socket ``FD``. Its fds 0-2 must be pipes: the std streams the
interpreter builds for them are then exactly what a spawned script gets, and every child
inherits them unused. Scripts given as source are compiled once here, for all their jobs.

Protocol (one socket, both ways):

* daemon → zygote: frames of a 4-byte big-endian length and a JSON object.
  ``{"op": "run", "job": N, "script" | "path": ..., "cwd", "cpu", "as_mb"}`` carries the
  child's stdin, stdout and stderr pipe ends as ``SCM_RIGHTS`` on the frame's first byte;
  ``{"op": "kill", "job": N}`` SIGKILLs the job's process group if the child is not reaped yet.
* zygote → daemon: JSON lines. ``{"ready": PID}`` once; per job ``{"job": N, "pid": P}`` after
  the fork (or ``{"job": N, "error": "..."}``), then ``{"job": N, "status": S}`` after the
  child is reaped, ``S`` as ``os.waitstatus_to_exitcode`` gives it (negative: a signal).
  ``{"fatal": "..."}`` says why the zygote is about to exit, when it knows.

The loop is single-threaded and never blocks on one child: SIGCHLD only wakes the selector
(``signal.set_wakeup_fd``). An exited child is first observed with ``WNOWAIT``, so it stays a
zombie while its process group is killed: the pid (and so the group id) cannot be reused until
it is reaped, which makes every kill here race-free. The zygote is a child subreaper where
Linux allows it, so grandchildren orphaned by a job are reaped here too, not left as zombies
under an init that may not reap. End of file on the socket (the daemon closed it or died)
kills every job's group, reaps them and exits.
"""

from __future__ import annotations

import array
import atexit
import builtins
import collections  # noqa: F401 (pre-imported for scripts, like datetime, math and re)
import contextlib
import datetime  # noqa: F401
import gc
import json
import math  # noqa: F401
import os
import re  # noqa: F401
import resource
import selectors
import signal
import socket
import stat
import struct
import sys
import time
import traceback
import types
from typing import Any, NoReturn

FDS_PER_JOB = 3
CODE_CACHE_SIZE = 256
_HEADER = struct.Struct(">I")
_PR_SET_CHILD_SUBREAPER = 36


def _become_subreaper() -> None:
    """Adopt orphaned grandchildren so they are reaped here (Linux only; best effort)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except Exception:  # no ctypes, no prctl: orphans go to init as usual
        pass


# ---------------------------------------------------------------------------------------------
# The child: everything below runs after fork, in the job's process.


def _close_range_is_fast() -> bool:
    """Whether ``os.closerange`` is one close_range(2) call here, not a loop over the range.

    Probed once, far above any fd in use: a loop over 50 000 numbers takes milliseconds.
    """
    began = time.perf_counter()
    os.closerange(1 << 20, (1 << 20) + 50_000)
    return time.perf_counter() - began < 0.002


_FAST_CLOSE_RANGE = False


def _close_other_fds() -> None:
    """Close every fd above 2: the socket, the selector, other jobs' pipe ends in flight."""
    if _FAST_CLOSE_RANGE:
        os.closerange(3, 0x7FFFFFFF)
        return
    for listing in ("/proc/self/fd", "/dev/fd"):
        try:
            fds = [int(name) for name in os.listdir(listing)]
        except OSError:
            continue
        for fd in fds:
            if fd > 2:
                with contextlib.suppress(OSError):
                    os.close(fd)
        return
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    os.closerange(3, soft if 0 < soft < 1 << 16 else 1 << 16)


def _apply_limits(cpu: int | None, as_mb: int | None) -> None:
    """RLIMIT_CPU (soft: SIGXCPU, one second later SIGKILL) and RLIMIT_AS, never above hard."""

    def clamp(value: int, hard: int) -> int:
        if hard == resource.RLIM_INFINITY:
            return value
        return hard if value == resource.RLIM_INFINITY else min(value, hard)

    if cpu is not None:
        _soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
        resource.setrlimit(resource.RLIMIT_CPU, (clamp(cpu, hard), clamp(cpu + 1, hard)))
        # SIGXCPU dumps core by default: a limited script must not leave cores behind.
        _soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
        resource.setrlimit(resource.RLIMIT_CORE, (0, hard))
    if as_mb is not None:
        _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        size = clamp(as_mb * 1024 * 1024, hard)
        resource.setrlimit(resource.RLIMIT_AS, (size, size))


def _exit_code_of(exc: SystemExit) -> int:
    """What the interpreter does with an uncaught SystemExit."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    with contextlib.suppress(Exception):
        sys.stderr.write(f"{code}\n")
    return 1


def _run_script(job: dict[str, Any], code: types.CodeType | None) -> int:
    """Run the job's code as ``__main__`` like ``python3 -c`` / ``python3 PATH``; its exit code.

    ``code`` is the script already compiled by the zygote, if it compiles.
    """
    path: str | None = job.get("path")
    main = types.ModuleType("__main__")
    namespace = main.__dict__
    namespace["__builtins__"] = builtins
    sys.modules["__main__"] = main
    safe_path = bool(getattr(sys.flags, "safe_path", False))
    if path is None:
        source: str | bytes = job.get("script") or ""
        filename = "<string>"
        sys.argv = ["-c"]
        if not safe_path:
            sys.path.insert(0, "")
    else:
        filename = path
        sys.argv = [path]
        namespace["__file__"] = path
        namespace["__cached__"] = None
        if not safe_path:
            sys.path.insert(0, os.path.dirname(os.path.realpath(path)))
        try:
            if code is None:
                with open(path, "rb") as handle:
                    source = handle.read()
        except OSError as exc:
            sys.stderr.write(
                f"{os.path.basename(sys.executable)}: can't open file {path!r}: "
                f"[Errno {exc.errno}] {exc.strerror}\n"
            )
            return 2
    try:
        if code is None:
            code = compile(source, filename, "exec", dont_inherit=True)
        exec(code, namespace)
    except SystemExit as exc:
        return _exit_code_of(exc)
    except BaseException as exc:
        # Drop this frame: the traceback starts at the script, as the interpreter's does.
        traceback.print_exception(
            type(exc), exc, exc.__traceback__.tb_next if exc.__traceback__ else None
        )
        if isinstance(exc, KeyboardInterrupt):
            return -int(signal.SIGINT)
        return 1
    return 0


def _finish(code: int) -> NoReturn:
    """Interpreter shutdown, trimmed: join threads, run atexit, flush, then ``_exit``."""
    threading = sys.modules.get("threading")
    if threading is not None:
        with contextlib.suppress(BaseException):
            threading._shutdown()
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except BaseException:
            if stream is sys.stdout:
                code = code or 120  # the interpreter's status when stdout cannot be flushed
    if code < 0:  # die by the signal, as the interpreter does for KeyboardInterrupt
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


def _child(job: dict[str, Any], fds: list[int], code: types.CodeType | None) -> NoReturn:
    """The forked child: own session, its pipes on 0/1/2, limits, then the script.

    ``sys.stdin``/``stdout``/``stderr`` are kept: the interpreter built them at start-up for
    fds 0-2, which the daemon made pipes, so they are the streams ``python3 -c`` would get
    on its pipes; the zygote never used them, so they hold nothing.
    """
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        _close_other_fds()
        try:
            _apply_limits(job.get("cpu"), job.get("as_mb"))
            cwd = job.get("cwd")
            if cwd is not None:
                os.chdir(cwd)
        except (OSError, ValueError) as exc:
            os.write(2, f"zygote: cannot prepare the job: {exc}\n".encode())
            os._exit(126)
        status = _run_script(job, code)
    except BaseException:
        with contextlib.suppress(BaseException):
            traceback.print_exc()
        os._exit(1)
    _finish(status)


# ---------------------------------------------------------------------------------------------
# The zygote loop.


class Zygote:
    """The single-threaded job loop: fork on ``run``, reap on SIGCHLD, report over the socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.selector = selectors.DefaultSelector()
        self.inbox = bytearray()
        self.fd_queue: list[int] = []
        self.pids: dict[int, int] = {}  # child pid -> job id, until reaped
        self.jobs: dict[int, int] = {}  # job id -> child pid, until reaped
        self.code_cache: dict[str, types.CodeType] = {}
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        self.wake_r = wake_r
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)
        self.selector.register(sock, selectors.EVENT_READ)
        self.selector.register(wake_r, selectors.EVENT_READ)

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def serve(self) -> None:
        self.send({"ready": os.getpid()})
        while True:
            for key, _events in self.selector.select():
                if key.fileobj is self.sock:
                    if not self.receive():
                        return
                else:
                    try:
                        while os.read(self.wake_r, 4096):
                            pass
                    except BlockingIOError:
                        pass
            self.reap()

    def receive(self) -> bool:
        """Read what the daemon sent; False at end of file."""
        space = socket.CMSG_SPACE(FDS_PER_JOB * 4 * 8)
        try:
            data, ancdata, flags, _addr = self.sock.recvmsg(1 << 16, space)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            return False
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds = array.array("i")
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
                self.fd_queue.extend(fds)
        if flags & socket.MSG_CTRUNC:  # descriptors were lost: no job can be trusted now
            return False
        if not data:
            return False
        self.inbox += data
        while len(self.inbox) >= _HEADER.size:
            (length,) = _HEADER.unpack_from(self.inbox)
            if len(self.inbox) < _HEADER.size + length:
                break
            frame = bytes(self.inbox[_HEADER.size : _HEADER.size + length])
            del self.inbox[: _HEADER.size + length]
            self.handle(json.loads(frame))
        return True

    def handle(self, message: dict[str, Any]) -> None:
        op = message.get("op")
        job = int(message["job"])
        if op == "run":
            fds = self.fd_queue[:FDS_PER_JOB]
            del self.fd_queue[:FDS_PER_JOB]
            self.fork(job, message, fds)
        elif op == "kill":
            pid = self.jobs.get(job)
            if pid is not None:
                self.kill_group(pid)

    def fork(self, job: int, message: dict[str, Any], fds: list[int]) -> None:
        if len(fds) != FDS_PER_JOB:
            self.close_all(fds)
            self.send({"job": job, "error": "the job's pipes did not arrive"})
            return
        path = message.get("path")
        if path is None:
            code = self.compiled(message.get("script"))
        else:
            code = self.compiled_file(os.path.join(message.get("cwd") or "", path), path)
        try:
            pid = os.fork()
        except OSError as exc:
            self.close_all(fds)
            self.send({"job": job, "error": f"fork failed: {exc}"})
            return
        if pid == 0:
            try:
                _child(message, fds, code)
            finally:
                os._exit(1)
        self.close_all(fds)
        self.pids[pid] = job
        self.jobs[job] = pid
        self.send({"job": job, "pid": pid})

    def compiled(self, script: str | None) -> types.CodeType | None:
        """``script`` compiled once for all its jobs (None: a file, or it does not compile).

        ``dont_inherit``: the zygote's own ``from __future__`` imports must not leak in.
        """
        if script is None:
            return None
        code = self.code_cache.get(script)
        if code is None:
            try:
                code = compile(script, "<string>", "exec", dont_inherit=True)
            except Exception:  # the child compiles it again and reports the error
                return None
            if len(self.code_cache) >= CODE_CACHE_SIZE:
                del self.code_cache[next(iter(self.code_cache))]
            self.code_cache[script] = code
        return code

    def compiled_file(self, where: str, name: str) -> types.CodeType | None:
        """The script file at ``where`` compiled once per version of the file (its inode, size
        and modification time), so a job does not pay a compile; None when it cannot be read
        or does not compile (the child then tries and reports it as ``python3 PATH`` would)."""
        try:
            info = os.stat(where)
        except OSError:
            return None
        key = f"{where}\0{info.st_ino}\0{info.st_size}\0{info.st_mtime_ns}"
        code = self.code_cache.get(key)
        if code is None:
            try:
                with open(where, "rb") as handle:
                    code = compile(handle.read(), name, "exec", dont_inherit=True)
            except Exception:
                return None
            if len(self.code_cache) >= CODE_CACHE_SIZE:
                del self.code_cache[next(iter(self.code_cache))]
            self.code_cache[key] = code
        return code

    @staticmethod
    def close_all(fds: list[int]) -> None:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    @staticmethod
    def kill_group(pid: int) -> None:
        """SIGKILL the job's group, and the child itself in case it has not called setsid yet.

        Only called while ``pid`` is unreaped, so neither id can belong to anyone else.
        """
        for kill in (os.killpg, os.kill):
            with contextlib.suppress(OSError):
                kill(pid, signal.SIGKILL)

    def reap(self) -> None:
        """Reap every exited child; a job's group is killed first, while its leader is a zombie."""
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None or info.si_pid == 0:
                return
            pid = info.si_pid
            if pid in self.pids:
                self.kill_group(pid)
            try:
                _pid, status = os.waitpid(pid, 0)
            except ChildProcessError:
                continue
            job = self.pids.pop(pid, None)
            if job is not None:
                del self.jobs[job]
                self.send({"job": job, "status": os.waitstatus_to_exitcode(status)})

    def shutdown(self) -> None:
        """The daemon is gone: kill every job's group and reap before exiting."""
        for pid in list(self.pids):
            self.kill_group(pid)
        for pid in list(self.pids):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        self.pids.clear()
        self.jobs.clear()


def main(argv: list[str]) -> None:
    global _FAST_CLOSE_RANGE
    sock = socket.socket(fileno=int(argv[-1]))
    sock.setblocking(True)
    if not all(stat.S_ISFIFO(os.fstat(fd).st_mode) for fd in (0, 1, 2)):
        sock.sendall(b'{"fatal": "fds 0, 1 and 2 must be pipes"}\n')
        os._exit(2)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _become_subreaper()
    _FAST_CLOSE_RANGE = _close_range_is_fast()
    zygote = Zygote(sock)
    # Everything made so far lives as long as the zygote. Frozen, a child's collector never
    # walks it, so the child does not copy those pages on write just to look at them.
    gc.freeze()
    try:
        zygote.serve()
    except OSError:
        pass  # the daemon went away while we reported to it
    except BaseException as exc:
        with contextlib.suppress(OSError):
            zygote.send({"fatal": f"{type(exc).__name__}: {exc}"})
    finally:
        zygote.shutdown()
    os._exit(0)


if __name__ in ("__main__", "__zygote__"):
    main(sys.argv)
