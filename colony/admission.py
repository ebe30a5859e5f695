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


STORAGE_RETRY_AFTER_S = 5
"""``Retry-After`` while ``colony.db`` cannot be written: the writer retries every 2 s at most."""

OVERLOAD_RETRY_AFTER_S = 1
"""``Retry-After`` while the colony holds too many bytes: cells drain in well under that."""


def admit(unavailable: str | None, queued: int, bound: int, nbytes: int) -> Refusal | None:
    """The admission decision, pure: ``unavailable`` is why ``colony.db`` cannot be written
    (or None), ``queued`` the bytes the mailboxes hold, ``bound`` ``queued_max_bytes`` (0: no
    bound), ``nbytes`` the size of what asks to come in. A colony holding nothing admits
    anything, so a single message larger than the bound is not refused for ever."""
    if unavailable is not None:
        return Refusal(503, "storage_unavailable", unavailable, STORAGE_RETRY_AFTER_S)
    if bound and queued and queued + nbytes > bound:
        return Refusal(
            429,
            "overloaded",
            f"the colony holds {queued} bytes of queued messages and takes no more past "
            f"{bound} (colony.json queued_max_bytes); retry once the cells catch up",
            OVERLOAD_RETRY_AFTER_S,
        )
    return None
