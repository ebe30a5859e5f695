"""A warm Python worker that starts every process a cell runs: it forks one fresh child per job.

Spawning ``python3 -c SCRIPT`` costs tens of milliseconds, nearly all of it interpreter start-up.
This process pays that once: it starts, pre-imports a few stdlib modules, then waits for jobs
and ``os.fork()``s a child per job, which runs the script with its own stdin/stdout/stderr and
exits. Every message still gets a fresh process; it just starts warm. Jobs that are not Python
scripts (``bash`` cells, ``isolation: spawn``) are forked here too and ``exec`` their program,
so every cell process has this clean helper as its parent, never the daemon.

It is a standalone stdlib-only script, never imported by the daemon: ``cells/code/zygote_client.py``
starts it as ``INTERPRETER -c BOOTSTRAP zygote.py FD`` (the bootstrap drops the working
directory from ``sys.path``, so this folder's modules are never importable by scripts) and
talks to it over the Unix stream socket ``FD``. Its fds 0-2 must be pipes: the std streams the
interpreter builds for them are then exactly what a spawned script gets, and every child
inherits them unused. Scripts given as source are compiled once here, for all their jobs. It is
started with an allow-list environment and makes itself non-dumpable, so neither its
``/proc/PID/environ`` nor its memory holds anything of the daemon's a job could read.

Protocol (one socket, both ways):

* daemon → zygote: frames of a 4-byte big-endian length and a JSON object.
  ``{"op": "run", "job": N, "script" | "path" | "argv": ..., "cwd", "env", "cpu", "as_mb",
  "nproc"}`` carries the child's stdin, stdout and stderr pipe ends as ``SCM_RIGHTS`` on the
  frame's first byte; ``{"op": "kill", "job": N}`` kills the job's whole tree if its leader is
  not reaped yet.
* zygote → daemon: JSON lines. ``{"ready": PID, "cgroup": bool}`` once; per job
  ``{"job": N, "pid": P}`` after the fork (or ``{"job": N, "error": "..."}``: nothing runs),
  then ``{"job": N, "status": S}`` after the child is reaped, ``S`` as
  ``os.waitstatus_to_exitcode`` gives it (negative: a signal). ``{"fatal": "..."}`` says why the
  zygote is about to exit, when it knows.

A job is a tree, not a process group. Its leader (the forked child) leads a new session and is
a child subreaper, so whatever its processes leave orphaned — even a grandchild that called
``setsid()`` to leave the group — is re-parented to the leader while the job runs, and to this
zygote once the leader has exited. The zygote forks nothing but job leaders, so every other
child it has is a leftover of a job that has ended: it is killed on sight. Where a cgroup v1
``pids`` hierarchy is writable (a root daemon on a v1 or hybrid host), each job also runs in its
own cgroup with ``pids.max`` = the job's process limit, and killing a job kills every process in
it. Elsewhere the limit is ``RLIMIT_NPROC`` (see :func:`_apply_limits`).

The loop is single-threaded and never blocks on one child: SIGCHLD only wakes the selector
(``signal.set_wakeup_fd``). An exited child is first observed with ``WNOWAIT``, so it stays a
zombie while its tree is killed: the pid (and so the group id) cannot be reused until it is
reaped, which makes every kill here race-free. End of file on the socket (the daemon closed it
or died) kills every job's tree, reaps them and exits.
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
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36
_KILL_ROUNDS = 50  # a job's cgroup is emptied in at most this many kill-and-look rounds


_libc_prctl: Any = None


def _prctl(option: int, value: int) -> bool:
    """``prctl(option, value)`` on Linux; False where it is not available. The C function is
    looked up once, in the zygote, so a child pays only the call."""
    global _libc_prctl
    if not sys.platform.startswith("linux"):
        return False
    try:
        if _libc_prctl is None:
            import ctypes

            _libc_prctl = ctypes.CDLL(None, use_errno=True).prctl
        return bool(_libc_prctl(option, value, 0, 0, 0) == 0)
    except Exception:  # no ctypes, no prctl
        return False


def _pids_of(path: str) -> list[int]:
    """The pids listed in a cgroup's ``cgroup.procs`` (none if it cannot be read)."""
    try:
        with open(os.path.join(path, "cgroup.procs")) as handle:
            return [int(line) for line in handle if line.strip()]
    except (OSError, ValueError):
        return []


