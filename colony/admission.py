"""Whether the colony takes in a new message right now (ingress admission).

Every ingress (``POST /messages``, ``POST /llm/chat``, the stdio bridge, channel cells) asks
:meth:`colony.colony.Colony.admission` before it accepts a message, and answers the refusal
instead of accepting what it could not keep: a full disk, or more bytes queued than the
colony's memory bound allows. A 202 therefore always means committed.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why an ingress is refused now, and when to try again."""

    status: int
    """The HTTP status an HTTP ingress answers: 429 (over a load bound) or 503 (storage
    unavailable, e.g. the disk is full)."""
    token: str
    """The error token of the answer body (``overloaded``, ``storage_unavailable``)."""
    detail: str
    """What is wrong, for the caller and the log line."""
    retry_after_s: int
    """Seconds a client should wait before retrying (the ``Retry-After`` header)."""
