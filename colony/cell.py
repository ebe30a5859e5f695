"""What a cell is, seen from the runtime.

A cell type registers a :class:`CellType`: its name, its class of concurrency and a factory
that builds a cell from a :class:`CellSpec`. A cell answers ``handle(message)`` with zero or
more contents (JSON objects whose ``header`` becomes the next hop). Long-running cells also
have ``run(ctx)``, an I/O loop that emits source messages through ``ctx.emit``.

Cell modules import this module, never the router.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from colony.config.models import CellBlock, ColonyConfig, Contract
from colony.envelope import Envelope, JsonObject


class CellClass(StrEnum):
    STATEFUL = "stateful"
    """One message at a time, in order; may own ``cell.db``; spawned on first message."""
    STATELESS = "stateless"
    """Up to ``params.max_concurrency`` messages at once; may finish out of order."""
    LONG_RUNNING = "long_running"
    """Handles messages and runs an I/O loop; started at boot."""


@dataclass(frozen=True, slots=True)
class Emission:
    """A content object plus the target the cell names. The target only matters when it is a
    ``/colony/...`` endpoint; otherwise the sender's out-edges decide."""

    content: JsonObject
    target: str | None = None


Output = JsonObject | Emission


@dataclass(frozen=True, slots=True)
class CellSpec:
    """Everything a factory needs to build one cell."""

    path: str
    type: str
    folder: Path | None
    """The cell's own folder (``cell.db`` lives here); None for cells made in code."""
    params: Any
    contract: Contract
    cell: CellBlock
    colony: ColonyConfig


@runtime_checkable
class Cell(Protocol):
    async def handle(self, message: Envelope) -> Sequence[Output] | None:
        """Answer one message; None or ``[]`` emits nothing (no dead letter)."""
        ...


class CellContext(Protocol):
    """What a long-running cell's I/O loop can do."""

    path: str

    async def emit(self, content: JsonObject, target: str | None = None) -> None:
        """Emit a source message (fresh trace, empty context, the default TTL)."""
        ...


@runtime_checkable
class LongRunning(Protocol):
    async def run(self, ctx: CellContext) -> None:
        """The I/O loop; returning or raising ends it (raising restarts the cell)."""
        ...


@runtime_checkable
class Closable(Protocol):
    async def close(self) -> None:
        """Release resources (files, connections) when the cell sleeps or stops."""
        ...


@dataclass(frozen=True, slots=True)
class CellType:
    """A registered cell type."""

    name: str
    cell_class: CellClass
    factory: Callable[[CellSpec], Cell | Awaitable[Cell]]
    default_max_concurrency: int = 4
    """Stateless cells: concurrency when ``params.max_concurrency`` is absent."""
    options: dict[str, Any] = field(default_factory=dict)