class PidsCgroups:
    """One cgroup v1 ``pids`` cgroup per job, under ``meclaw-<zygote pid>`` in the zygote's own.

    :meth:`open` returns None unless the hierarchy is mounted and writable here (as it is for a
    root daemon on a cgroup v1 or hybrid host; a cgroup v2 ``pids`` controller cannot be
    delegated to a process that shares its cgroup with others, so v2 is not used).
    """

    def __init__(self, root: str) -> None:
        self.root = root

    @classmethod
    def open(cls) -> PidsCgroups | None:
        try:
            with open("/proc/self/cgroup") as handle:
                own = next(
                    (
                        line.rstrip("\n").split(":", 2)[2]
                        for line in handle
                        if "pids" in line.split(":", 2)[1].split(",")
                    ),
                    None,
                )
            if own is None:
                return None
            with open("/proc/self/mountinfo") as handle:
                for line in handle:
                    fields = line.split()
                    dash = fields.index("-")
                    kind, options = fields[dash + 1], fields[dash + 3].split(",")
                    if kind != "cgroup" or "pids" not in options:
                        continue
                    mount_root, mount_point = fields[3], fields[4]
                    if mount_root != "/" and own.startswith(mount_root):
                        own = own[len(mount_root) :] or "/"
                    parent = os.path.join(mount_point, own.lstrip("/"))
                    cls._remove_stale(parent)
                    root = os.path.join(parent, f"meclaw-{os.getpid()}")
                    os.mkdir(root)
                    return cls(root)
        except (OSError, ValueError, IndexError):
            return None
        return None

    @staticmethod
    def _remove_stale(parent: str) -> None:
        """Remove the empty job cgroups a zygote that was killed left behind."""
        try:
            names = [n for n in os.listdir(parent) if n.startswith("meclaw-")]
        except OSError:
            return
        for name in names:
            pid = name.removeprefix("meclaw-")
            if not pid.isdigit() or os.path.exists(f"/proc/{pid}"):
                continue
            where = os.path.join(parent, name)
            with contextlib.suppress(OSError):
                for job in os.listdir(where):
                    if os.path.isdir(os.path.join(where, job)):
                        with contextlib.suppress(OSError):
                            os.rmdir(os.path.join(where, job))
                os.rmdir(where)

    def make(self, job: int, limit: int) -> str | None:
        """A new cgroup for ``job`` holding at most ``limit`` processes (None if refused)."""
        path = os.path.join(self.root, f"job-{job}")
        try:
            os.mkdir(path)
            with open(os.path.join(path, "pids.max"), "w") as handle:
                handle.write(str(limit))
        except OSError:
            with contextlib.suppress(OSError):
                os.rmdir(path)
            return None
        return path

    @staticmethod
    def kill(path: str) -> None:
        """SIGKILL every process in the cgroup, again until none is left or rounds run out
        (``pids.max`` keeps a fork bomb from outrunning this)."""
        for _ in range(_KILL_ROUNDS):
            pids = _pids_of(path)
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)

    @staticmethod
    def remove(path: str) -> bool:
        """Remove the cgroup once it is empty; True when it is gone."""
        try:
            os.rmdir(path)
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return True

    def close(self) -> None:
        with contextlib.suppress(OSError):
            for name in os.listdir(self.root):
                if name.startswith("job-"):
                    self.kill(os.path.join(self.root, name))
                    self.remove(os.path.join(self.root, name))
            os.rmdir(self.root)


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


