"""``params`` of an ``mcp`` cell (meclaw's ``McpParams`` plus ``tool``, ``offer_tools`` and the
``streamable_http`` transport), and the keys a runtime ``params`` body slot may change."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from cells import runtime_params
from colony.cell import ParamProblem

__all__ = ["MUTABLE_PARAMS", "Auth", "McpParams", "check_sandbox", "update_problem"]

Transport = Literal["http", "stdio", "streamable_http"]

MUTABLE_PARAMS = ("external_timeout_ms", "query_timeout_ms")
"""Keys a ``params`` body slot may change; the overlay in cell.db keeps them."""
IMMUTABLE_PARAMS = (
    "transport",
    "endpoint",
    "auth",
    "command",
    "args",
    "env",
    "cwd",
    "kill_grace_ms",
    "sandbox",
    "tool",
    "offer_tools",
    "max_concurrency",
)
"""The server's identity and what the cell offers: fixed for the cell's life."""

_HTTP_KEYS = ("endpoint", "auth")
_STDIO_KEYS = ("command", "args", "env", "cwd", "kill_grace_ms", "sandbox")


class Auth(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    bearer: str = ""
    """Sent as ``Authorization: Bearer <bearer>``; empty (``${MCP_BEARER:-}`` unset) sends no
    header at all."""


class McpParams(BaseModel):
    # meclaw's parser skips keys it does not read; the loader warns about each.
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)

    transport: Transport | None = None
    """``http`` (meclaw's one POST per JSON-RPC request), ``stdio`` (a child process) or
    ``streamable_http`` (the MCP Streamable HTTP transport, one session kept). Absent: stdio
    when ``command`` is given, else http."""
    endpoint: str | None = None
    """The server's URL (``http`` and ``streamable_http``)."""
    auth: Auth | None = None
    command: str | None = None
    """The server's executable (``stdio``)."""
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    """Set on top of the few variables the MCP SDK passes on by default (HOME, PATH, ...)."""
    cwd: str | None = None
    kill_grace_ms: Annotated[int, Field(ge=0)] = 2000
    """Between SIGTERM and SIGKILL to the server's process group when the cell closes."""
    sandbox: dict[str, Any] | None = None
    """meclaw's process sandbox: read, but not enforced by this build (a warning says so)."""
    external_timeout_ms: Annotated[int, Field(ge=1)] = 30_000
    """Wall clock of one server operation (connect, discovery, one tool call):
    ``provider_timeout``."""
    query_timeout_ms: Annotated[int, Field(ge=1)] = 5_000
    """Wall clock of one ``cell.db`` operation: ``query_timeout``."""
    tool: str | None = None
    """One fixed tool: a call's text is then the arguments object itself."""
    offer_tools: bool = False
    """Emit the tool listing (a ``system.tools`` write) after every discovery."""
    max_concurrency: Annotated[int, Field(ge=1)] = 16
    """Tool calls in flight at once."""

    @model_validator(mode="after")
    def _transport(self) -> McpParams:
        if self.endpoint is not None and self.command is not None:
            raise PydanticCustomError(
                "endpoint_and_command",
                "endpoint and command are mutually exclusive: a cell talks to one server; keep "
                "endpoint for a server reached over HTTP, command for one started as a child "
                "process",
            )
        kind = self.kind
        given = self.model_fields_set
        if kind == "stdio":
            if not (self.command or "").strip():
                raise PydanticCustomError(
                    "command_required",
                    "command is required for the stdio transport (the MCP server's executable) "
                    "and must not be empty",
                )
            wrong = [k for k in _HTTP_KEYS if k in given]
        else:
            if not (self.endpoint or "").strip():
                raise PydanticCustomError(
                    "endpoint_required",
                    "endpoint is required for the {kind} transport (the server's URL, e.g. "
                    '"http://127.0.0.1:8000/mcp") and must not be empty',
                    {"kind": kind},
                )
            if not self.endpoint.startswith(("http://", "https://")):  # type: ignore[union-attr]
                raise PydanticCustomError(
                    "invalid_endpoint", "endpoint must be an http:// or https:// URL"
                )
            wrong = [k for k in _STDIO_KEYS if k in given]
        if wrong:
            raise PydanticCustomError(
                "key_for_other_transport",
                "{key} belongs to the {other} transport, but this cell uses {kind}; remove it "
                "or set transport to match",
                {
                    "key": wrong[0],
                    "kind": kind,
                    "other": "http" if kind == "stdio" else "stdio",
                },
            )
        if self.tool is not None and not self.tool.strip():
            raise PydanticCustomError(
                "empty_tool", "tool is empty; name the one tool this cell calls, or remove it"
            )
        return self

    @property
    def kind(self) -> Transport:
        """The transport in use (``transport``, or what ``command``/``endpoint`` imply)."""
        if self.transport is not None:
            return self.transport
        return "stdio" if self.command is not None else "http"

    @property
    def bearer(self) -> str | None:
        return self.auth.bearer if self.auth is not None and self.auth.bearer else None


def check_sandbox(params: Any, folder: Path | None) -> list[ParamProblem]:
    """``sandbox`` is meclaw's process profile; this build has none to apply."""
    if not isinstance(params, McpParams) or params.sandbox is None:
        return []
    return [
        ParamProblem(
            ("sandbox",),
            "sandbox_not_enforced",
            "this build has no process sandbox: the MCP server runs with the daemon's rights",
            "remove params.sandbox to silence this warning, or run the daemon itself in a "
            "container that confines what the server may touch.",
            warning=True,
        )
    ]


def update_problem(update: Any) -> str | None:
    """Why a ``params`` body slot cannot be applied, or None (:mod:`cells.runtime_params`)."""
    return runtime_params.update_problem(
        update, mutable=MUTABLE_PARAMS, fixed=IMMUTABLE_PARAMS, kind="mcp"
    )
