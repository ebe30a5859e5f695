"""The seam where the colony meets its database: what the kernel asks of one.

Two backends implement it: :class:`colony.persist.db.ColonyDb` (``colony.db``, SQLite, the
embedded default: one node, one partition, always owned) and
:class:`colony.persist.pg.db.PgDb` (PostgreSQL, several daemons: ``colony.json`` ``cluster``).
On either, a :class:`~colony.persist.items.Unit` (ack, deliveries, message-log rows, dead
letters, a store's writes, the ingress key) commits in one transaction.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar

from colony.dead_letters import DeadLetter
from colony.effects import Handled, LogRow
from colony.persist.db import DbStatistics
from colony.persist.items import Unit
from colony.persist.records import DeadLetterRow, MessageLogEntry
from colony.persist.source import Source
from colony.persist.writer import Event

T = TypeVar("T")


class Backend(Protocol):
    """What the kernel writes through and reads back (see the implementations' docstrings)."""

    dialect: str
    """``"sqlite"`` or ``"postgres"``: which SQL a cell's own tables speak."""

    @property
    def source(self) -> Source:
        """Where the colony's rows are read (:mod:`colony.persist.source`)."""
        ...

    @property
    def closed(self) -> bool: ...

    @property
    def journalled(self) -> int: ...

    @property
    def rows_written(self) -> int: ...

    @property
    def lost(self) -> str | None: ...

    def write(self, rows: Iterable[LogRow | DeadLetter | Handled]) -> None: ...

    def set_registry(self, path: str, cell_id: str, cell_type: str, status: str) -> None: ...

    def listen(self, on_event: Event) -> None: ...

    def unavailable(self) -> str | None: ...

    def statistics(self) -> DbStatistics: ...

    def check_file(self) -> str | None: ...

    async def flush(self) -> None: ...

    async def commit(self, unit: Unit) -> None: ...

    def commit_later(self, unit: Unit) -> None: ...

    def execute(
        self,
        work: Callable[[Any], T],
        ack: tuple[str, str] | None = ...,
        done: Callable[[BaseException | None], None] = ...,
    ) -> asyncio.Future[T]: ...

    def forget(self, seqs: Sequence[int]) -> None: ...

    def close(self) -> None: ...

    async def message_log(self, trace_id: str | None = None) -> list[MessageLogEntry]: ...

    async def dead_letters(
        self, *, error_code: str | None = None, since: int | None = None, limit: int | None = None
    ) -> list[DeadLetterRow]: ...