def _close_other_fds(first: int = 3) -> None:
    """Close every fd from ``first`` on: the socket, the selector, other jobs' pipe ends."""
    if _FAST_CLOSE_RANGE:
        os.closerange(first, 0x7FFFFFFF)
        return
    for listing in ("/proc/self/fd", "/dev/fd"):
        try:
            fds = [int(name) for name in os.listdir(listing)]
        except OSError:
            continue
        for fd in fds:
            if fd >= first:
                with contextlib.suppress(OSError):
                    os.close(fd)
        return
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    os.closerange(first, soft if 0 < soft < 1 << 16 else 1 << 16)


def _tasks_on_the_machine() -> int:
    """How many tasks (processes and threads) run on the machine, from ``/proc/loadavg``."""
    try:
        with open("/proc/loadavg") as handle:
            return int(handle.read().split()[3].split("/")[1])
    except (OSError, ValueError, IndexError):
        return 0


def _apply_limits(cpu: int | None, as_mb: int | None, nproc: int | None) -> None:
    """RLIMIT_CPU (soft: SIGXCPU, one second later SIGKILL), RLIMIT_AS and RLIMIT_NPROC, never
    above hard.

    RLIMIT_NPROC counts every task of the user, not of the job, so it is set to the tasks on the
    machine now plus ``nproc``: the job can always start ``nproc`` more, and a fork bomb stops
    at most that far above the machine's count. The kernel does not apply it to root (nor to
    CAP_SYS_RESOURCE): there only a job cgroup holds the count.
    """

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
    if nproc is not None:
        _soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
        count = clamp(_tasks_on_the_machine() + nproc, hard)
        resource.setrlimit(resource.RLIMIT_NPROC, (count, count))


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
            # A stream the script closed is skipped, as the interpreter skips it.
            if stream is not None and not stream.closed:
                stream.flush()
        except BaseException:
            if stream is sys.stdout:
                code = code or 120  # the interpreter's status when stdout cannot be flushed
    if code < 0:  # die by the signal, as the interpreter does for KeyboardInterrupt
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


def _join(cgroup: str | None) -> None:
    """Move this process into its job's cgroup (a job that asked for a process limit does not
    run without it)."""
    if cgroup is None:
        return
    try:
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as handle:
            handle.write(str(os.getpid()))
    except OSError as exc:
        raise OSError(exc.errno, f"cannot join the job's pids cgroup: {exc.strerror}") from None


def _child(
    job: dict[str, Any],
    fds: list[int],
    code: types.CodeType | None,
    zygote: int,
    cgroup: str | None,
    report: int | None,
) -> NoReturn:
    """The forked child: own session, a subreaper for its tree, its cgroup, its pipes on
    0/1/2, limits, working directory and environment, then the script (or ``exec``).

    ``sys.stdin``/``stdout``/``stderr`` are kept: the interpreter built them at start-up for
    fds 0-2, which the daemon made pipes, so they are the streams ``python3 -c`` would get
    on its pipes; the zygote never used them, so they hold nothing. ``report`` (exec jobs) is
    a close-on-exec pipe: it closes unread when the program starts, else it carries the error.
    """
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        # Die with the zygote; orphans of this job come here, not to the zygote, while it runs.
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != zygote:
            os._exit(1)
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        if report is not None:  # kept as fd 3, still close-on-exec
            if report != 3:
                os.dup2(report, 3, inheritable=False)
            report = 3
        _close_other_fds(3 if report is None else 4)
        argv: list[str] | None = job.get("argv")
        env: dict[str, str] | None = job.get("env")
        try:
            _join(cgroup)
            _apply_limits(job.get("cpu"), job.get("as_mb"), job.get("nproc"))
            cwd = job.get("cwd")
            if cwd is not None:
                os.chdir(cwd)
            if argv is not None:
                # What Python ignores, a program expects at its default (subprocess's
                # restore_signals): a writer into a closed pipe dies of SIGPIPE, as under a shell.
                for number in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):
                    signal.signal(number, signal.SIG_DFL)
                os.execvpe(argv[0], argv, os.environ if env is None else env)
            if env is not None:
                _set_environment(env)
                # As a spawned interpreter reads it at start-up: no bytecode caches beside the
                # modules a script imports (a read-only tree: ``meclaw --state-dir``).
                sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
        except (OSError, ValueError) as exc:
            if report is not None:
                with contextlib.suppress(OSError):
                    os.write(report, _exec_failure(exc, argv, job.get("cwd")).encode())
            else:
                os.write(2, f"zygote: cannot prepare the job: {exc}\n".encode())
            os._exit(127 if argv is not None else 126)
        status = _run_script(job, code)
    except BaseException:
        with contextlib.suppress(BaseException):
            traceback.print_exc()
        os._exit(1)
    _finish(status)


