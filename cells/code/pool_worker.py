"""A warm worker of one ``isolation: "pool"`` code cell: it runs the cell's script for message
after message in this one process — no fork, no exec per message.

A forked job costs a fork, a page-table copy, copy-on-write faults and a reap per message; this
process pays its start once. The daemon (``cells/code/pool.py``) has the zygote start it as an
ordinary job of the cell, so it already has what a forked job gets: the allow-listed
environment, the cell's folder as working directory, its own session as a child subreaper, the
address-space and process limits. It is a standalone stdlib-only script, never imported by the
daemon.

Each message runs the script compiled once per version of the file (inode, size, modification
time; an inline script once) in a fresh ``__main__`` module, with ``sys.stdin`` reading the
message's JSON and ``sys.stdout``/``sys.stderr`` built like the interpreter's own streams for
a pipe (same encoding, errors and buffering) over sinks that ship what they flush to the daemon.
So a crash leaves behind exactly what a forked child's pipes would hold. ``SystemExit`` becomes
the exit status; other exceptions print their traceback and exit 1, as the interpreter does.
After the script: threads it left are joined, exit functions it registered run, processes it
left are killed (after threads or processes, a ``MemoryError`` or past its RSS bound the worker
retires); ``sys.path``, ``sys.argv``, ``os.environ``, the working directory, signal handlers and
the alarm timer are put back. What imported modules hold persists: that is what pool gives up.

Protocol (fd 0 is a Unix stream socket to the daemon when it starts; fds 1 and 2 are pipes the
daemon reads as the running message's stdout and stderr, for what reaches them directly — a
subprocess, ``os.write(1, …)``, C code):

* daemon → worker: frames of a 4-byte big-endian length and a body. The first is the settings
  (JSON: ``script`` or ``path``, ``cpu``, ``max_rss_kb``, ``stdout_cap``); each later one is
  one message's stdin.
* worker → daemon: frames of a kind byte, a 4-byte length and a body: ``o`` stdout bytes, ``e``
  stderr bytes, ``x`` the end of the message: a signed 4-byte status (negative: the signal a
  forked child would have died of) and a flags byte: 0, or ``RETIRE`` with the reasons this
  worker now exits (``THREADS``, ``MEMORY_ERROR``, ``PROCESSES``, ``RSS``), and ``UNREAD``
  when its fds 1 or 2 still hold bytes for the daemon to read first.
"""

from __future__ import annotations

import _thread
import atexit
import builtins
import contextlib
import fcntl
import io
import json
import math
import os
import resource
import signal
import socket
import struct
import sys
import termios
import traceback
import types
from collections.abc import Callable
from typing import Any

_LENGTH = struct.Struct(">I")
_FRAME = struct.Struct(">cI")
_END = struct.Struct(">ib")
RETIRE = 1
THREADS = 2
MEMORY_ERROR = 4
PROCESSES = 8
RSS = 16
UNREAD = 64
"""Not a reason to retire: fds 1 or 2 hold bytes the daemon has not read yet (it then reads
them before it takes the end frame; without this bit it need not look)."""
PIPE_SLACK = 1 << 16
"""What a pipe (Linux's default capacity) takes beyond the bytes its reader stopped at: a
forked child writing that much past its cap blocks until it is killed."""
_REAP_ROUNDS = 20


class DaemonChannel:
    """The socket to the daemon. Sends are locked (a script's threads may flush while the main
    thread does); a child a script forks (``os.fork``) drops it and writes to fds 1 and 2."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock: socket.socket | None = sock
        self.lock = _thread.allocate_lock()
        self.owner = os.getpid()
        self.inbox = bytearray()

    def forked(self) -> None:
        """In a child a script forked: this socket is the worker's, not the child's."""
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()

    def send(self, data: bytes) -> None:
        if self.sock is None:
            return
        with self.lock:
            self.sock.sendall(data)

    def receive(self) -> bytes | None:
        """The next frame's body (usually one ``recv``); None at end of file."""
        assert self.sock is not None
        inbox = self.inbox
        if not inbox:  # the usual case: one recv brings exactly one frame
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                return None
            if len(chunk) >= _LENGTH.size and _LENGTH.unpack_from(chunk)[0] == len(chunk) - 4:
                return chunk[_LENGTH.size :]
            inbox += chunk
        while True:
            if len(inbox) >= _LENGTH.size:
                (length,) = _LENGTH.unpack_from(inbox)
                end = _LENGTH.size + length
                if len(inbox) >= end:
                    body = bytes(inbox[_LENGTH.size : end])
                    del inbox[:end]
                    return body
                want = end - len(inbox)
            else:
                want = 0
            chunk = self.sock.recv(max(want, 1 << 16))
            if not chunk:
                return None
            inbox += chunk


