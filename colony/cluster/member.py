"""This daemon as one member of a cluster: which conversations it runs, and taking them over.

The kernel asks three things of it:

* :meth:`Member.assign` at ingress (and for a long-running cell's own emissions): the
  message's partition, from ``cluster.partition_by``, and the epoch this node owns it under,
  or None when another node owns it (the delivery is then journalled unclaimed and its owner
  woken: it is never handled here);
* :meth:`Member.holds` before a hand-off is committed: a message whose partition this node
  lost since it took the message in is dropped here (the journal keeps it for the new owner);
* :meth:`Member.run`, a task: renew the leases every third of ``lease_ms``, claim the journal
  rows of partitions gained (boot redelivery, per partition) or of those a ``NOTIFY`` names,
  drain and hand back the partitions past this node's fair share.

What the writer's fence adds: even a hand-off that passed :meth:`holds` is refused if the
partition moved before it committed (:mod:`colony.persist.pg.writer`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import traceback
from typing import Protocol

import psycopg

from colony.cluster.partition import partition_key, partition_of
from colony.config.models import ClusterConfig
from colony.dead_letters import DeadLetterCode
from colony.effects import Delivery, Effects
from colony.envelope import Envelope
from colony.errors import BootError
from colony.journal import SAMPLE, dead_letter_entry, redelivered_sample
from colony.observability import Logger
from colony.persist.journal import JournalEntry
from colony.persist.pg.claims import ClaimOutcomeUnknown, claim, claimed_by
from colony.persist.pg.ownership import NodeNameTaken, Ownership
from colony.persist.pg.txid import status_now
from colony.persist.pg.writer import CLAIM_CHANNEL, scrub
from colony.persist.writer import PersistenceError
from colony.shielded import run_to_end

DRAIN_MAX_LEASES = 3
"""A partition being handed back is released after this many leases even if a chain in it is
still running (a conversation that never pauses must not pin it): what is left runs again on
the new owner, from the journal."""


class Carrier(Protocol):
    """What a member needs of the colony to deliver claimed messages."""

    def refusal(self, cell: str) -> DeadLetterCode | None:
        """None when the cell exists and is active; else the code its claimed messages are
        dead-lettered with (``unresolved_path``: not in the tree; ``cell_inactive``)."""
        ...

    async def deliver_claimed(self, delivery: Delivery) -> None: ...

    async def dead_letter_claimed(self, entry: JournalEntry, fx: Effects) -> None: ...


class Member:
    """One node's share of the cluster (see the module docstring)."""

    def __init__(self, config: ClusterConfig, dsn: str, node: str, log: Logger) -> None:
        self.config = config
        self.dsn = dsn
        self.node = node
        self.log = log
        self.partitions = config.partitions
        self.ownership = Ownership(dsn, node, config.partitions, config.lease_ms)
        self._leaders = Ownership(dsn, node, config.partitions, config.lease_ms)
        """Leader leases on a connection of their own: cells ask at any time, and a claim's
        transaction on the partitions' connection must not take their statements in."""
        self.owned = self.ownership.owned
        """Partition → epoch: shared with :attr:`ownership`, which keeps it current."""
        self._draining_since: dict[int, float] = {}
        self._replaying: set[int] = set()
        """Partitions gained whose journal rows are not delivered yet (see :meth:`assign`)."""
        self._wanted: set[int] = set()
        self._wake = asyncio.Event()
        self._unresolved: dict[tuple[int, int], int] = {}
        """(partition, transaction id) → epoch: claims whose COMMIT got no answer and whose
        outcome the server could not tell yet (see :meth:`_resolve`)."""
        self.claimed = 0
        """Journal rows taken in from the database (gained partitions, other nodes' ingress)."""
        self.fenced = 0

    # -- what the kernel asks -----------------------------------------------------------------

    def partition_of(self, message: Envelope) -> int:
        key = partition_key(self.config.partition_by, message.trace_id, message.headers.context)
        return partition_of(key, self.partitions)

    def assign(self, message: Envelope) -> None:
        """Set the partition and epoch of a message that starts a conversation here."""
        partition = self.partition_of(message)
        message.partition = partition
        # A partition being handed back, or taken over and not yet replayed, takes nothing new
        # here: journalled unclaimed, it is claimed after what the journal already held.
        busy = partition in self.ownership.draining or partition in self._replaying
        message.epoch = None if busy else self.owned.get(partition)

    def holds(self, message: Envelope) -> bool:
        """This node still owns the message's partition under the epoch it took it in."""
        epoch = message.epoch
        return epoch is not None and self.owned.get(message.partition) == epoch

    def lost(self, message: Envelope) -> bool:
        """Not :meth:`holds`: a runner does not handle such a message."""
        epoch = message.epoch
        return epoch is None or self.owned.get(message.partition) != epoch

    def _said(self, exc: BaseException) -> str:
        """An error as one line, without the DSN's password (psycopg may quote the DSN)."""
        return scrub(f"{type(exc).__name__}: {exc}".splitlines()[0], self.dsn)

    # -- leader leases (colony.cell.Leader) ---------------------------------------------------

    async def lead(self, name: str) -> bool:
        try:
            return await self._leaders.lead(name)
        except (psycopg.Error, OSError) as exc:
            self.log.warning("leader_lease_failed", name=name, error=self._said(exc))
            return False

    def leads(self, name: str) -> bool:
        return name in self._leaders.leading

    async def resign(self, name: str) -> None:
        try:
            await self._leaders.resign(name)
        except (psycopg.Error, OSError) as exc:  # it lapses with the lease then
            self.log.warning("leader_resign_failed", name=name, error=self._said(exc))

    def dropped(self, cell: str, message: Envelope) -> None:
        """A hand-off of a partition this node lost was not committed (nor carried out)."""
        self.fenced += 1
        self.log.warning(
            "hand_off_dropped",
            node=self.node,
            cell=cell,
            message_id=message.id,
            trace_id=message.trace_id,
            partition=message.partition,
            detail="this node no longer owns the conversation's partition; the hand-off was "
            "not committed and the partition's owner runs the message from the journal",
        )

    # -- the task -----------------------------------------------------------------------------

    async def join(self, carrier: Carrier) -> None:
        """The first round, before the colony takes ingress: the partitions free to take are
        this node's (and their journal rows in its mailboxes) when its boot ends."""
        try:
            await self._round(carrier)
        except NodeNameTaken as exc:
            raise BootError([str(exc)]) from None
        except (psycopg.Error, OSError) as exc:
            self.log.warning(
                "cluster_round_failed",
                node=self.node,
                error=type(exc).__name__,
                detail="the cluster database did not answer this node's first lease round; "
                "it tries again in the background",
            )

    async def run(self, carrier: Carrier) -> None:
        """Leases, claims and drains until cancelled; then hands everything back."""
        listener = asyncio.create_task(self._listen(), name="cluster listen")
        period = self.config.lease_ms / 3000
        try:
            while True:
                self._wake.clear()  # (before the round: a NOTIFY during it wakes the next)
                try:
                    await self._round(carrier)
                except (psycopg.Error, OSError) as exc:
                    self.log.warning(
                        "cluster_round_failed",
                        node=self.node,
                        error=self._said(exc),
                        detail="the cluster database did not answer a lease round; this node "
                        "tries again, and loses its partitions if its lease runs out meanwhile",
                    )
                except Exception as exc:  # a bug: say so, keep the leases going
                    self.log.error(
                        "cluster_round_failed",
                        node=self.node,
                        error=self._said(exc),
                        traceback="".join(traceback.format_exception(exc)).rstrip(),
                    )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), period)
        finally:
            listener.cancel()
            await asyncio.gather(listener, return_exceptions=True)

    async def stop(self) -> None:
        """Hand every partition back at once (a clean stop: no one waits for a lease). Within
        a lease at most: past it, the partitions lapse by themselves anyway."""
        within = self.config.lease_ms / 1000
        for ownership in (self.ownership, self._leaders):
            try:
                async with asyncio.timeout(within):
                    await ownership.stop()
            except (psycopg.Error, OSError, TimeoutError) as exc:
                self.log.warning(
                    "partitions_not_handed_back",
                    node=self.node,
                    error=self._said(exc),
                    detail="the stop could not hand this node's leases back; they lapse "
                    "within cluster.lease_ms, and a restart under the same --node waits that long",
                )

    async def _round(self, carrier: Carrier) -> None:
        changes = await self.ownership.tick()
        self._replaying |= set(changes.gained)
        self._replaying &= set(self.owned)
        for name in list(self._leaders.leading):
            await self.lead(name)
        if changes.lost:
            self.log.warning(
                "partitions_lost",
                node=self.node,
                partitions=sorted(changes.lost),
                detail="another node owns these conversations now (this node missed its "
                "lease); what it still holds of them is dropped, the new owner runs them from "
                "the journal",
            )
        if changes.gained:
            self.log.info("partitions_gained", node=self.node, partitions=sorted(changes.gained))
        now = time.monotonic()
        for partition in changes.drain:
            self._draining_since[partition] = now
        for partition in list(self._draining_since):
            await self._drain(partition, now)
        wanted = set(changes.gained) | {p for p in self._wanted if p in self.owned}
        self._wanted.clear()
        # Every round also sweeps every owned partition: a NOTIFY sent while this node was
        # not listening (reconnecting) is not lost, only later.
        entries: list[JournalEntry] = []
        try:
            await self._resolve(entries)
            # A claim found committed after all delivers its rows at the end of this round,
            # as a claim does: its partition takes new work only from the next round on.
            resolved = {entry.message.partition for entry in entries}
            for partition in sorted(wanted | set(self.owned)):
                claimed = await self._claim(partition)
                # Nothing older left (none in a claim whose outcome is not known either): what
                # enters now may run here at once.
                if (
                    not claimed
                    and partition not in resolved
                    and not any(p == partition for p, _ in self._unresolved)
                ):
                    self._replaying.discard(partition)
                entries += claimed
        finally:
            # What was claimed is delivered even when a later claim failed: a claimed row is
            # this node's to run (no sweep takes it again under the same epoch). Several
            # partitions' rows go oldest first across them all: a restarted colony's cells
            # get their messages back in the order they were first delivered, as when alone.
            entries.sort(key=lambda e: e.seq)
            gone = 0
            for entry in entries:
                gone += not await self._carry(carrier, entry)
            if changes.gained and entries:
                self._redelivered(entries, gone)

    def _redelivered(self, entries: list[JournalEntry], gone: int) -> None:
        """The line a colony alone writes at boot, for the rows a gain brought back."""
        cells: dict[str, int] = {}
        for entry in entries:
            cells[entry.cell] = cells.get(entry.cell, 0) + 1
        self.log.warning(
            "journal_redelivered",
            node=self.node,
            messages=len(entries) - gone,
            dead_lettered=gone,
            cells=cells,
            **redelivered_sample(entries[:SAMPLE]),
            detail="these messages were in flight in partitions this node took over; each is "
            "delivered again, in order (at-least-once delivery)",
        )

    async def _claim(self, partition: int) -> list[JournalEntry]:
        epoch = self.owned.get(partition)
        if epoch is None or partition in self.ownership.draining:
            return []
        conn = await self.ownership._connection()
        # A claim is one short transaction on the lease connection: a stop that cancels the
        # round waits for it to end rather than cut it between BEGIN and COMMIT, where the
        # release would run inside it and be rolled back when the connection closes (the node
        # would stay registered, refusing its own restart for a lease).
        running = asyncio.ensure_future(
            claim(
                conn,
                self.node,
                partition,
                epoch,
                dsn=self.dsn,
                patience_s=self.config.lease_ms / 3000,  # the next renewal is due within a lease
                lost=lambda exc: self._answer_lost(partition, exc),
            )
        )
        try:
            entries = await run_to_end(running)
        except ClaimOutcomeUnknown as unknown:
            self._unresolved[(partition, unknown.xid)] = epoch
            self.log.warning(
                "claim_outcome_unknown",
                node=self.node,
                partition=partition,
                xid=unknown.xid,
                error=self._said(unknown.cause),
                detail="the connection failed while committing a claim of the partition's "
                "journal rows and the database could not tell whether it committed; this node "
                "asks again every round: committed, the rows are delivered then; not, the next "
                "claim takes them",
            )
            return []
        self.claimed += len(entries)
        return entries

    async def _resolve(self, out: list[JournalEntry]) -> None:
        """Add to ``out`` the rows of the claims whose outcome was not known, for those now
        known committed (at once: what a failure further on leaves there is still delivered).
        A committed claim's rows carry this node's epoch, which no later claim takes: only
        this delivers them. An aborted one's, or one the server no longer remembers, are left
        to the next claim; one of a partition no longer held under its epoch, to the owner."""
        for (partition, xid), epoch in list(self._unresolved.items()):
            if self.owned.get(partition) != epoch:
                status: str | None = "moot: the partition changed hands"
            else:
                status = await status_now(await self.ownership._connection(), xid)
                if status == "in progress":
                    continue
            entries: list[JournalEntry] = []
            if status == "committed":
                conn = await self.ownership._connection()
                entries = await claimed_by(conn, partition, epoch, xid)
            del self._unresolved[(partition, xid)]
            self.claimed += len(entries)
            out += entries
            self.log.info(
                "claim_outcome_resolved",
                node=self.node,
                partition=partition,
                xid=xid,
                outcome=status or "forgotten by the server",
                messages=len(entries),
            )

    def _answer_lost(self, partition: int, exc: BaseException) -> None:
        self.log.warning(
            "commit_answer_lost",
            node=self.node,
            partition=partition,
            error=self._said(exc),
            detail="the connection failed while committing a claim of the partition's journal "
            "rows and the claim turned out committed; the rows it claimed are delivered",
        )

    async def _carry(self, carrier: Carrier, entry: JournalEntry) -> bool:
        """A claimed message into its cell's mailbox (True), or, for a cell not here, a dead
        letter (False)."""
        code = carrier.refusal(entry.cell)
        if code is None:
            await carrier.deliver_claimed(Delivery(entry.cell, entry.message, entry.sender))
            return True
        fx = Effects()
        dead_letter_entry(
            fx,
            code,
            entry,
            "the journal held this message for a cell that is not in this node's tree or not "
            "active",
        )
        # UnitFenced: the partition moved meanwhile, and its new owner has the row.
        with contextlib.suppress(PersistenceError):
            await carrier.dead_letter_claimed(entry, fx)
        return False

    async def _drain(self, partition: int, now: float) -> None:
        """Release a partition being handed back once none of its messages is journalled
        under this node's epoch (nothing of it in a mailbox or a cell), or after
        :data:`DRAIN_MAX_LEASES` leases."""
        epoch = self.owned.get(partition)
        if epoch is None:
            self._draining_since.pop(partition, None)
            return
        conn = await self.ownership._connection()
        cur = await conn.execute(
            "SELECT count(*) FROM journal WHERE partition = %s AND epoch = %s", (partition, epoch)
        )
        row = await cur.fetchone()
        busy = int(row[0]) if row else 0
        overdue = now - self._draining_since[partition] > DRAIN_MAX_LEASES * (
            self.config.lease_ms / 1000
        )
        if busy and not overdue:
            return
        await self.ownership.release(partition, epoch)
        self._draining_since.pop(partition, None)
        self.log.info(
            "partition_handed_back",
            node=self.node,
            partition=partition,
            in_flight=busy,
            detail="drained for a node that joined"
            if not busy
            else "released with messages still in flight: the new owner runs them again",
        )

    async def _listen(self) -> None:
        """Wake the round when another node journals a message for a partition owned here."""
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self.dsn, autocommit=True, connect_timeout=5
                )
                async with conn:
                    await conn.execute(f"LISTEN {CLAIM_CHANNEL}")
                    async for note in conn.notifies():
                        with contextlib.suppress(ValueError):
                            partition = int(note.payload)
                            if partition in self.owned:
                                self._wanted.add(partition)
                                self._wake.set()
            except (psycopg.Error, OSError):
                await asyncio.sleep(self.config.lease_ms / 3000)
