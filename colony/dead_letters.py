"""Dead letters: messages the colony could not deliver, with a stable reason code.

The codes are API (operators filter on them; meclaw uses the same strings). Two are ours:
``cell_crashed`` (the message a crashing cell was handling, which meclaw loses silently) and
``message_timeout`` (a backstop expiry on a message nobody awaits).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from colony.envelope import Envelope


class DeadLetterCode(StrEnum):
    UNRESOLVED_PATH = "unresolved_path"
    """The target is no cell, hive or /colony endpoint, and nobody awaits a reply."""
    HIVE_NO_ROUTE = "hive_no_route"
    """A message reached a hive whose out-edges all declined it."""
    NO_ROUTE = "no_route"
    """A cell emission matched none of the cell's out-edges."""
    TTL_EXPIRED = "ttl_expired"
    """The message's routing budget ran out."""
    CELL_INACTIVE = "cell_inactive"
    """The target cell is inactive or failed."""
    COLONY_ENDPOINT_INVALID = "colony_endpoint_invalid"
    """Addressed to ``/colony`` itself."""
    COLONY_ENDPOINT_UNIMPLEMENTED = "colony_endpoint_unimplemented"
    """Addressed to a ``/colony/<x>`` that answers no messages."""
    INVALID_UBF_BODY = "invalid_ubf_body"
    """A cell emitted a body that is not UBF."""
    CONSUMES_VIOLATION = "consumes_violation"
    """A required ``contract.consumes`` key was missing and nobody awaits a reply."""
    CONTRACT_VIOLATION = "contract_violation"
    """An emission broke the cell's ``contract.emits`` and nobody awaits a reply."""
    CELL_CRASHED = "cell_crashed"
    """The cell raised while handling this message (the cell was restarted)."""
    MESSAGE_TIMEOUT = "message_timeout"
    """The cell's message backstop expired and nobody awaits a reply."""
    UNSTORABLE = "unstorable"
    """``colony.db`` could not store what handling this message wrote (one unit that fails
    alone, e.g. text SQLite cannot encode): the message is kept here instead."""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One undeliverable message and why."""

    error_code: str
    sender_path: str
    original_target: str
    resolved_target: str
    message: Envelope
    detail: str | None = None
    at_ms: int | None = None
    """When it died (epoch ms; None: when the writer stores it)."""

    @property
    def trace_id(self) -> str:
        return self.message.trace_id

    @property
    def created_at(self) -> int:
        """The dead message's own ``created_at`` (not the time it died), as in meclaw."""
        return self.message.created_at

    @property
    def message_id(self) -> str:
        return self.message.id