class StreamSink(io.RawIOBase):
    """The raw end of ``sys.stdout`` or ``sys.stderr`` while a job runs: what the buffered
    stream above it flushes goes to the daemon at once (``o``/``e`` frames), as a forked
    child's writes go to its pipe; at the end of the job (``final``) it is held and sent with
    the end frame; between jobs it is dropped. Stdout past ``cap`` is not sent beyond one byte
    over: the daemon stops the job there.

    The streams outlive a job (a logging handler an imported module keeps writes to the
    running job's stderr, as under fork); they are built anew only when a script closed or
    reconfigured them."""

    def __init__(self, channel: DaemonChannel, kind: bytes, fd: int, cap: int | None) -> None:
        super().__init__()
        self.channel = channel
        self.kind = kind
        self.fd = fd
        self.cap = cap
        self.count = 0
        self.final = False
        self.ended = True
        self.held: list[bytes] = []

    def begin(self) -> None:
        self.count = 0
        self.final = self.ended = False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd  # the daemon reads it as this job's stream too

    def isatty(self) -> bool:
        return False

    def write(self, data: Any) -> int:
        size = len(data)
        if self.ended:
            return size  # a thread writing after its job was reported: nobody reads it
        if self.channel.sock is None:  # in a child the script forked: fds 1 and 2 are pipes
            view = memoryview(data).cast("B")
            while view:
                view = view[os.write(self.fd, view) :]
            return size
        before, self.count = self.count, self.count + size
        cap = self.cap
        chunk = bytes(data) if cap is None else bytes(data[: max(cap + 1 - before, 0)])
        if chunk:
            if self.final and (cap is None or self.count <= cap):
                self.held.append(chunk)  # sent with the end frame
            else:
                held, self.held = b"".join(self.held), []
                data_out = held + chunk
                self.channel.send(_FRAME.pack(self.kind, len(data_out)) + data_out)
        if cap is not None and self.count > cap + PIPE_SLACK:
            self.stall()
        return size

    def stall(self) -> None:
        """Past the cap and what a pipe would still have taken: block, as a writer into a
        full pipe does, until the daemon (which stopped reading at the cap) kills the worker."""
        sock = self.channel.sock
        while sock is not None and sock.recv(1 << 16):
            pass  # nothing comes while a job runs; end of file: the daemon is gone
        os._exit(1)

    def frame(self) -> bytes:
        """What was held at the end, as one frame (empty if nothing was)."""
        self.ended = True
        if not self.held:
            return b""
        data = b"".join(self.held)
        self.held = []
        return _FRAME.pack(self.kind, len(data)) + data


def _shape(stream: Any) -> tuple[Any, ...]:
    """What makes a text stream behave as it does (``reconfigure`` changes it)."""
    return (
        getattr(stream, "encoding", None) or "utf-8",
        getattr(stream, "errors", None) or "strict",
        bool(getattr(stream, "line_buffering", False)),
        bool(getattr(stream, "write_through", False)),
    )


def _built_shape(stream: io.TextIOWrapper) -> tuple[Any, ...]:
    return (stream.encoding, stream.errors, stream.line_buffering, stream.write_through)


