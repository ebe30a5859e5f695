"""Built-in cell types.

Cells never import the router: the composition roots (``colony.cli``, ``colony.testing``)
hand this list to the kernel. Types whose implementation lands in a later release are listed
already, so a tree that uses them validates today.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from colony.cell import CellType

BUILTIN_CELL_TYPES: frozenset[str] = frozenset(
    {
        "bash",
        "code",
        "edit",
        "file",
        "llm",
        "mcp",
        "proxy",
        "store",
        "subcolony",
        "timer",
        "web_fetch",
        "web_search",
    }
)
"""Every non-hive ``cell.type`` a colony tree may use."""


def implemented_cell_types() -> dict[str, CellType]:
    """Cell types with an implementation in this build, by name.

    Imported lazily so that loading a tree never imports every cell's dependencies.
    """
    from cells.bash import BASH
    from cells.code import CODE
    from cells.edit import EDIT
    from cells.file import FILE
    from cells.llm import LLM
    from cells.mcp import MCP
    from cells.proxy import PROXY
    from cells.store import STORE
    from cells.subcolony import SUBCOLONY
    from cells.timer import TIMER
    from cells.web import WEB_FETCH, WEB_SEARCH

    kinds = (
        BASH,
        CODE,
        EDIT,
        FILE,
        LLM,
        MCP,
        PROXY,
        STORE,
        SUBCOLONY,
        TIMER,
        WEB_FETCH,
        WEB_SEARCH,
    )
    return {cell_type.name: cell_type for cell_type in kinds}


async def close_shared_resources() -> None:
    """Stop what cell types share across cells (the code cell's warm workers)."""
    from cells.code.zygote_client import close_shared_zygotes

    await close_shared_zygotes()


async def prepare(cells: Iterable[tuple[str, Any]]) -> None:
    """Start what cells share before the daemon starts its own threads: the warm worker
    every forking python3 ``code`` cell uses, and the one that starts the processes of
    ``bash`` cells and spawning ``code`` cells. Starting the first of them seals the daemon
    (its start-up environment zeroed, see ``cells.code.isolation``), which is best done while
    the daemon has no other thread. ``cells`` are ``(type, params)`` pairs.

    Raises :class:`~colony.errors.BootError` when a worker cannot start (the loader has
    already refused an interpreter that does not exist; this is one that is not Python)."""
    from cells.code.cell import default_interpreter
    from cells.code.params import CodeParams
    from cells.code.process import ProcessError
    from cells.code.zygote_client import shared_zygote
    from colony.errors import BootError

    interpreters: set[str] = set()
    for cell_type, params in cells:
        if cell_type == "bash":
            interpreters.add(sys.executable)
        if cell_type != "code":
            continue
        parsed = CodeParams.model_validate({} if params is None else params)
        interpreters.add(
            (parsed.interpreter or default_interpreter()) if parsed.forks else sys.executable
        )
    for interpreter in sorted(interpreters):
        try:
            await shared_zygote(interpreter).start()
        except ProcessError as exc:
            raise BootError(
                [f"the warm worker of python3 code cells ({interpreter}) cannot start: {exc}"]
            ) from None
