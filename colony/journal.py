"""The unit of work: one hand-off's effects, committed before any of it is carried out.

Under at-least-once delivery (``colony.json delivery``, the default) a hand-off is one
transaction of ``colony.db``: the handled message leaves the journal (``ack``), and its
message-log rows, its dead letters and every delivery it causes (journal rows) enter it. A
crash leaves the handled message and none of its effects, or its effects and not the message.
Under at-most-once delivery the same effects are applied without a commit: the rows go to the
writer one by one and nobody waits. That is the only difference between the two modes.

At boot, :meth:`Journal.redeliver` hands what the journal held to the cells' mailboxes.

Running ahead
-------------
A hand-off does not always wait for its commit. The writer commits units in the order they are
handed over, so a unit that acknowledges a message is never durable before the unit that
delivered it: the colony may put a delivery into a mailbox as soon as its unit is queued, and
the cell may handle it, while the writer catches up. A crash then loses the uncommitted tail of
a chain and the boot re-runs it from the last committed unit, which at-least-once delivery
allows already. Only what is meant to be re-run that way runs ahead: deliveries to cells whose
type says so (``CellType.runs_ahead``: store cells, and code cells unless their params say
``"runs_ahead": false``), from a handled message (an ingress's caller and a long-running cell's
source are told "journalled", so they wait), with no egress, each fitting in its mailbox (an
overflow keeps only journal ids: it takes committed rows only). The writer drops a delivery's
row and its acknowledgement when both fall in one transaction
(:class:`colony.persist.rows.Rows`), so a chain that runs ahead writes its journal rows only
where a crash could leave them. If such a unit turns out unstorable, its handled message is
dead-lettered ``unstorable`` as any other, and the dead letter says that what it delivered has
already run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from colony.dead_letters import DeadLetterCode
from colony.effects import Effects
from colony.envelope import Envelope
from colony.mailbox import HasMailbox, Mailbox, message_bytes
from colony.observability import Logger
from colony.persist.backend import Backend
from colony.persist.db import ColonyDb, UnitRejected
from colony.persist.escape import storable_text
from colony.persist.items import Unit
from colony.persist.journal import CellBacklog, JournalEntry, JournalSnapshot
from colony.routing import dead_letter

UNAWAITED_MAX = 256
"""Commits handed to the writer without waiting, at most, before one is waited for: a cell
draining a backlog must not pile up work that everyone else's commits then queue behind."""

Committed = Literal["applied", "duplicate", "rejected"]

SAMPLE = 20
"""Redelivered messages named one by one in the ``journal_redelivered`` log line."""


def redelivered_sample(head: Sequence[JournalEntry]) -> dict[str, Any]:
    """The ``traces`` and ``sample`` fields of a ``journal_redelivered`` line, from the oldest
    redelivered rows (at most :data:`SAMPLE`): a colony's boot and a cluster's takeover."""
    return {
        "traces": sorted({e.message.trace_id for e in head}),
        "sample": [
            {
                "id": e.message.id,
                "cell": e.cell,
                "sender": e.sender,
                "trace_id": e.message.trace_id,
            }
            for e in head
        ],
    }


def dead_letter_entry(fx: Effects, code: DeadLetterCode, entry: JournalEntry, detail: str) -> None:
    """Dead-letter a journal row whose cell cannot take it (``unresolved_path``: not in the
    tree; ``cell_inactive``), into ``fx``: a colony's boot and a cluster's claim alike. The
    row's cell is the resolved target, its message's target the original one."""
    dead_letter(fx, code, entry.sender, entry.message.target, entry.cell, entry.message, detail)