def _set_environment(env: dict[str, str]) -> None:
    """Make ``os.environ`` exactly ``env``, touching only what differs: usually nothing, since
    the zygote was started with the same allow-list (a full rewrite costs about a millisecond)."""
    for name in [name for name in os.environ if name not in env]:
        del os.environ[name]
    for name, value in env.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


def _exec_failure(exc: BaseException, argv: list[str] | None, cwd: str | None) -> str:
    """Why an exec job did not start, in the words ``process.py`` reports."""
    program = argv[0] if argv else "?"
    if isinstance(exc, FileNotFoundError):
        if cwd is not None and exc.filename == cwd:
            return f"working directory {cwd!r} not found"
        return f"{program!r} not found: {exc.strerror}"
    if isinstance(exc, OSError):
        return f"cannot start {program!r}: {exc.strerror or exc}"
    return f"cannot start {program!r}: {exc}"


# ---------------------------------------------------------------------------------------------
# The zygote loop.


def _children() -> list[int]:
    """The pids of this process's children (``/proc/self/task/*/children``, else a scan)."""
    me = os.getpid()
    try:
        with open(f"/proc/self/task/{me}/children") as handle:
            return [int(pid) for pid in handle.read().split()]
    except OSError:
        pass
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as handle:
                    if int(handle.read().rsplit(b")", 1)[1].split()[1]) == me:
                        found.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return found


