"""The ``code`` cell: run the user's script once per message.

Stateless: up to ``max_concurrency`` messages run at once, each in a fresh process — forked
from a warm worker for python3 scripts (about 2 ms), or spawned (tens of ms) — or, with
``isolation: "pool"``, one after another in warm worker processes (:mod:`cells.code.pool`,
no process per message). The process runs
in the cell's own folder with an allow-listed environment plus ``params.env``, and at most
``params.max_processes`` processes (see :mod:`cells.code.isolation`,
:mod:`cells.code.zygote_client`). Everything that goes wrong is an ordinary emission with
``hop.finish_reason: "error"`` and an ``error_code``; the colony keeps routing. Error texts never
quote the values ``params.env`` passes under a credential-looking name.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from cells.code.isolation import job_environment, remove_directory, working_directory
from cells.code.params import INLINE_ARG_LIMIT, CodeParams
from cells.code.pool import PoolSettings, WorkerPool
from cells.code.process import Limits, ProcessError, RunResult
from cells.code.wire import (
    DETAIL_LIMIT,
    WireError,
    error_content,
    params_json,
    parse_stdout,
    script_params,
    stdin_document,
)
from cells.code.zygote_client import run_spawned, shared_zygote
from cells.procgroup import signal_name
from cells.redact import Redactor, looks_secret_key
from colony.cell import CellSpec, Emission
from colony.contracts import emits_violation
from colony.envelope import Envelope, JsonObject, split_content

_STDERR_START = "\n##meclaw-stderr-start##\n"
_STDERR_END = "##meclaw-stderr-end##"
_SHOWN_OUTPUT = 2000
"""How much of unusable stdout an ``invalid_json`` error quotes."""

_FLAGS = {"python3": "-c", "bash": "-c", "node": "-e"}


def default_interpreter() -> str:
    return shutil.which("python3") or sys.executable


class CodeCell:
    def __init__(self, spec: CellSpec) -> None:
        self.params = CodeParams.model_validate({} if spec.params is None else spec.params)
        self.path = spec.path
        self.contract = spec.contract
        self.multi_send = spec.contract.multi_send_capable
        self.log = spec.log
        self.visible = params_json(script_params(spec.params))
        """The params a script sees, as the JSON its stdin carries (made once)."""
        p = self.params
        self.limits = Limits(
            cpu_seconds=p.cpu_limit, address_space_mb=p.memory_mb, max_processes=p.max_processes
        )
        self._env = job_environment(p.env, tree_read_only=spec.state != spec.folder)
        self._redactor = Redactor(v for k, v in p.env.items() if looks_secret_key(k))
        self._cwd, self._own_cwd = working_directory(spec.folder)
        self._temp: Path | None = None
        interpreter = p.interpreter or default_interpreter()
        file = p.script_file(spec.folder)
        # A relative script_path means the daemon's working directory (as in meclaw), not the
        # cell's folder the script runs in: resolved here, once.
        self._file = None if file is None else file.absolute()
        self._script = p.script_inline
        if (
            self._script is not None
            and len(self._script.encode()) > INLINE_ARG_LIMIT
            and not p.forks
        ):
            handle, name = tempfile.mkstemp(prefix="meclaw-script-", suffix=".script")
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(self._script)
            os.chmod(name, 0o600)
            self._temp = self._file = Path(name)
            self._script = None
        runner = interpreter if p.runner == "python3" else p.runner
        if self._script is not None:
            self._argv = [runner, _FLAGS[p.runner], self._script]
        else:
            self._argv = [runner, str(self._file)]
        self._zygote = shared_zygote(interpreter) if p.forks else None
        self._pool: WorkerPool | None = None
        if p.pools and self._zygote is not None:
            self._pool = WorkerPool(
                self._zygote,
                PoolSettings(
                    script=self._script,
                    path=None if self._file is None else str(self._file),
                    cwd=self._cwd,
                    env=self._env,
                    limits=self.limits,
                    max_output_bytes=p.max_output_bytes,
                    max_jobs=p.pool_max_jobs,
                    max_rss_mb=p.pool_max_rss_mb,
                    size=p.max_concurrency,
                ),
                log=self.log,
                cell=self.path,
            )

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
        if self._temp is not None:
            with contextlib.suppress(FileNotFoundError):
                self._temp.unlink()
            self._temp = None
        remove_directory(self._own_cwd)
        self._own_cwd = None

    async def _forked(self, stdin: bytes) -> RunResult:
        """One run outside the pool: forked from the warm worker, or spawned."""
        p = self.params
        if self._zygote is not None:
            await self._zygote.start()
            return await self._zygote.run(
                script=self._script,
                path=str(self._file) if self._script is None else None,
                stdin=stdin,
                timeout=p.timeout,
                limits=self.limits,
                max_stdout_bytes=p.max_output_bytes,
                cwd=self._cwd,
                env=self._env,
            )
        return await run_spawned(
            self._argv,
            stdin,
            timeout=p.timeout,
            max_stdout_bytes=p.max_output_bytes,
            limits=self.limits,
            cwd=self._cwd,
            env=self._env,
        )

    async def handle(self, message: Envelope) -> list[Emission]:
        target = message.reply_to or self.path
        contents = await self._contents(message)
        return [Emission(self._scrubbed(content), target) for content in contents]

    def _scrubbed(self, content: JsonObject) -> JsonObject:
        """An error emission without the secrets ``params.env`` passes (a script may print
        its environment); a successful one is the script's own output, left as it is."""
        header = content.get("header")
        if not isinstance(header, dict) or header.get("finish_reason") != "error":
            return content
        known = self._redactor.known
        for turn in content.get("messages") or []:
            if isinstance(turn, dict) and isinstance(turn.get("text"), str):
                turn["text"] = known(turn["text"])
        meta = content.get("meta")
        error = meta.get("error") if isinstance(meta, dict) else None
        if isinstance(error, dict):
            for key in ("detail", "traceback"):
                if isinstance(error.get(key), str):
                    error[key] = known(error[key])
        return content

    async def _contents(self, message: Envelope) -> list[JsonObject]:
        stdin = stdin_document(message, self.path, self.visible)
        try:
            if self._pool is not None:  # the usual case, without a coroutine of its own
                result = await self._pool.run(stdin, timeout=self.params.timeout)
            else:
                result = await self._forked(stdin)
        except ProcessError as exc:
            return [error_content("io_error", str(exc))]
        duration = result.duration_ms
        had_stderr = bool(result.stderr)
        if result.timed_out:
            return [error_content("script_timeout", "script timed out", duration_ms=duration)]
        stdout = result.stdout
        if result.stdout_overflow:
            return [
                error_content(
                    "invalid_json",
                    f"invalid_json: stdout exceeded max_output_bytes "
                    f"({self.params.max_output_bytes}); the script was stopped. It began: "
                    + _shown(stdout),
                    exit_code=result.exit_code,
                    had_stderr=had_stderr,
                    duration_ms=duration,
                )
            ]
        stderr_text = result.stderr.decode("utf-8", "replace")
        if result.exit_code != 0:
            text = stdout.decode("utf-8", "replace")
            if result.term_signal == signal.SIGXCPU:
                text = f"the script hit its CPU limit ({self.limits.cpu_seconds} s). " + text
            if stderr_text:
                text += _STDERR_START + stderr_text + _STDERR_END
            return [
                error_content(
                    "script_failed",
                    text,
                    error=_failure(result, stderr_text, self.limits),
                    exit_code=result.exit_code,
                    had_stderr=had_stderr,
                    duration_ms=duration,
                )
            ]
        if stderr_text and self.log is not None:
            self.log.warning(
                "code_stderr",
                cell=self.path,
                trace_id=message.trace_id,
                stderr=self._redactor.known(stderr_text),
            )
        try:
            items = parse_stdout(stdout)
        except WireError as exc:
            return [
                error_content(
                    "invalid_json",
                    f"{exc}; the script printed: {_shown(stdout)}",
                    exit_code=result.exit_code,
                    had_stderr=had_stderr,
                    duration_ms=duration,
                )
            ]
        if len(items) > 1 and not self.multi_send:
            return [
                error_content(
                    "multi_send_not_declared",
                    "script emitted JSON-Array without multi_send_capable "
                    f"({len(items)} messages; set contract.multi_send_capable: true)",
                    duration_ms=duration,
                )
            ]
        stamped = [_stamp(item, result.exit_code, duration, had_stderr) for item in items]
        emits = self.contract.emits
        if not emits.body and not emits.hop:  # nothing declared: nothing to check
            return stamped
        problems = [v for v in (_violation(self.contract, item) for item in stamped) if v]
        if problems:
            return [
                error_content(
                    "contract_violation",
                    "script output violates contract.emits: " + "; ".join(problems),
                    duration_ms=duration,
                )
            ]
        return stamped


