"""What routing decides, as a value: the :class:`Effects` of one hand-off.

:mod:`colony.routing` fills an :class:`Effects` and touches nothing else; :mod:`colony.journal`
commits it (message-log rows, dead letters, the deliveries as journal rows) and
:class:`colony.colony.Colony` then carries it out (mailbox puts, egress, log lines, counters).
Because the record is handed on by argument, where a row lands never depends on which task
happens to be running.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from colony.dead_letters import DeadLetter
from colony.envelope import Envelope
from colony.ids import now_ms


@dataclass(frozen=True, slots=True)
class LogRow:
    """One routing decision into a cell or hive (meclaw's ``message_log`` row)."""

    message: Envelope
    from_path: str
    to_path: str
    ttl: int
    at_ms: int = 0
    """When routing took the decision (epoch milliseconds)."""
    edges: tuple[str, ...] = ()
    """At a hive transit: the ids of the hive's out-edges that fired."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """A message for a cell's mailbox (a journal row under at-least-once delivery)."""

    cell: str
    message: Envelope
    sender: str


@dataclass(frozen=True, slots=True)
class Read:
    """A message routed to a ``/colony/*`` read that must be answered: reading is I/O, so
    routing leaves it to the colony, which routes the reply into the same hand-off."""

    endpoint: str
    message: Envelope


@dataclass(frozen=True, slots=True)
class Note:
    """One log line routing asks for (a dead letter, a skipped edge, a reply nobody gets)."""

    level: str
    """``debug``, ``info``, ``warning`` or ``error``."""
    event: str
    fields: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Handled:
    """How one cell's handling of one message went (a ``handling`` row): kept with the hand-off
    it caused, so the trace can show each step's duration, outcome and, for an LLM call, its
    model, latency and tokens."""

    message_id: str
    trace_id: str
    cell: str
    cell_type: str
    started_ms: int
    duration_ms: int
    outcome: str
    """``ok``, ``error`` (the cell answered with an error), ``crashed``, ``timed_out`` or
    ``refused``."""
    error: str | None = None
    model: str | None = None
    llm_latency_ms: int | None = None
    tokens_prompt: int | None = None
    tokens_completion: int | None = None


class Effects:
    """Everything one hand-off causes, in the order routing decided it."""

    __slots__ = (
        "at_ms",
        "decisions",
        "deliveries",
        "egress",
        "handled",
        "letters",
        "logs",
        "notes",
        "reads",
    )

    def __init__(self) -> None:
        self.at_ms = now_ms()
        """When routing took this hand-off's decisions (epoch milliseconds)."""
        self.handled: Handled | None = None
        """The handling that caused this hand-off (set by the colony, not by routing)."""
        self.deliveries: list[Delivery] = []
        self.egress: list[Envelope] = []
        """Messages leaving the colony at the root hive (direct mode)."""
        self.logs: list[LogRow] = []
        self.letters: list[DeadLetter] = []
        self.notes: list[Note] = []
        self.reads: list[Read] = []
        self.decisions = 0
        """Routing decisions taken (each cost a message one TTL unit)."""

    def __bool__(self) -> bool:
        """Whether there is anything to write (deliveries, rows or dead letters)."""
        return bool(self.deliveries or self.logs or self.letters or self.handled)

    def extend(self, other: Effects) -> None:
        """Append ``other`` (what routing a read's reply caused) to this hand-off."""
        self.deliveries += other.deliveries
        self.egress += other.egress
        self.logs += other.logs
        self.letters += other.letters
        self.notes += other.notes
        self.reads += other.reads
        self.decisions += other.decisions
