"""How claimed journal rows enter this node's colony: the :class:`~colony.cluster.member.Carrier`
a member delivers through."""

from __future__ import annotations

from colony.colony import Colony
from colony.dead_letters import DeadLetterCode
from colony.effects import Delivery, Effects
from colony.journal import Ack
from colony.persist.journal import JournalEntry


class ColonyCarrier:
    """Claimed messages into the colony's mailboxes (never waiting: a full one overflows)."""

    def __init__(self, colony: Colony) -> None:
        self.colony = colony

    def refusal(self, cell: str) -> DeadLetterCode | None:
        runner = self.colony.runners.get(cell)
        if runner is None:
            return DeadLetterCode.UNRESOLVED_PATH
        return None if runner.active else DeadLetterCode.CELL_INACTIVE

    async def deliver_claimed(self, delivery: Delivery) -> None:
        await self.colony.post.deliver(delivery)

    async def dead_letter_claimed(self, entry: JournalEntry, fx: Effects) -> None:
        """The row leaves the journal as the dead letter enters: one unit."""
        await self.colony.journal.commit(
            fx, ack=Ack(entry.message.id, entry.cell), message=entry.message
        )
