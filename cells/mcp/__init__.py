"""The ``mcp`` cell type: an MCP server's tools as a tool cell (long-running); see
``docs/cells/mcp.md``.

The MCP SDK (and what it brings: starlette, OpenTelemetry's API, ...) is imported when the
first mcp cell is built, not here: every daemon and every ``--validate`` imports this module,
and most colonies have no mcp cell (the SDK costs about 0.8 s of start-up)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cells.mcp.params import McpParams, check_sandbox
from colony.cell import CellClass, CellSpec, CellType, pydantic_check

if TYPE_CHECKING:
    from cells.mcp.cell import McpCell


def build(spec: CellSpec) -> McpCell:
    """An mcp cell (imports the SDK on first use)."""
    from cells.mcp.cell import McpCell

    return McpCell(spec)


MCP = CellType(
    "mcp",
    CellClass.LONG_RUNNING,
    build,
    check_params=pydantic_check(McpParams, check_sandbox),
    default_max_concurrency=16,
    handles_concurrently=True,
)

__all__ = ["MCP", "McpParams", "build"]
