"""``params`` of a ``subcolony`` cell, and the runtime ``params`` updates it takes.

``root`` is checked where it is parsed: a relative root is read against the cell's folder
(the folder of its ``config.json``), so a tree that carries its child colony along works from
wherever the daemon is started; it must be an existing directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from cells import runtime_params
from colony.cell import ParamProblem

__all__ = [
    "DEFAULT_PASSTHROUGH",
    "IMMUTABLE_KEYS",
    "MUTABLE_KEYS",
    "RESERVED_CONTEXT_KEY",
    "SubcolonyParams",
    "check_root",
    "resolve_root",
    "update_problem",
]

DEFAULT_PASSTHROUGH = ("PATH", "HOME", "USER", "LANG", "TERM")
"""The variables of this daemon's environment the child sees unless ``env_passthrough`` says
otherwise; everything else is cleared."""
RESERVED_CONTEXT_KEY = "turn_id"
"""The child-side context key the cell sets itself, per request (the reply's correlation)."""
MUTABLE_KEYS = ("boot_timeout_ms", "request_timeout_ms", "external_timeout_ms", "query_timeout_ms")
"""What a ``params`` body slot may change at runtime (kept in ``cell.db``)."""
IMMUTABLE_KEYS = (
    "root",
    "command",
    "env",
    "env_passthrough",
    "context_in",
    "emit_to",
    "kill_grace_ms",
    "max_concurrency",
)
"""What the child is and may see: fixed for the cell's life."""

Millis = Annotated[int, Field(ge=1)]


class SubcolonyParams(BaseModel):
    # meclaw's parser skips keys it does not read; the loader warns about each.
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)

    root: str
    """The child colony's tree (relative: to the cell's folder)."""
    command: str | None = None
    """The program to start (looked up on the child's PATH); None: this daemon's own Python
    running ``-m colony``, the same build as the parent."""
    env: dict[str, str] = Field(default_factory=dict)
    """Variables set for the child (over the passed-through ones)."""
    env_passthrough: list[str] = Field(default_factory=lambda: list(DEFAULT_PASSTHROUGH))
    """Variables of this daemon's environment the child keeps."""
    context_in: dict[str, str] = Field(default_factory=dict)
    """Parent context key → child context key; nothing else of the context crosses."""
    emit_to: str | None = None
    """Where frames the child sends on its own go (None: logged and dropped)."""
    boot_timeout_ms: Millis = 30_000
    """How long the child may take to say ``ready``."""
    request_timeout_ms: Millis = 120_000
    """How long a request waits for the child's reply."""
    external_timeout_ms: Millis = 30_000
    """How long one write to the child's stdin may take."""
    query_timeout_ms: Millis = 5_000
    """How long one ``cell.db`` operation (a params update) may take."""
    kill_grace_ms: Annotated[int, Field(ge=0)] = 5_000
    """Between SIGTERM and SIGKILL of the child's process group when the cell stops."""
    max_concurrency: Annotated[int, Field(ge=1)] = 64
    """Requests waiting on the child at once (read by the colony's runner); more wait in the
    mailbox."""

    @field_validator("root")
    @classmethod
    def _root(cls, value: str) -> str:
        if not value.strip():
            raise PydanticCustomError(
                "empty_root", "root is empty; name the folder of the child colony's tree"
            )
        return value

    @field_validator("command")
    @classmethod
    def _command(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise PydanticCustomError(
                "empty_command",
                "command is empty; name the program to start, or leave it out to run this "
                "daemon's own build",
            )
        return value

    @field_validator("context_in")
    @classmethod
    def _context_in(cls, value: dict[str, str]) -> dict[str, str]:
        for source, target in value.items():
            if target == RESERVED_CONTEXT_KEY:
                raise PydanticCustomError(
                    "reserved_context_key",
                    "context_in maps '{source}' to 'turn_id', which the cell sets itself for "
                    "each request (it pairs the child's reply with the request); map it to "
                    "another key",
                    {"source": source},
                )
        return value

    @field_validator("emit_to")
    @classmethod
    def _emit_to(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise PydanticCustomError(
                "empty_emit_to", "emit_to is empty; name a target, or leave the key out"
            )
        return value

    def merged(self, update: dict[str, Any]) -> SubcolonyParams:
        """These params with ``update`` applied, validated as a whole."""
        return SubcolonyParams.model_validate({**self.model_dump(), **update})


def resolve_root(root: str, folder: Path | None) -> Path:
    """``root`` as an absolute path: a relative one is read against the cell's folder."""
    path = Path(root).expanduser()
    if not path.is_absolute() and folder is not None:
        path = Path(folder) / path
    return path.resolve()


def check_root(params: SubcolonyParams, folder: Path | None) -> list[ParamProblem]:
    """The loader's check (``--validate``): ``root`` names an existing directory."""
    path = resolve_root(params.root, folder)
    if not path.exists():
        return [
            ParamProblem(
                ("root",),
                "root_missing",
                f"root {path} does not exist",
                "point root at the folder holding the child colony's tree (a relative root is "
                "read from this cell's folder)",
            )
        ]
    if not path.is_dir():
        return [
            ParamProblem(
                ("root",),
                "root_not_a_directory",
                f"root {path} is not a directory",
                "root names the folder of the child colony's tree, not a file in it",
            )
        ]
    return []


def update_problem(update: Any) -> str | None:
    """Why a ``params`` body slot cannot be applied, or None (:mod:`cells.runtime_params`)."""
    return runtime_params.update_problem(
        update, mutable=MUTABLE_KEYS, fixed=IMMUTABLE_KEYS, kind="subcolony"
    )