class ZygoteLoop:
    """The single-threaded job loop: fork on ``run``, reap on SIGCHLD, report over the socket."""

    def __init__(self, sock: socket.socket, cgroups: PidsCgroups | None) -> None:
        self.sock = sock
        self.cgroups = cgroups
        self.selector = selectors.DefaultSelector()
        self.inbox = bytearray()
        self.fd_queue: list[int] = []
        self.pids: dict[int, int] = {}  # child pid -> job id, until reaped
        self.jobs: dict[int, int] = {}  # job id -> child pid, until reaped
        self.cgroup_of: dict[int, str] = {}  # job id -> its cgroup, while its leader runs
        self.spent: list[str] = []  # cgroups of ended jobs, removed once empty
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
        self.send({"ready": os.getpid(), "cgroup": self.cgroups is not None})
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
                self.kill_tree(pid, self.cgroup_of.get(job))

    def fork(self, job: int, message: dict[str, Any], fds: list[int]) -> None:
        if len(fds) != FDS_PER_JOB:
            self.close_all(fds)
            self.send({"job": job, "error": "the job's pipes did not arrive"})
            return
        path = message.get("path")
        code = None
        if message.get("argv") is not None:
            pass  # exec: nothing to compile
        elif path is None:
            code = self.compiled(message.get("script"))
        else:
            code = self.compiled_file(os.path.join(message.get("cwd") or "", path), path)
        nproc = message.get("nproc")
        cgroup = None
        if self.cgroups is not None and isinstance(nproc, int):
            cgroup = self.cgroups.make(job, nproc)
        report_r, report_w = os.pipe() if message.get("argv") is not None else (None, None)
        me = os.getpid()
        try:
            pid = os.fork()
        except OSError as exc:
            self.close_all([*fds, *(fd for fd in (report_r, report_w) if fd is not None)])
            self.drop_cgroup(cgroup)
            self.send({"job": job, "error": f"fork failed: {exc}"})
            return
        if pid == 0:
            try:
                _child(message, fds, code, me, cgroup, report_w)
            finally:
                os._exit(1)
        self.close_all(fds)
        if report_r is not None and report_w is not None:
            os.close(report_w)
            failure = self.read_report(report_r)
            if failure:  # the child exits 127 and is reaped as a leftover
                self.drop_cgroup(cgroup)
                self.send({"job": job, "error": failure})
                return
        self.pids[pid] = job
        self.jobs[job] = pid
        if cgroup is not None:
            self.cgroup_of[job] = cgroup
        self.send({"job": job, "pid": pid})

    @staticmethod
    def read_report(fd: int) -> str:
        """What an exec job's child wrote before it failed; empty once its program started
        (the close-on-exec pipe then reaches end of file unwritten)."""
        chunks = []
        try:
            while chunk := os.read(fd, 4096):
                chunks.append(chunk)
        except OSError:
            pass
        finally:
            os.close(fd)
        return b"".join(chunks).decode("utf-8", "replace")

    def drop_cgroup(self, cgroup: str | None) -> None:
        if cgroup is not None:
            self.spent.append(cgroup)

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
    def kill_tree(pid: int, cgroup: str | None) -> None:
        """SIGKILL the job: its leader's group (and the leader itself, in case it has not called
        setsid yet) and every process of its cgroup. What left the group without a cgroup to
        find it by is killed once it is re-parented here (:meth:`kill_strays`).

        Only called while ``pid`` is unreaped, so neither id can belong to anyone else.
        """
        for kill in (os.killpg, os.kill):
            with contextlib.suppress(OSError):
                kill(pid, signal.SIGKILL)
        if cgroup is not None:
            PidsCgroups.kill(cgroup)

    def kill_strays(self) -> None:
        """Kill every child that is not a running job's leader: all of them are leftovers of
        jobs that ended (each leader was a subreaper while it ran). Then remove the cgroups
        of ended jobs that are empty."""
        for pid in _children():
            if pid not in self.pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        if self.spent:
            for cgroup in self.spent:
                PidsCgroups.kill(cgroup)
            self.spent = [c for c in self.spent if not PidsCgroups.remove(c)]

    def reap(self) -> None:
        """Reap every exited child; a job's tree is killed first, while its leader is a zombie."""
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                break
            if info is None or info.si_pid == 0:
                break
            pid = info.si_pid
            job = self.pids.get(pid)
            if job is not None:
                self.kill_tree(pid, self.cgroup_of.get(job))
            try:
                _pid, status = os.waitpid(pid, 0)
            except ChildProcessError:
                continue
            if job is not None:
                del self.pids[pid]
                del self.jobs[job]
                self.drop_cgroup(self.cgroup_of.pop(job, None))
                self.send({"job": job, "status": os.waitstatus_to_exitcode(status)})
        self.kill_strays()

    def shutdown(self) -> None:
        """The daemon is gone: kill every job's tree and reap everything before exiting."""
        for job, pid in list(self.jobs.items()):
            self.kill_tree(pid, self.cgroup_of.get(job))
        self.pids.clear()
        self.jobs.clear()
        self.spent.extend(self.cgroup_of.values())
        self.cgroup_of.clear()
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            self.kill_strays()
            try:
                pid, _status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break  # no child left
            if pid == 0:
                time.sleep(0.005)
        if self.cgroups is not None:
            self.cgroups.close()


def main(argv: list[str]) -> None:
    global _FAST_CLOSE_RANGE
    sock = socket.socket(fileno=int(argv[-1]))
    sock.setblocking(True)
    if not all(stat.S_ISFIFO(os.fstat(fd).st_mode) for fd in (0, 1, 2)):
        sock.sendall(b'{"fatal": "fds 0, 1 and 2 must be pipes"}\n')
        os._exit(2)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Orphans of jobs come here to be killed, not to an init that may not reap; and being
    # non-dumpable keeps a job from reading this process's memory (jobs' environments).
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    _prctl(_PR_SET_DUMPABLE, 0)
    _FAST_CLOSE_RANGE = _close_range_is_fast()
    zygote = ZygoteLoop(sock, PidsCgroups.open())
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