def _failure(result: RunResult, stderr: str, limits: Limits) -> JsonObject:
    """``meta.error`` of a script that failed: the cause in one line (a Python script's
    exception line is the last line of its stderr) and the stderr tail as its traceback."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    if result.term_signal == signal.SIGXCPU:
        detail = f"the script hit its CPU limit ({limits.cpu_seconds} s)"
    elif lines:
        detail = lines[-1].strip()
    elif result.term_signal is not None:
        detail = f"the script was ended by signal {signal_name(result.term_signal)}"
    else:
        detail = f"the script exited with status {result.exit_code}"
    error: JsonObject = {"detail": detail[:DETAIL_LIMIT], "exit_code": result.exit_code}
    if stderr:
        error["traceback"] = stderr
    return error


def _shown(stdout: bytes) -> str:
    text = stdout[: _SHOWN_OUTPUT * 4].decode("utf-8", "replace")
    if len(text) > _SHOWN_OUTPUT or len(stdout) > _SHOWN_OUTPUT * 4:
        return text[:_SHOWN_OUTPUT] + f"… [cut, {len(stdout)} bytes]"
    return text or "(nothing)"


def _stamp(item: JsonObject, exit_code: int, duration: int, had_stderr: bool) -> JsonObject:
    """``item`` (just parsed: nothing else holds it) with the run's fields in its header."""
    header = item.get("header")
    if not header:
        header = item["header"] = {}
    header.update(exit_code=exit_code, duration_ms=duration, had_stderr=had_stderr)
    return item


def _violation(contract: Any, item: JsonObject) -> str | None:
    hop, body = split_content(item)
    return emits_violation(contract, hop, body)
