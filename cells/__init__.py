"""Built-in cell types.

Cells never import the router: the composition roots (``colony.cli``, ``colony.testing``)
hand this list to the kernel. Types whose implementation lands in a later release are listed
already, so a tree that uses them validates today.
"""

from __future__ import annotations

BUILTIN_CELL_TYPES: frozenset[str] = frozenset(
    {
        "bash",
        "code",
        "file",
        "llm",
        "proxy",
        "store",
        "timer",
        "web_fetch",
        "web_search",
    }
)
"""Every non-hive ``cell.type`` a colony tree may use."""
