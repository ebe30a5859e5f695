"""Putting committed deliveries into the cells' mailboxes.

A delivery made while a cell handles a message never waits: a full mailbox overflows (journal
ids under at-least-once delivery, memory under at-most-once; :mod:`colony.overflow`), so no
cycle of cells can deadlock on each other's mailboxes. Only a sender from outside the colony
under at-most-once delivery (an ingress, a long-running cell's I/O loop) waits for room: that
is backpressure on the outside world, and nobody in the colony waits on such a sender. The
wait graph records those waits for the watchdog.
"""

from __future__ import annotations

from collections.abc import Mapping

from colony.effects import Delivery
from colony.inflight import InFlightMessages
from colony.mailbox import HasMailbox, Mailbox
from colony.observability import Logger
from colony.watchdog import WaitGraph


class Post:
    """Delivers into the mailboxes of ``cells`` (the colony's runners, by path)."""

    def __init__(
        self,
        cells: Mapping[str, HasMailbox],
        in_flight: InFlightMessages,
        waits: WaitGraph,
        log: Logger,
        *,
        overflow_name: str,
    ) -> None:
        self._cells = cells
        self._in_flight = in_flight
        self._waits = waits
        self._log = log
        self._overflow_name = overflow_name

    async def deliver(self, delivery: Delivery, *, wait: bool = False) -> None:
        """Put ``delivery`` into its cell's mailbox; with ``wait``, wait for room first."""
        mailbox = self._cells[delivery.cell].mailbox
        self._in_flight.add()
        if not wait:
            # Said once per episode: when the overflow starts, not for every message in it.
            if mailbox.push(delivery.message) and mailbox.overflowing == 1:
                self._full(
                    delivery,
                    mailbox,
                    f"overflows: what does not fit waits in the {self._overflow_name}",
                )
            return
        if not mailbox.full():
            await mailbox.put(delivery.message)
            return
        self._full(delivery, mailbox, "this ingress waits until the cell takes a message")
        with self._waits.waiting(delivery.sender, delivery.cell):  # the watchdog sees who waits
            await mailbox.put(delivery.message)

    def _full(self, delivery: Delivery, mailbox: Mailbox, what: str) -> None:
        message = delivery.message
        self._log.warning(
            "mailbox_full",
            target=delivery.cell,
            sender=delivery.sender,
            trace_id=message.trace_id,
            message_id=message.id,
            mailbox_capacity=mailbox.capacity,
            reason="mailbox_full",
            detail=f"the target mailbox is full and {what} (raise cell.mailbox_size or "
            "colony.json mailbox_default_capacity if this is the usual load)",
        )
