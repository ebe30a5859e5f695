"""``params`` of a ``code`` cell.

Unknown keys are allowed on purpose: they are knobs for the script (``window_turns``…) and
reach it through stdin. Only the keys below mean something to the cell.
"""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from colony.cell import CellSpec, ParamProblem

INLINE_ARG_LIMIT = 131_071
"""Longer inline scripts run from a temporary file (the OS caps one argv string)."""


class CodeParams(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, frozen=True)

    runner: Literal["python3", "bash", "node"] = "python3"
    """What runs the script."""
    script_inline: str | None = None
    script: str | None = None
    """A file, relative to the cell's folder."""
    script_path: str | None = None
    """meclaw's key: an absolute path, or one relative to the daemon's working directory."""
    external_timeout_ms: Annotated[int, Field(ge=1)] = 60_000
    """Wall-clock limit of one run; the process group is killed when it elapses."""
    max_concurrency: Annotated[int, Field(ge=1)] = 4
    isolation: Literal["fork", "spawn", "pool"] | None = None
    """``pool`` (python3 only, the default): warm worker processes that run the script message
    after message (see ``cells/code/pool.py``); ``fork`` (python3 only): a fresh process forked
    from a warm worker for every message; ``spawn``: start the runner anew for every message.
    Pool is the default because it measured 3.5-4x faster and 4x cheaper in CPU per tool-loop
    turn than fork (docs/cells/code.md); fork is the choice when messages must not share a
    process."""
    runs_ahead: bool = True
    """A message may reach this cell before the hand-off that sent it is committed
    (docs/reliability.md, "Running ahead"): after a crash the cell may then see the message
    again under a new id. ``false`` for a script whose outside effects (a request, a file)
    must not repeat that way: its messages wait for their commit."""
    pool_max_jobs: Annotated[int, Field(ge=1)] = 1000
    """``pool``: a worker is replaced after this many messages."""
    pool_max_rss_mb: Annotated[int, Field(ge=16)] | None = 512
    """``pool``: a worker whose peak resident memory passed this is replaced; null lifts it."""
    interpreter: str | None = None
    """The Python used for python3 scripts (default: ``python3`` on PATH)."""
    cpu_seconds: Annotated[int, Field(ge=1)] | None = None
    """CPU limit of one run (RLIMIT_CPU); default: the timeout, rounded up."""
    memory_mb: Annotated[int, Field(ge=16)] | None = 2048
    """Address-space limit of one run (RLIMIT_AS); null lifts it."""
    max_output_bytes: Annotated[int, Field(ge=1)] = 4 * 1024 * 1024
    """A script that prints more is stopped: ``invalid_json``."""
    env: dict[str, str] = {}
    """Variables the script gets on top of the allow-listed ones (``PATH``, ``HOME``, locale…);
    ``"${VAR}"`` passes one of the daemon's."""
    max_processes: Annotated[int, Field(ge=1)] = 512
    """Processes and threads one run may have at once (a pids cgroup, else RLIMIT_NPROC)."""
    sandbox: Any = None
    """Accepted for meclaw trees; not applied (process isolation is not a sandbox)."""

    @model_validator(mode="after")
    def _one_script(self) -> CodeParams:
        given = [k for k in ("script_inline", "script", "script_path") if getattr(self, k)]
        if len(given) != 1:
            raise PydanticCustomError(
                "script_choice",
                "exactly one of script_inline, script, script_path is required (got {got})",
                {"got": ", ".join(given) or "none"},
            )
        if self.isolation in ("fork", "pool") and self.runner != "python3":
            raise PydanticCustomError(
                "isolation_unsupported",
                "isolation '{isolation}' runs python3 scripts only; use 'spawn' for {runner}",
                {"isolation": self.isolation, "runner": self.runner},
            )
        return self

    @property
    def forks(self) -> bool:
        """Whether messages run on the warm zygote of ``interpreter`` (``fork``, ``pool``)."""
        return self.runner == "python3" and self.isolation != "spawn"

    @property
    def pools(self) -> bool:
        return self.runner == "python3" and self.isolation in (None, "pool")

    @property
    def timeout(self) -> float:
        return self.external_timeout_ms / 1000

    @property
    def cpu_limit(self) -> int:
        return self.cpu_seconds or max(1, math.ceil(self.timeout))

    def script_file(self, folder: Path | None) -> Path | None:
        """The script file this cell runs, if it runs one."""
        if self.script is not None:
            return (folder or Path.cwd()) / self.script
        if self.script_path is not None:
            return Path(self.script_path)
        return None


def runs_ahead(spec: CellSpec) -> bool:
    """``CellType.runs_ahead`` of the code cell: unless its params say ``"runs_ahead": false``."""
    params = spec.params
    return not (isinstance(params, dict) and params.get("runs_ahead") is False)


def check_folder(params: CodeParams, folder: Path | None) -> list[ParamProblem]:
    """What must be there before the first message (checked by ``--validate`` and the boot,
    so neither starts a colony whose code cells cannot run): the script file, and the
    interpreter the warm worker is started with."""
    problems: list[ParamProblem] = []
    file = params.script_file(folder)
    if file is not None and not file.is_file():
        key = "script" if params.script is not None else "script_path"
        problems.append(
            ParamProblem(
                (key,),
                "script_missing",
                f"the script file {file} does not exist",
                "create it, or fix the path (script is relative to the cell's folder).",
            )
        )
    if params.runner == "python3" and params.interpreter is not None:
        if not _runnable(params.interpreter):
            # A forking cell starts its warm worker at boot, which would fail; a spawning
            # one would fail each message (io_error) but still boot.
            problems.append(
                ParamProblem(
                    ("interpreter",),
                    "interpreter_missing",
                    f"the interpreter '{params.interpreter}' is not an executable file "
                    "(nor a command on PATH)"
                    + ("" if params.forks else ", so every message of this cell would fail"),
                    "install it, fix the path, or remove interpreter to use python3 on PATH.",
                    warning=not params.forks,
                )
            )
    elif params.runner != "python3" and shutil.which(params.runner) is None:
        problems.append(
            ParamProblem(
                ("runner",),
                "runner_missing",
                f"'{params.runner}' is not on PATH here, so every message of this cell would "
                "fail to start",
                f"install {params.runner} where the daemon runs, or use another runner.",
                warning=True,
            )
        )
    return problems


def _runnable(command: str) -> bool:
    """Whether ``command`` names an executable file (a path) or a command on PATH."""
    if os.sep in command:
        return os.path.isfile(command) and os.access(command, os.X_OK)
    return shutil.which(command) is not None