class Recipient(HasMailbox, Protocol):
    """A cell as redelivery sees it."""

    @property
    def active(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Ack:
    """The handled message a hand-off removes from the journal."""

    message_id: str
    cell: str


class Journal:
    """Commits hand-offs into ``colony.db`` (see the module docstring)."""

    def __init__(self, db: Backend, *, durable: bool, record: bool = True) -> None:
        self.db = db
        self.durable = durable
        """At-least-once delivery: deliveries are journal rows, committed before they are put."""
        self.record = record
        """Keep each handling's row (``handling``), as the message log is kept: off with it."""
        self.ahead: dict[str, Mailbox] = {}
        """The mailboxes of the cells a delivery may reach before its unit is committed, by
        path (see the module docstring, "Running ahead")."""
        self._unawaited = 0
        """Commits handed over since the last one waited for (see ``UNAWAITED_MAX``)."""

    async def commit(
        self,
        effects: Effects,
        *,
        ack: Ack | None = None,
        key: str | None = None,
        message: Envelope | None = None,
        fail_fast: bool = False,
    ) -> Committed:
        """Make ``effects`` durable: ``applied`` when they are to be carried out, ``duplicate``
        when ``key`` was taken in before, ``rejected`` when the unit could not be stored and
        ``message`` was dead-lettered ``unstorable`` instead.

        ``message`` is the handled (or ingress) message, what a unit that cannot be stored
        leaves in the dead letters. A ``fail_fast`` unit (an ingress whose caller answers at
        once) raises :class:`colony.persist.db.StorageUnavailable` while the storage refuses
        writes and :class:`colony.persist.db.UnitRejected` when it cannot be stored; any other
        unit waits until it can be written."""
        handled = effects.handled if self.record else None
        if not self.durable:
            if effects.logs or effects.letters or handled:
                self.db.write([*effects.logs, *effects.letters, *([handled] if handled else [])])
            return "applied"
        if ack is None and key is None and not effects:
            return "applied"
        unit = Unit(
            ack=None if ack is None else (ack.message_id, ack.cell),
            key=key,
            logs=effects.logs,
            letters=effects.letters,
            deliveries=effects.deliveries,
            message=message,
            fail_fast=fail_fast,
            handled=handled,
        )
        if ack is not None and self._unawaited < UNAWAITED_MAX and self._may_run_ahead(effects):
            # Nothing waits on this commit: the writer applies units in order, so a later
            # unit never lands without it; a crash before it re-runs the chain from the last
            # unit that landed.
            self._unawaited += 1
            self.db.commit_later(unit)
            return "applied"
        # Awaited: once it is in, so is every unit handed over before it (the writer is FIFO).
        self._unawaited = 0
        try:
            await self.db.commit(unit)
        except UnitRejected:
            # The writer logged it and dead-lettered the message (``unstorable``); nothing of
            # it is carried out. Only an ingress's caller has someone to tell.
            if fail_fast:
                raise
            return "rejected"
        return "duplicate" if unit.duplicate else "applied"

    def _may_run_ahead(self, effects: Effects) -> bool:
        """No egress, and every delivery for a cell that runs ahead and fits in its mailbox:
        an overflow keeps only journal ids, so it takes committed rows only."""
        if effects.egress:
            return False
        ahead = self.ahead
        per_cell: dict[str, tuple[int, int]] = {}
        for d in effects.deliveries:
            if d.cell not in ahead:
                return False
            count, nbytes = per_cell.get(d.cell, (0, 0))
            per_cell[d.cell] = (count + 1, nbytes + message_bytes(d.message))
        return all(ahead[cell].fits(*load) for cell, load in per_cell.items())

    async def redeliver(self, cells: Mapping[str, Recipient], log: Logger) -> dict[str, int]:
        """Attach what the journal holds to the mailboxes, before any cell runs; returns how
        many messages each cell gets back.

        Each cell then reads its own messages a page at a time, oldest first and ahead of
        anything delivered later, so per cell the order is the order of the first delivery and
        a journal larger than memory is never read whole. What the journal holds for a cell
        that left the tree (``unresolved_path``) or is inactive (``cell_inactive``) is
        dead-lettered."""
        if not self.durable:
            return {}
        assert isinstance(self.db, ColonyDb)  # a cluster's node claims per partition instead
        snapshot = await asyncio.to_thread(self.db.journal)
        if not snapshot.cells:
            return {}
        head = await asyncio.to_thread(snapshot.head, SAMPLE)
        stored = {storable_text(path): (path, cell) for path, cell in cells.items()}
        per_cell: dict[str, int] = {}
        gone = 0
        for name, count in snapshot.cells.items():
            found = stored.get(name)
            if found is None or not found[1].active:
                gone += await self._dead_letter(snapshot, name, found is None, log)
                continue
            found[1].mailbox.attach(CellBacklog(snapshot, name))
            per_cell[found[0]] = count
        log.warning(
            "journal_redelivered",
            messages=sum(per_cell.values()),
            dead_lettered=gone,
            cells=per_cell,
            **redelivered_sample(head),
            detail="these messages were in flight when the daemon last stopped; each is "
            "delivered again, in order per cell (at-least-once delivery)",
        )
        return per_cell

    async def _dead_letter(
        self, snapshot: JournalSnapshot, cell: str, gone: bool, log: Logger
    ) -> int:
        """Dead-letter, a page at a time, what the journal holds for one cell."""
        code = DeadLetterCode.UNRESOLVED_PATH if gone else DeadLetterCode.CELL_INACTIVE
        after = done = 0
        while page := await asyncio.to_thread(snapshot.page, cell, after):
            fx = Effects()
            for entry in page:
                dead_letter_entry(
                    fx,
                    code,
                    entry,
                    "the journal held this message for a cell that is no longer in the tree "
                    "or no longer active",
                )
            self.db.write(fx.letters)
            for note in fx.notes:
                getattr(log, note.level)(note.event, **note.fields)
            self.db.forget([entry.seq for entry in page])
            after = page[-1].seq
            done += len(page)
            await self.db.flush()  # one page in memory at a time
        return done