class JobStream:
    """A job's ``sys.stdout`` or ``sys.stderr``: a text stream over a :class:`StreamSink`,
    built like ``model`` (the interpreter's own stream for a pipe: same encoding, error handler
    and buffering), kept from job to job while a script leaves it as it is."""

    def __init__(self, channel: DaemonChannel, kind: bytes, fd: int, cap: int | None, model: Any):
        self.args = (channel, kind, fd, cap)
        self.model = model
        self.shape = _shape(model)
        self.buffered = isinstance(getattr(model, "buffer", None), io.BufferedWriter)
        self.sink: StreamSink
        self.stream = self.build()
        self.built = _built_shape(self.stream)
        """The shape of the stream as built (what ``begin`` compares with, attribute by
        attribute: cheaper than :func:`_shape`)."""

    def build(self) -> io.TextIOWrapper:
        self.sink = StreamSink(*self.args)
        binary: Any = io.BufferedWriter(self.sink) if self.buffered else self.sink
        encoding, errors, line_buffering, write_through = self.shape
        return io.TextIOWrapper(
            binary,
            encoding=encoding,
            errors=errors,
            newline="\n",
            line_buffering=line_buffering,
            write_through=write_through,
        )

    def begin(self) -> io.TextIOWrapper:
        """The stream for the next job: this one, unless the last job spoiled it."""
        stream = self.stream
        if stream.closed or _built_shape(stream) != self.built:
            stream = self.stream = self.build()
        sink = self.sink
        sink.count = 0
        sink.final = sink.ended = False
        return stream


class JobStdin(io.StringIO):
    """A job's ``sys.stdin``: the message's text, and its bytes as ``buffer`` (a ten times
    cheaper stream to make than a ``TextIOWrapper``, which is half a job's overhead). Each
    worker makes a subclass with the ``encoding`` and ``errors`` of the interpreter's own stdin
    (:func:`stdin_type`), so a job's stdin is one C constructor call and ``buffer`` is made
    only for a script that reads it."""

    encoding = "utf-8"
    errors = "strict"
    data = b""
    """The message's bytes (set on each job's stdin)."""

    @property
    def buffer(self) -> io.BytesIO:
        buffer: io.BytesIO | None = self.__dict__.get("_buffer")
        if buffer is None:
            buffer = self.__dict__["_buffer"] = io.BytesIO(self.data)
        return buffer


def stdin_type(model: Any) -> type[JobStdin]:
    """The :class:`JobStdin` that decodes as ``model`` (the interpreter's own stdin for a
    pipe) would."""
    encoding = getattr(model, "encoding", None) or "utf-8"
    errors = getattr(model, "errors", None) or "strict"
    return type("JobStdin", (JobStdin,), {"encoding": encoding, "errors": errors})


def _stdin(data: bytes, kind: type[JobStdin]) -> io.TextIOBase:
    """``sys.stdin`` holding ``data``, decoded as ``kind`` says."""
    try:
        stdin = kind(data.decode(kind.encoding, kind.errors))
    except (UnicodeDecodeError, LookupError):  # the script meets the error when it reads
        return io.TextIOWrapper(io.BytesIO(data), kind.encoding, kind.errors, newline="\n")
    stdin.data = data
    return stdin


