"""The child colony as a process: started, greeted, written to, read from, stopped.

The child runs ``<command> --root <root> --stdio-format json`` in its own process group (the
signals of :meth:`ChildColony.close` reach all of it; what it starts in sessions of its own
ends with it, as such processes watch their parent) with an environment built from scratch.
Its stdout carries frames, one JSON object a line; its stderr (the child's log) is read line by
line so a chatty child never blocks on a full pipe, and its last lines are kept for the error a
failure reports. The child's exit is watched on the process itself, not only as the end of its
stdout, which a process it started may hold open.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cells.procgroup import signal_group, signal_name

__all__ = ["PROTOCOL", "BootFailedError", "ChildColony", "Launch", "encode_frame"]

PROTOCOL = 1
"""The stdio wire's protocol integer (``v``), asserted on the ``ready`` frame."""
LINE_LIMIT = 64 * 1024 * 1024
"""The longest frame line read from the child."""
STDERR_TAIL = 20
"""Lines of the child's stderr kept for an error's detail."""
LEFTOVER_S = 0.5
"""After the child exited, how long a frame it wrote before may still take to be read: its
stdout may never end when a process it started still holds it."""


class _Watched(asyncio.subprocess.SubprocessStreamProtocol):
    """The stream protocol, plus an event set when the child itself exits. ``Process.wait()``
    also waits for the end of every pipe, which a process the child started may hold open."""

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.exited = asyncio.Event()

    def process_exited(self) -> None:
        super().process_exited()
        self.exited.set()


class BootFailedError(Exception):
    """The child did not come up: ``code`` is the cell's error code for it."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Launch:
    """How to start the child."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path


