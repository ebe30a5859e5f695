"""One check for a message entering the colony from outside, whichever door it comes through.

The HTTP API (``POST /messages``, a dead-letter replay), the stdio bridge and the test harness
hand the fields they were given to :func:`source_message_of`, which answers a ready source
message or raises :class:`IngressRefused` naming the one field it refuses. The rules are
meclaw's: a TTL is a whole number in ``1..2^32-1`` (its ``u32``, less the spent 0), absent
means ``colony.json message_default_ttl``; ``context`` and ``hop`` are objects, absent or null
means empty. Each door renders a refusal its own way: the API a 422 with the code as its token,
stdio an ``invalid_frame`` line carrying the detail, the harness lets it propagate.

Target and body stay with the doors: stdio always sends to ``/``, and the harness may send a
body that is no UBF on purpose (the colony dead-letters it, which is what such a test pins).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from colony.envelope import Envelope, JsonObject, source_message
from colony.errors import ColonyError

if TYPE_CHECKING:
    from colony.config.models import ColonyConfig

MIN_TTL = 1
MAX_TTL = 2**32 - 1
"""The largest TTL: meclaw stores it as a ``u32``."""


class IngressRefused(ColonyError):
    """One field of a message from outside is refused; nothing entered the colony."""

    code = "ingress_refused"

    def __init__(self, field: str, code: str, detail: str) -> None:
        super().__init__(detail)
        self.field = field  # door-neutral: ttl, context, hop, trace_id
        self.code = code  # meclaw's API token: invalid_ttl, invalid_headers, invalid_hop, ...
        self.detail = detail


def ttl_of(value: object, default: int, *, allow_spent: bool = False) -> int:
    """``value`` as a TTL: None is ``default``; a boolean, a non-integer or a number outside
    the range is refused. ``allow_spent`` admits 0, for a test door that pins what the
    router does with a spent message (no real door sends one)."""
    if value is None:
        return default
    lowest = 0 if allow_spent else MIN_TTL
    if isinstance(value, bool) or not isinstance(value, int) or not lowest <= value <= MAX_TTL:
        raise IngressRefused(
            "ttl", "invalid_ttl", f"ttl must be a whole number in {lowest}..{MAX_TTL}"
        )
    return value


def _object(value: object, field: str, code: str, detail: str) -> JsonObject:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise IngressRefused(field, code, detail)
    return dict(value)


def source_message_of(
    target: str,
    body: Any,
    config: ColonyConfig,
    *,
    ttl: object = None,
    context: object = None,
    hop: object = None,
    trace_id: object = None,
    context_defaults: Mapping[str, Any] | None = None,
    context_key: str = "context",
    allow_spent: bool = False,
) -> Envelope:
    """The source message the fields make, checked in the order meclaw's API checks them
    (context, hop, TTL). ``context_defaults`` are keys the door fills in unless the sender gave
    them (stdio's user, chat and turn ids); ``context_key`` is the name the door reads
    ``context`` under (the API calls it ``headers``), so a refusal names what the sender
    wrote."""
    becomes = "" if context_key == "context" else " (it becomes context)"
    checked_context = _object(
        context,
        "context",
        "invalid_headers",
        f"{context_key} must be an object{becomes} or null",
    )
    checked_hop = _object(hop, "hop", "invalid_hop", "hop must be an object or null")
    checked_ttl = ttl_of(ttl, config.message_default_ttl, allow_spent=allow_spent)
    if trace_id is not None and not isinstance(trace_id, str):
        raise IngressRefused("trace_id", "invalid_trace_id", "trace_id must be a string")
    if context_defaults:
        checked_context = {**context_defaults, **checked_context}
    return source_message(
        target,
        body,
        ttl=checked_ttl,
        context=checked_context,
        hop=checked_hop,
        trace_id=trace_id,
    )
