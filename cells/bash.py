"""The ``bash`` cell: one ``/bin/sh -c <command>`` per tool call.

Stateless: up to ``max_concurrency`` commands run at once. Each is a job of the zygote (see
:mod:`cells.code.zygote_client`), never a child of the daemon: its own session and process tree
(killed whole at the timeout, ``setsid()`` or not), an allow-listed environment plus
``params.env`` (:mod:`cells.code.isolation`), the cell's own folder as working directory, CPU,
memory and process-count limits set before the shell starts, and **no stdin** (an empty
pipe). The exit code is data: ``exit 7`` is an ordinary result with ``hop.exit_code: 7``. Only a
command that cannot run (``invalid_input``, ``io_error``) or runs too long (``timeout``) is an
error emission. The reply never quotes a value ``params.env`` passes under a credential-looking
name.

Output is capped twice: each stream is read only a little past ``max_bytes`` (then the pipe is
closed, so a runaway writer gets ``SIGPIPE`` as under ``| head -c``, and memory stays bounded),
and the combined text gets the visible cut ``… [truncated, N bytes total]``.

This module also holds :func:`parse_tool_call`, the tool-call reading the ``file`` and
``timer`` cells share.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from cells.code.isolation import job_environment, remove_directory, working_directory
from cells.code.process import DEFAULT_MAX_PROCESSES, Limits, ProcessError
from cells.code.zygote_client import run_spawned
from cells.redact import Redactor, looks_secret_key
from cells.text import cut_visibly, utf8_len
from cells.toolcall import ToolCallError, elapsed_ms, parse_tool_call, tool_error, tool_result
from colony.cell import CellClass, CellSpec, CellType, Emission, ParamProblem, pydantic_check
from colony.envelope import Envelope, JsonObject

__all__ = ["BASH", "BashCell", "BashParams"]

COMMAND_LIMIT = 131_072
"""Linux caps one argv string at 32 pages (``MAX_ARG_STRLEN``); ``sh -c`` passes the command
as exactly one, so a command this long or longer is refused before any spawn."""

_STDERR_START = "\n##meclaw-stderr-start##\n"
_STDERR_END = "##meclaw-stderr-end##"
_READ_PAST = 4096
"""How far past ``max_bytes`` a stream is read before its pipe is closed: output that overshoots
the cap by less is still counted exactly in ``bytes``."""


# -- params -----------------------------------------------------------------------------------


class BashParams(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)

    external_timeout_ms: Annotated[int, Field(ge=1)] = 60_000
    """Wall clock for one command; the whole process group is killed when it elapses."""
    max_concurrency: Annotated[int, Field(ge=1)] = 4
    max_bytes: Annotated[int, Field(ge=1)] = 262_144
    """Visible cap on the reply text (stdout plus the stderr block)."""
    cpu_seconds: Annotated[int, Field(ge=1)] | None = None
    """CPU limit of one command (RLIMIT_CPU); default: the timeout, rounded up."""
    memory_mb: Annotated[int, Field(ge=16)] | None = 2048
    """Address-space limit of one command (RLIMIT_AS); null lifts it."""
    env: dict[str, str] = {}
    """Variables the command gets on top of the allow-listed ones (``PATH``, ``HOME``, locale…);
    ``"${VAR}"`` passes one of the daemon's."""
    max_processes: Annotated[int, Field(ge=1)] = DEFAULT_MAX_PROCESSES
    """Processes and threads one command may have at once (a pids cgroup, else RLIMIT_NPROC)."""
    sandbox: dict[str, Any] | None = None
    """meclaw's process sandbox. Not available here: a block asking for ``trust:
    "restricted"`` makes every call fail closed (``io_error``); any other block is ignored."""

    @property
    def limits(self) -> Limits:
        cpu = self.cpu_seconds or max(1, math.ceil(self.external_timeout_ms / 1000))
        return Limits(
            cpu_seconds=cpu, address_space_mb=self.memory_mb, max_processes=self.max_processes
        )

    @property
    def restricted(self) -> bool:
        return self.sandbox is not None and self.sandbox.get("trust") == "restricted"


def check_sandbox(params: BashParams, folder: Path | None) -> list[ParamProblem]:
    if not params.restricted:
        return []
    return [
        ParamProblem(
            ("sandbox",),
            "sandbox_unavailable",
            "this build has no process sandbox: every command of this cell will be refused "
            "(io_error 'sandbox not applied')",
            "remove params.sandbox to run commands unsandboxed, with the daemon's rights.",
            warning=True,
        )
    ]


# -- running one command ----------------------------------------------------------------------


