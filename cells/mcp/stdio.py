"""The MCP server as a child process: spawned here (not by the SDK's ``stdio_client``, which
hides the process, so its exit status would be lost), in a process group of its own, its
stdout and stdin bridged to the SDK's :class:`mcp.ClientSession` streams line by line.

On Linux the server gets SIGTERM when the daemon dies (``PR_SET_PDEATHSIG``), also when
nothing in the daemon ran to stop it. Closing it is the MCP lifecycle's order: close stdin,
then SIGTERM to the whole group, then SIGKILL after ``kill_grace_ms``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys
from collections import deque
from collections.abc import Callable

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import types
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage

from cells.mcp.wire import describe_exit
from cells.procgroup import signal_group
from colony.observability import Logger

__all__ = ["ServerProcess"]

LINE_LIMIT = 1 << 26
"""The longest line (one JSON-RPC message) read from the server: 64 MiB."""
STDERR_KEPT = 5
"""Last stderr lines kept to explain a death."""
STDERR_LINE_KEPT = 4096
"""Bytes kept of one stderr line; the rest of a longer one is dropped."""


PR_SET_PDEATHSIG = 1


def _die_with_parent() -> Callable[[], None] | None:
    """On Linux, a hook run in the child before exec: SIGTERM when the daemon dies, even by
    SIGKILL (which only closes the server's stdin otherwise). Elsewhere None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def hook() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the daemon died before the hook ran
            os.kill(os.getpid(), signal.SIGTERM)

    return hook


class ServerProcess:
    """One running server and the two streams a ``ClientSession`` talks through."""

    def __init__(self, proc: asyncio.subprocess.Process, log: Logger | None, path: str) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.log = log
        self.path = path
        self.stderr: deque[str] = deque(maxlen=STDERR_KEPT)
        self._eof = asyncio.Event()
        self._stopping: asyncio.Future[None] | None = None
        send_in, self.read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](
            32
        )
        self.write_stream, receive_out = anyio.create_memory_object_stream[SessionMessage](32)
        self._tasks = [
            asyncio.create_task(self._pump_out(send_in)),
            asyncio.create_task(self._pump_in(receive_out)),
            asyncio.create_task(self._pump_err()),
        ]

    @classmethod
    async def spawn(
        cls,
        command: str,
        args: list[str],
        env: dict[str, str],
        cwd: str | None,
        *,
        log: Logger | None,
        path: str,
    ) -> ServerProcess:
        """Start the server; :class:`OSError` when it cannot be started."""
        proc = await asyncio.create_subprocess_exec(
            command,
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=get_default_environment() | env,
            cwd=cwd,
            start_new_session=True,
            limit=LINE_LIMIT,
            preexec_fn=_die_with_parent(),
        )
        return cls(proc, log, path)

    async def _pump_out(self, sink: MemoryObjectSendStream[SessionMessage | Exception]) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        try:
            async with sink:
                while line := await stdout.readline():
                    text = line.decode("utf-8", "replace").strip()
                    if not text:
                        continue
                    try:
                        message = types.jsonrpc_message_adapter.validate_json(text, by_name=False)
                    except ValueError:
                        self._note("mcp_server_noise", line=text[:500])
                        continue
                    await sink.send(SessionMessage(message))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, ValueError, OSError):
            pass
        finally:
            self._eof.set()

    async def _pump_in(self, source: MemoryObjectReceiveStream[SessionMessage]) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        with contextlib.suppress(
            anyio.ClosedResourceError, anyio.EndOfStream, OSError, ConnectionError
        ):
            async with source:
                async for message in source:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    stdin.write(data.encode() + b"\n")
                    await stdin.drain()

    async def _pump_err(self) -> None:
        """Log and keep the server's stderr lines, read in chunks: a line of any length costs
        at most :data:`STDERR_LINE_KEPT` bytes and never stops the pump (a stopped pump would
        let the pipe fill and block the server)."""
        stderr = self.proc.stderr
        assert stderr is not None
        line = bytearray()
        skipping = False  # the rest of an overlong line, already kept in part
        with contextlib.suppress(OSError):
            while chunk := await stderr.read(1 << 16):
                start = 0
                while (end := chunk.find(b"\n", start)) >= 0:
                    if not skipping:
                        line += chunk[start:end]
                        self._keep_err(bytes(line))
                    line.clear()
                    skipping = False
                    start = end + 1
                if not skipping:
                    line += chunk[start:]
                    if len(line) > STDERR_LINE_KEPT:
                        self._keep_err(bytes(line[:STDERR_LINE_KEPT]) + b" [line cut]")
                        line.clear()
                        skipping = True
            if line and not skipping:
                self._keep_err(bytes(line))

    def _keep_err(self, line: bytes) -> None:
        text = line.decode("utf-8", "replace").rstrip()
        if text:
            self.stderr.append(text)
            self._note("mcp_server_stderr", line=text[:500])

    def _note(self, event: str, **fields: object) -> None:
        if self.log is not None:
            self.log.debug(event, cell=self.path, pid=self.pid, **fields)

    async def ended(self, grace_s: float) -> str:
        """Wait until the server is gone (it exited, or closed its stdout) and say how; after
        a closed stdout the exit is awaited for ``grace_s``."""
        exited = asyncio.ensure_future(self.proc.wait())
        eof = asyncio.ensure_future(self._eof.wait())
        try:
            await asyncio.wait({exited, eof}, return_when=asyncio.FIRST_COMPLETED)
            if not exited.done():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(grace_s):
                        await asyncio.shield(exited)
        finally:
            eof.cancel()
            if not exited.done():
                exited.cancel()
        text = describe_exit(self.proc.returncode, self.pid)
        if self.stderr:
            text += f"; its last stderr line: {self.stderr[-1][:300]}"
        return text

    async def stop(self, grace_ms: int) -> None:
        """Close stdin, SIGTERM the group, SIGKILL it after ``grace_ms``; then reap. Only the
        first call does it, later ones wait for it: a second group kill after the leader was
        reaped could hit a process that got its id since."""
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._stop(grace_ms))
        await asyncio.shield(self._stopping)

    async def _stop(self, grace_ms: int) -> None:
        self.write_stream.close()
        stdin = self.proc.stdin
        if stdin is not None:
            with contextlib.suppress(OSError):
                stdin.close()
        if self.proc.returncode is None:
            self._signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(grace_ms / 1000):
                    await self.proc.wait()
            except TimeoutError:
                self._signal(signal.SIGKILL)
        self._signal(signal.SIGKILL)  # whatever the server left behind in its group
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2):
                await self.proc.wait()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.read_stream.close()

    def _signal(self, sig: signal.Signals) -> None:
        signal_group(self.pid, sig)
