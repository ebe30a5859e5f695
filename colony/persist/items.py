"""What the ``colony.db`` writer's queue carries: rows, units, and the barriers between them.

A :class:`Unit` is the at-least-once hand-off (one handled message and everything it caused);
an :class:`Execute` is a cell's own SQL run inside the writer's transaction (a store's write,
committed with the unit that answers it); the rest are single rows written outside any unit
(at-most-once mode, boot, registry) and the writer's own barriers (:class:`Fence`,
:class:`Stop`). Each :data:`Piece` can be applied, or
fail, on its own: that is what lets one bad unit fail alone.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from colony.celltables import storage_failure
from colony.dead_letters import DeadLetter
from colony.effects import Delivery, Handled, LogRow
from colony.envelope import Envelope


@dataclass(frozen=True, slots=True)
class Registry:
    path: str
    cell_id: str
    cell_type: str
    status: str
    at: int


@dataclass(frozen=True, slots=True)
class Forget:
    """Remove one journal row (its cell is gone; the caller dead-letters the message)."""

    seq: int


@dataclass(slots=True)
class Unit:
    """Everything one hand-off writes, committed in one transaction (at-least-once delivery).

    A unit is what the colony does with one message: the handling cell's emissions routed,
    their message-log rows and dead letters, every delivery they cause (journal inserts), and
    the removal of the handled message from the journal (``ack``). Committed together, a crash
    leaves either the handled message in the journal and none of its effects, or its effects
    and not the message. ``key`` makes an ingress idempotent: a unit whose key was seen before
    commits nothing and reports itself a duplicate.
    """

    ack: tuple[str, str] | None = None
    """``(message id, cell path)`` of the handled message, or None for an ingress."""
    key: str | None = None
    logs: list[LogRow] = field(default_factory=list)
    letters: list[DeadLetter] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    """Journal inserts: the caller puts them into the mailboxes once committed."""
    duplicate: bool = False
    message: Envelope | None = None
    """The handled message (or the ingress's own): what is dead-lettered if the unit cannot
    be stored."""
    fail_fast: bool = False
    """An ingress whose caller answers at once: fail it while the storage is unavailable
    instead of keeping it for a retry."""
    handled: Handled | None = None
    """How the handled message's handling went (its ``handling`` row)."""


Done = Callable[[BaseException | None], None]


class Commit:
    __slots__ = ("done", "unit", "waited")

    def __init__(self, unit: Unit, done: Done, *, waited: bool = True) -> None:
        self.unit = unit
        self.done = done
        self.waited = waited
        """Somebody waits for this commit (False: a unit handed over to run ahead)."""


class Execute:
    """A cell's SQL run on the writer's connection inside the current transaction (its tables
    live in ``colony.db``, see :mod:`colony.celltables`). ``executed`` gets the work's result as
    soon as it ran (or the exception it raised); ``done`` is told when it is committed, like a
    :class:`Commit`. ``ack`` names the handled message whose unit the writer waits for, briefly,
    before committing, so the write and that unit share one transaction."""

    __slots__ = ("ack", "done", "executed", "fence", "work")

    def __init__(
        self,
        work: Callable[[sqlite3.Connection], Any],
        ack: tuple[str, str] | None,
        executed: Callable[[Any, BaseException | None], None],
        done: Done,
        fence: tuple[int, int | None] | None = None,
    ) -> None:
        self.work = work
        self.ack = ack
        self.executed = executed
        self.done = done
        self.fence = fence
        """``(partition, epoch)`` of the message whose handling wrote (a cluster refuses the
        write once that ownership ended, like the unit it belongs with); None: not fenced."""

    def run(self, conn: sqlite3.Connection) -> None:
        """Run the work in a savepoint; a retried transaction runs it again (the same writes
        in the same order give the same results) and only the first result is reported. A
        work that fails on its own (its SQL, a bug) is undone and its error handed to the
        cell; one the storage failed passes on, and the writer keeps the transaction."""
        conn.execute("SAVEPOINT cell_sql")
        try:
            result = self.work(conn)
        except Exception as exc:
            if storage_failure(exc) or not conn.in_transaction:
                raise
            conn.execute("ROLLBACK TO cell_sql")
            conn.execute("RELEASE cell_sql")
            self.executed(None, exc)
            return
        conn.execute("RELEASE cell_sql")
        self.executed(result, None)


class Fence:
    """Passes once everything queued before it was tried (committed, rejected, or kept for a
    retry while the storage is unavailable: reads then see what is committed)."""

    __slots__ = ("done",)

    def __init__(self, done: Done) -> None:
        self.done = done


class Stop:
    pass


Piece = LogRow | DeadLetter | Handled | Registry | Forget | Commit | Execute
"""What one writer transaction applies; each can be applied, or fail, on its own."""

Item = Piece | Fence | Stop
"""Everything the writer's queue carries."""