class ChildColony:
    """One running child colony."""

    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        transport: asyncio.SubprocessTransport,
        exited: asyncio.Event,
        on_log: Callable[[str], None],
    ) -> None:
        self.proc = proc
        self.pid = proc.pid
        self._transport = transport
        self.exited = exited
        """Set when the child process itself has ended (its pipes may live on)."""
        self.version: str | None = None
        self._tail: deque[str] = deque(maxlen=STDERR_TAIL)
        self._on_log = on_log
        self._stderr = asyncio.ensure_future(self._drain_stderr())
        self._writing = asyncio.Lock()

    @classmethod
    async def start(
        cls, launch: Launch, boot_timeout_s: float, on_log: Callable[[str], None]
    ) -> ChildColony:
        """A child that said ``ready`` (protocol checked); raises :class:`BootFailedError`."""
        loop = asyncio.get_running_loop()
        protocol = _Watched(LINE_LIMIT, loop)
        try:
            transport, _ = await loop.subprocess_exec(
                lambda: protocol,
                *launch.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=launch.env,
                cwd=launch.cwd,
                start_new_session=True,
            )
        except (OSError, ValueError) as exc:  # ValueError: a NUL byte in argv or env
            raise BootFailedError(
                "subcolony_unavailable", f"{launch.argv[0]} could not be started: {exc}"
            ) from None
        proc = asyncio.subprocess.Process(transport, protocol, loop)
        child = cls(proc, transport, protocol.exited, on_log)
        try:
            async with asyncio.timeout(boot_timeout_s):
                child.version = await child._greeting()
        except TimeoutError:
            await child.kill()
            raise BootFailedError(
                "boot_timeout",
                f"the child colony sent no ready frame within boot_timeout_ms "
                f"({int(boot_timeout_s * 1000)} ms){child.said()}",
            ) from None
        except BaseException:  # no child outlives a failed start, whatever ended it
            await child.kill()
            raise
        return child

    async def _greeting(self) -> str:
        """The ``ready`` frame's version (the first frame the child writes)."""
        while True:
            frame = await self.frame_or_exit()
            if frame is None:
                code = await self.wait_exit()
                await asyncio.wait([self._stderr], timeout=1)
                raise BootFailedError(
                    "subcolony_unavailable",
                    f"the child colony exited ({_exit(code)}) before it was ready{self.said()}",
                )
            if frame.get("type") != "ready":
                raise BootFailedError(
                    "protocol_mismatch",
                    f"the child's first frame is of type {frame.get('type')!r}, not 'ready'",
                )
            if frame.get("v") != PROTOCOL or isinstance(frame.get("v"), bool):
                raise BootFailedError(
                    "protocol_mismatch",
                    f"the child speaks protocol v={frame.get('v')!r}; this cell speaks "
                    f"v={PROTOCOL}",
                )
            version = frame.get("version")
            return version if isinstance(version, str) else repr(version)

    async def next_frame(self) -> dict[str, Any] | None:
        """The next JSON object line on stdout (other lines are skipped); None at its end."""
        stdout = self.proc.stdout
        assert stdout is not None
        while True:
            try:
                line = await stdout.readline()
            except (ValueError, asyncio.LimitOverrunError):
                self._on_log(f"a stdout line longer than {LINE_LIMIT} bytes was dropped")
                continue
            if not line:
                return None
            try:
                frame = json.loads(line)
            except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
                self._on_log(f"stdout line that is not a frame: {line[:200]!r}")
                continue
            if isinstance(frame, dict):
                return frame
            self._on_log(f"stdout line that is not a frame: {line[:200]!r}")

    async def frame_or_exit(self) -> dict[str, Any] | None:
        """The next frame; None at the end of stdout, or once the child has exited and no
        frame it left comes within :data:`LEFTOVER_S`."""
        reading = asyncio.ensure_future(self.next_frame())
        exited = asyncio.ensure_future(self.exited.wait())
        try:
            await asyncio.wait({reading, exited}, return_when=asyncio.FIRST_COMPLETED)
            if not reading.done():
                await asyncio.wait({reading}, timeout=LEFTOVER_S)
        finally:
            exited.cancel()
            if not reading.done():
                reading.cancel()
        return reading.result() if reading.done() and not reading.cancelled() else None

    async def wait_exit(self) -> int | None:
        """The child's exit status, once it has exited (its pipes need not have ended)."""
        await self.exited.wait()
        return self.proc.returncode

    async def write(self, data: bytes, timeout_s: float) -> None:
        """One frame (from :func:`encode_frame`) to the child's stdin; raises TimeoutError or
        OSError."""
        stdin = self.proc.stdin
        assert stdin is not None
        async with asyncio.timeout(timeout_s), self._writing:
            stdin.write(data)
            await stdin.drain()

    def said(self) -> str:
        """The child's last stderr lines, for an error's detail ('' when it said nothing)."""
        if not self._tail:
            return ""
        return "; its stderr ended: " + " | ".join(self._tail)

    async def _drain_stderr(self) -> None:
        stderr = self.proc.stderr
        assert stderr is not None
        while True:
            try:
                line = await stderr.readline()
            except (ValueError, asyncio.LimitOverrunError):  # one line too long: drop it only
                self._on_log(f"a stderr line longer than {LINE_LIMIT} bytes was dropped")
                continue
            if not line:
                return
            text = line.decode("utf-8", "replace").rstrip()
            if text:
                self._tail.append(text[:300])
                self._on_log(text)

    def exit_text(self) -> str:
        return _exit(self.proc.returncode)

    async def close(self, grace_s: float) -> None:
        """End of input first (the child finishes what it holds and exits), then SIGTERM to
        its process group, then SIGKILL, each after ``grace_s``."""
        stdin = self.proc.stdin
        if stdin is not None and not stdin.is_closing():
            with contextlib.suppress(OSError):
                stdin.close()
        if not await self.exited_within(grace_s):
            self._signal(signal.SIGTERM)
            if not await self.exited_within(grace_s):
                self._signal(signal.SIGKILL)
                await self.exited.wait()
        self._signal(signal.SIGKILL)  # whatever of its group is left
        await self._finish()

    async def kill(self) -> None:
        self._signal(signal.SIGKILL)
        await self.exited.wait()
        await self._finish()

    async def exited_within(self, seconds: float) -> bool:
        """Whether the child has exited, or does within ``seconds``."""
        try:
            async with asyncio.timeout(seconds):
                await self.exited.wait()
        except TimeoutError:
            return False
        return True

    def _signal(self, sig: signal.Signals) -> None:
        signal_group(self.pid, sig)

    async def _finish(self) -> None:
        await asyncio.wait([self._stderr], timeout=1)
        self._stderr.cancel()
        self._transport.close()  # its pipes, even those a process it started still holds

    async def frames(self) -> AsyncIterator[dict[str, Any]]:
        """Frames until the child's stdout ends or the child exits."""
        while (frame := await self.frame_or_exit()) is not None:
            yield frame


def encode_frame(frame: dict[str, Any]) -> bytes:
    """``frame`` as one line of the wire: strict JSON in valid UTF-8. Raises ValueError for
    what the child could not read (NaN or an infinity, a lone surrogate in a string)."""
    return (json.dumps(frame, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def _exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        name = signal_name(-code)
        return f"killed by {name}" if name.startswith("SIG") else f"killed by signal {name}"
    return f"exit status {code}"