def _exit_code_of(exc: SystemExit, stderr: Any) -> int:
    """What the interpreter does with an uncaught SystemExit."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    with contextlib.suppress(Exception):
        stderr.write(f"{code}\n")
    return 1


_NONE_UNREAD = b"\0\0\0\0"


def _unread(fd: int) -> bool:
    """Whether the pipe on ``fd`` holds bytes its reader (the daemon) has not read."""
    try:
        return fcntl.ioctl(fd, termios.FIONREAD, _NONE_UNREAD) != _NONE_UNREAD
    except OSError:
        return True


def _flush(stream: Any) -> None:
    try:
        if stream is not None:
            stream.flush()
    except Exception:
        pass


class ScriptRunner:
    """One cell's script, run once per message in this process."""

    def __init__(self, channel: DaemonChannel, settings: dict[str, Any]) -> None:
        self.channel = channel
        self.script: str | None = settings.get("script")
        self.path: str | None = settings.get("path")
        self.cpu: int | None = settings.get("cpu")
        self.max_rss_kb: int | None = settings.get("max_rss_kb")
        stdout_cap = int(settings.get("stdout_cap") or 4 * 1024 * 1024)
        self.code: types.CodeType | None = None
        self.code_key: tuple[int, int, int] | None = None
        if self.script is not None:
            with contextlib.suppress(Exception):
                self.code = compile(self.script, "<string>", "exec", dont_inherit=True)
        self.models: tuple[Any, Any, Any] = (sys.__stdin__, sys.__stdout__, sys.__stderr__)
        self.stdin_type = stdin_type(self.models[0])
        self.stdout = JobStream(channel, b"o", 1, stdout_cap, self.models[1])
        self.stderr = JobStream(channel, b"e", 2, None, self.models[2])
        self.main = sys.modules["__main__"]
        self.argv = list(sys.argv)
        self.base_path = list(sys.path)
        self.safe_path = bool(getattr(sys.flags, "safe_path", False))
        self.entry: tuple[tuple[int, int, int] | None, list[str]] | None = None
        """A job's ``sys.path`` (the script's folder first), for the file version it was found
        for."""
        self.cwd = os.getcwd()
        self.environ = dict(os.environ)
        self.environ_data = dict(getattr(os.environ, "_data", {}))
        self.signals: dict[int, Any] = {}
        self.timers = False
        self.moved = False
        """A job called ``os.chdir`` or ``os.fchdir``: the working directory is checked (a
        ``getcwd`` per job otherwise)."""
        self.exits: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = []
        self.running = False
        self.cpu_base = -1
        self._install_hooks()
        self.set_cpu_limit(resource.getrusage(resource.RUSAGE_SELF))

    # -- what a script may change of the interpreter, tracked so it can be put back

    def _install_hooks(self) -> None:
        real_signal = signal.signal
        real_alarm = signal.alarm
        real_setitimer = signal.setitimer
        real_register = atexit.register
        real_unregister = atexit.unregister
        real_chdir = os.chdir
        real_fchdir = os.fchdir
        worker = self

        def tracked_chdir(path: Any) -> None:
            worker.moved = True
            real_chdir(path)

        def tracked_fchdir(fd: Any) -> None:
            worker.moved = True
            real_fchdir(fd)

        def tracked_signal(signum: Any, handler: Any) -> Any:
            previous = real_signal(signum, handler)
            if worker.running:
                worker.signals.setdefault(int(signum), previous)
            return previous

        def tracked_alarm(seconds: int) -> int:
            worker.timers = True
            return real_alarm(seconds)

        def tracked_setitimer(which: int, seconds: float, interval: float = 0.0) -> Any:
            worker.timers = True
            return real_setitimer(which, seconds, interval)

        def job_register(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            # A function of the script runs when its job ends, as it would at a forked
            # child's exit; a library's runs when this worker ends.
            if worker.running and getattr(func, "__module__", None) == "__main__":
                worker.exits.append((func, args, kwargs))
                return func
            return real_register(func, *args, **kwargs)

        def job_unregister(func: Callable[..., Any]) -> None:
            worker.exits[:] = [entry for entry in worker.exits if entry[0] != func]
            real_unregister(func)

        signal.signal = tracked_signal  # type: ignore[assignment]
        os.chdir = tracked_chdir
        os.fchdir = tracked_fchdir
        for able in (os.supports_fd, os.supports_dir_fd, os.supports_follow_symlinks):
            if real_chdir in able:  # `os.chdir in os.supports_fd` stays true
                able.add(tracked_chdir)
        self._real_chdir = real_chdir
        signal.alarm = tracked_alarm
        signal.setitimer = tracked_setitimer
        atexit.register = job_register  # type: ignore[assignment]
        atexit.unregister = job_unregister
        self._real_signal = real_signal
        self._real_setitimer = real_setitimer
        os.register_at_fork(after_in_child=self.channel.forked)
        # A script's SIGXCPU must not leave a core file behind (nor must a crash).
        _soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
        resource.setrlimit(resource.RLIMIT_CORE, (0, hard))

    # -- one job

    def compiled(self) -> tuple[types.CodeType | None, str | bytes | None]:
        """The code to run, compiled once per version of the script file (an inline script
        once); or the source to compile in the job, so its error is reported there. Raises
        ``OSError`` when the file cannot be read."""
        if self.path is None:
            return self.code, self.script or ""
        info = os.stat(self.path)
        key = (info.st_ino, info.st_size, info.st_mtime_ns)
        if key != self.code_key or self.code is None:
            with open(self.path, "rb") as handle:
                source = handle.read()
            try:
                self.code = compile(source, self.path, "exec", dont_inherit=True)
            except Exception:
                self.code, self.code_key = None, None
                return None, source
            self.code_key = key
        return self.code, None

    def job_path(self) -> list[str]:
        """A job's ``sys.path``: the real folder of the script file first (the script's own
        first with ``-c``), unless safe_path; the folder is found again only when the file
        changed (a new version, or a link pointed elsewhere: the key :meth:`compiled` has just
        checked)."""
        entry = self.entry
        if entry is None or (
            self.path is not None and (entry[0] is None or entry[0] != self.code_key)
        ):
            folder = "" if self.path is None else os.path.dirname(os.path.realpath(self.path))
            path = self.base_path if self.safe_path else [folder, *self.base_path]
            entry = self.entry = (self.code_key, path)
        return entry[1]

    def set_cpu_limit(self, usage: Any) -> None:
        """RLIMIT_CPU counts this process's whole life: the next job gets ``cpu`` seconds (at
        most one more) from now, then SIGXCPU kills the worker as it would a forked child."""
        if self.cpu is None:
            return
        base = math.ceil(usage.ru_utime + usage.ru_stime)
        if base == self.cpu_base:
            return  # the limit set for the last job still gives this one its share
        _soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
        soft = base + self.cpu
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
        self.cpu_base = base

    def run(self, stdin: bytes) -> None:
        stdout = self.stdout.begin()
        stderr = self.stderr.begin()
        sys.stdin = _stdin(stdin, self.stdin_type)
        sys.stdout, sys.stderr = stdout, stderr
        main = types.ModuleType("__main__")
        namespace = main.__dict__
        namespace["__builtins__"] = builtins
        sys.modules["__main__"] = main
        if self.path is None:
            sys.argv = ["-c"]
        else:
            sys.argv = [self.path]
            namespace["__file__"] = self.path
            namespace["__cached__"] = None
        self.running = True
        try:
            status, reasons = self.execute(namespace)
            if _thread._count():  # threads the script left: what a forked child's exit does
                reasons |= THREADS
                threading = sys.modules.get("threading")
                if threading is not None:
                    with contextlib.suppress(BaseException):  # as at exit: go on regardless
                        threading._shutdown()
            if self.exits:
                self.run_exits(stderr)
        finally:
            self.running = False
        # sys.__stdout__/__stderr__ are the worker's own streams on fds 1 and 2: what a script
        # wrote there reaches the daemon's pipes now, before the end frame. The script's own
        # streams go first: they write into ours.
        streams: tuple[Any, ...] = (stdout, stderr, *self.models[1:])
        if sys.stdout is not stdout or sys.stderr is not stderr:
            streams = (sys.stdout, sys.stderr, *streams)
        if self.channel.sock is None:  # a child the script forked (os.fork) ends here
            for stream in streams:
                _flush(stream)
            os._exit(status & 0xFF if status >= 0 else 1)
        out_sink, err_sink = self.stdout.sink, self.stderr.sink
        out_sink.final = err_sink.final = True
        for stream in streams:
            try:
                if stream is not None:
                    stream.flush()
            except Exception:
                pass
        self.restore()
        if self.kill_leftovers():  # a library may hold their pids: start the next one afresh
            reasons |= PROCESSES
        usage = resource.getrusage(resource.RUSAGE_SELF)
        if self.max_rss_kb is not None and usage.ru_maxrss > self.max_rss_kb:
            reasons |= RSS
        flags = RETIRE | reasons if reasons else 0
        if _unread(1) or _unread(2):
            flags |= UNREAD
        end = _FRAME.pack(b"x", _END.size) + _END.pack(status, flags)
        if out_sink.held or err_sink.held:
            end = out_sink.frame() + err_sink.frame() + end
        else:
            out_sink.ended = err_sink.ended = True
        self.channel.send(end)
        if reasons:
            os._exit(0)
        if self.cpu is not None:
            self.set_cpu_limit(usage)

    def execute(self, namespace: dict[str, Any]) -> tuple[int, int]:
        """Run the script as ``__main__``: its status, and why the worker must retire (0:
        it need not)."""
        try:
            code, source = self.compiled()
        except OSError as exc:
            sys.stderr.write(
                f"{os.path.basename(sys.executable)}: can't open file {self.path!r}: "
                f"[Errno {exc.errno}] {exc.strerror}\n"
            )
            return 2, 0
        sys.path[:] = self.job_path()
        try:
            if code is None:
                code = compile(source or "", self.path or "<string>", "exec", dont_inherit=True)
            exec(code, namespace)
        except SystemExit as exc:
            return _exit_code_of(exc, sys.stderr), 0
        except BaseException as exc:
            # Drop this frame: the traceback starts at the script, as the interpreter's does.
            with contextlib.suppress(Exception):
                traceback.print_exception(
                    type(exc), exc, exc.__traceback__.tb_next if exc.__traceback__ else None
                )
            if isinstance(exc, KeyboardInterrupt):
                return -int(signal.SIGINT), 0
            # The heap may be left fragmented or half-filled: start the next job afresh.
            return 1, MEMORY_ERROR if isinstance(exc, MemoryError) else 0
        return 0, 0

    def run_exits(self, stderr: Any) -> None:
        """The exit functions the script registered, last first, as at interpreter exit."""
        while self.exits:
            func, args, kwargs = self.exits.pop()
            try:
                func(*args, **kwargs)
            except SystemExit:
                pass
            except BaseException:
                with contextlib.suppress(Exception):
                    stderr.write(f"Exception ignored in atexit callback: {func!r}\n")
                    traceback.print_exc(file=stderr)

    def restore(self) -> None:
        """Put back what the job may have changed of the interpreter (cheap when nothing was)."""
        sys.stdin, sys.stdout, sys.stderr = self.models
        sys.modules["__main__"] = self.main
        sys.argv = self.argv.copy()
        sys.path[:] = self.base_path
        if getattr(os.environ, "_data", None) != self.environ_data:
            for name in [name for name in os.environ if name not in self.environ]:
                del os.environ[name]
            for name, value in self.environ.items():
                if os.environ.get(name) != value:
                    os.environ[name] = value
        if self.moved:
            self.moved = False
            try:
                if os.getcwd() != self.cwd:
                    self._real_chdir(self.cwd)
            except OSError:
                self._real_chdir(self.cwd)
        if self.signals:
            for signum, handler in self.signals.items():
                with contextlib.suppress(OSError, ValueError, TypeError):
                    self._real_signal(signum, handler)
            self.signals.clear()
        if self.timers:
            for which in (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF):
                self._real_setitimer(which, 0)
            self.timers = False

    def kill_leftovers(self) -> bool:
        """Kill and reap every process the job left (as a forked job's tree ends with it):
        whether there was any. What cannot be reaped here the zygote kills with the worker's
        tree. Costs one ``waitid`` when the job left none."""
        try:
            os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return False
        me = os.getpid()
        for _round in range(_REAP_ROUNDS):
            try:
                with open(f"/proc/self/task/{me}/children") as handle:
                    pids = [int(pid) for pid in handle.read().split()]
            except OSError:
                return True
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            for pid in pids:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
            try:
                os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                break
        return True


def main() -> None:
    # The socket moves off fd 0 (close-on-exec: a script's subprocess must not inherit it);
    # fd 0 becomes /dev/null, as the job's stdin is in memory.
    sock = socket.socket(fileno=os.dup(0))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sock.setblocking(True)
    channel = DaemonChannel(sock)
    # The zygote put this file's folder first on sys.path, as for any script: scripts must
    # not import the daemon's modules from here.
    here = os.path.dirname(os.path.realpath(__file__))
    if sys.path and sys.path[0] == here:
        del sys.path[0]
    settings = channel.receive()
    if settings is None:
        return
    worker = ScriptRunner(channel, json.loads(settings))
    while (stdin := channel.receive()) is not None:
        worker.run(stdin)


if __name__ == "__main__":
    main()
    os._exit(0)
