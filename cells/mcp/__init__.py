"""The ``mcp`` cell type: an MCP server's tools as a tool cell (long-running); see
``docs/cells/mcp.md``."""

from __future__ import annotations

from cells.mcp.cell import McpCell
from cells.mcp.params import McpParams, check_sandbox
from colony.cell import CellClass, CellType, pydantic_check

MCP = CellType(
    "mcp",
    CellClass.LONG_RUNNING,
    McpCell,
    check_params=pydantic_check(McpParams, check_sandbox),
    default_max_concurrency=16,
    handles_concurrently=True,
)

__all__ = ["MCP", "McpCell", "McpParams"]