async def _run(
    command: str, limit_s: float, cap: int, limits: Limits, cwd: str, env: Mapping[str, str]
) -> tuple[int, bytes, bytes, bool, bool, bool]:
    """``(exit_code, stdout, stderr, stdout_cut, stderr_cut, timed_out)``. Each stream is read
    to at most ``cap`` plus :data:`_READ_PAST` bytes, then its pipe is closed. Raises
    :class:`ProcessError` when the shell cannot start."""
    result = await run_spawned(
        ["/bin/sh", "-c", command],
        b"",
        timeout=limit_s,
        max_stdout_bytes=cap + _READ_PAST,
        max_stderr_bytes=cap + _READ_PAST,
        cwd=cwd,
        env=env,
        limits=limits,
        overflow="close",
    )
    return (
        result.exit_code,
        result.stdout,
        result.stderr,
        result.stdout_overflow,
        result.stderr_overflow,
        result.timed_out,
    )


def _decode(data: bytes, cut: bool) -> str:
    """Lossy UTF-8; a stream that was ``cut`` off mid-character drops that character's first
    bytes rather than showing them as a replacement character."""
    if cut:
        for back in range(1, min(4, len(data)) + 1):
            byte = data[-back]
            if byte & 0xC0 == 0x80:
                continue  # a continuation byte: look further back for the lead byte
            length = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4
            if byte & 0x80 and length > back:
                data = data[:-back]
            break
    return data.decode("utf-8", "replace")


def _duration(ms: int) -> str:
    if ms % 1000 == 0:
        return f"{ms // 1000}s"
    if ms < 1000:
        return f"{ms}ms"
    return f"{ms / 1000:g}s"


# -- the cell ---------------------------------------------------------------------------------


class BashCell:
    def __init__(self, spec: CellSpec) -> None:
        self.params = BashParams.model_validate({} if spec.params is None else spec.params)
        self.path = spec.path
        self._env = job_environment(self.params.env, tree_read_only=spec.state != spec.folder)
        self._redactor = Redactor(v for k, v in self.params.env.items() if looks_secret_key(k))
        self._cwd, self._own_cwd = working_directory(spec.folder)

    async def close(self) -> None:
        remove_directory(self._own_cwd)
        self._own_cwd = None

    async def handle(self, message: Envelope) -> list[Emission]:
        target = message.reply_to or self.path
        return [Emission(await self._answer(message.body), target)]

    async def _answer(self, body: Any) -> JsonObject:
        started = time.perf_counter()
        p = self.params
        try:
            args, call_id = parse_tool_call(body)
        except ToolCallError as failure:
            return _error(failure.code, failure.text, failure.call_id, started)
        command = args.get("command")
        if not isinstance(command, str):
            return _error("invalid_input", "args.command missing or not a string", call_id, started)
        if not command:
            return _error("invalid_input", "args.command is empty", call_id, started)
        size = len(command.encode("utf-8", "surrogatepass"))
        if size >= COMMAND_LIMIT:
            return _error(
                "invalid_input",
                f"args.command is {size} bytes; one argv string is capped at {COMMAND_LIMIT} "
                "bytes (MAX_ARG_STRLEN) and sh -c passes the command as one, so no shell was "
                "started",
                call_id,
                started,
            )
        if "\0" in command:
            return _error("invalid_input", "args.command contains a NUL byte", call_id, started)
        if p.restricted:
            return _error(
                "io_error",
                "sandbox not applied: this build has no process sandbox (params.sandbox asks "
                'for trust "restricted"); remove the block to run unsandboxed',
                call_id,
                started,
            )
        try:
            exit_code, out, err, out_cut, err_cut, timed_out = await _run(
                command, p.external_timeout_ms / 1000, p.max_bytes, p.limits, self._cwd, self._env
            )
        except ProcessError as exc:
            return _error("io_error", f"spawn failed: {exc}", call_id, started)
        if timed_out:
            return _error(
                "timeout",
                f"command timed out after {_duration(p.external_timeout_ms)}",
                call_id,
                started,
                exit_code=-1,
            )
        stdout = self._redactor.known(_decode(out, out_cut))
        stderr = self._redactor.known(_decode(err, err_cut))
        text = stdout + _STDERR_START + stderr + _STDERR_END if stderr else stdout
        shown, truncated = cut_visibly(text, p.max_bytes)
        size = utf8_len(text)
        header: JsonObject = {
            "operation": "bash",
            "exit_code": exit_code,
            "had_stderr": bool(stderr),
            "duration_ms": elapsed_ms(started),
            "bytes": size,
        }
        if truncated or out_cut or err_cut:
            header["truncated"] = True
        return tool_result(shown, call_id, header)


def _error(code: str, text: str, call_id: str | None, started: float, **extra: Any) -> JsonObject:
    header: JsonObject = {
        "operation": "bash",
        "had_stderr": False,
        **extra,
        "duration_ms": elapsed_ms(started),
    }
    return tool_error(code, text, call_id, header)


BASH = CellType(
    "bash",
    CellClass.STATELESS,
    BashCell,
    default_max_concurrency=4,
    check_params=pydantic_check(BashParams, check_sandbox),
)
