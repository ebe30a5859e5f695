"""Where a colony trace sits in OpenTelemetry: its ids, computed from the message alone.

A colony trace is a tree of messages; its OpenTelemetry trace has one span per handling. The
ids are derived, not remembered, so anyone holding a message can name the span of its
handling without a live span object:

* the OTel trace id of colony trace ``T`` is ``T`` itself when it is a UUID in its canonical
  text (the colony's ids are UUIDv7: the 32 lowercase hex digits, dashes dropped) or 32
  lowercase hex digits, else 16 bytes of BLAKE2b of ``T`` (any other id a client chose);
* the span of the handling of message ``M`` has the id ``BLAKE2b-8(M.id)``, its LLM call
  ``BLAKE2b-8(M.id + "/llm")`` and its tool HTTP call ``BLAKE2b-8(M.id + "/http")``.

A trace that came in with a W3C ``traceparent`` (``POST /messages``) joins the caller's
trace: :func:`join` keeps, in this process, the caller's trace id and span id for the colony
trace (a bounded map, the least recently used link evicted first; a restart or another
cluster member carries on under the derived id). The first link of a colony trace holds for
all of it: a later ``traceparent`` for the same colony trace is ignored (the trace's spans
cannot move to another OTel trace midway), and only the handlings of the message posted with
the ``traceparent`` are children of the caller's span (:func:`claim`); another message
posted into the same colony trace later starts a root span in that same OTel trace.

A cell calling out (the llm cell's provider requests) asks :func:`outgoing_traceparent` for
the header to send: it reads the message being handled from a context variable the colony
sets as a handling begins, only while telemetry is on, and notes the call (its model and
provider), so the handling's LLM-call span is made even when the call failed and nothing
reports it (:func:`take_call`). Nothing here imports OpenTelemetry: cells import this module
whether or not the ``otel`` extra is installed.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from hashlib import blake2b
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from colony.envelope import Envelope

REMOTE_LIMIT = 10_000
"""Colony traces whose incoming ``traceparent`` is remembered (the least recently used go
first)."""
CALL_LIMIT = 10_000
"""Provider calls remembered between their request and their handling's end."""

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")


@dataclass(frozen=True, slots=True)
class Remote:
    """The caller's span a colony trace joined."""

    trace_id: int
    span_id: int
    sampled: bool


@dataclass(frozen=True, slots=True)
class Call:
    """A provider call a handling made: what its request asked for."""

    model: str | None
    provider: str | None


_CANONICAL = re.compile(
    r"^(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32})$"
)
_remote: OrderedDict[str, Remote] = OrderedDict()
_unclaimed: set[str] = set()
"""Colony traces joined whose request's hand-off has not made its deliveries yet
(:func:`claim`)."""
_calls: OrderedDict[str, Call] = OrderedDict()
"""message id → the provider call its handling made (sampled traces only)."""
_current: ContextVar[Envelope | None] = ContextVar("colony_telemetry_message", default=None)
Decide = Callable[[int, "Remote | None"], bool]
"""A sampler: ``(OTel trace id, the caller's span or None) -> recorded?``."""

_sampler: list[Decide] = []
"""The live tracings' samplers; empty:
telemetry is off in this process and every function here returns at once."""


def active() -> bool:
    return bool(_sampler)


def trace_id_of(colony_trace: str) -> int:
    """The OTel trace id of a colony trace (the caller's, when it joined one)."""
    remote = remote_of(colony_trace)
    if remote is not None:
        return remote.trace_id
    return derived_trace_id(colony_trace)


def derived_trace_id(colony_trace: str) -> int:
    """A canonical UUID's 128 bits (or 32 lowercase hex digits'); any other id hashed, so
    two ids never share an OTel trace by a lenient parse (``int`` would take ``_``, ``+``,
    upper case)."""
    if _CANONICAL.match(colony_trace):
        value = int(colony_trace.replace("-", ""), 16)
        if value:
            return value
    return int.from_bytes(blake2b(colony_trace.encode(), digest_size=16).digest()) or 1


def span_id_of(message_id: str, part: str = "") -> int:
    """The span id of the handling of ``message_id`` (``part``: ``/llm``, ``/http``)."""
    digest = blake2b((message_id + part).encode(), digest_size=8).digest()
    return int.from_bytes(digest) or 1


def remote_of(colony_trace: str) -> Remote | None:
    """The caller's span ``colony_trace`` joined (its use keeps the link from eviction)."""
    remote = _remote.get(colony_trace)
    if remote is not None:
        _remote.move_to_end(colony_trace)
    return remote


def parse_traceparent(value: str | None) -> Remote | None:
    """A W3C ``traceparent`` header's trace id, parent span id and sampled flag; None when
    absent or malformed (an invalid header is ignored, as the W3C rules ask)."""
    if not value:
        return None
    found = _TRACEPARENT.match(value.strip().lower())
    if found is None or found.group(1) == "ff":
        return None
    trace_id, span_id = int(found.group(2), 16), int(found.group(3), 16)
    if not trace_id or not span_id or (found.group(1) == "00" and found.group(5)):
        return None
    return Remote(trace_id, span_id, bool(int(found.group(4), 16) & 1))


def format_traceparent(trace_id: int, span_id: int, sampled: bool) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-{'01' if sampled else '00'}"


def join(colony_trace: str, traceparent: str | None) -> bool:
    """A message of colony trace ``colony_trace`` is about to be sent in with
    ``traceparent``: the trace's spans join the caller's trace, the handlings of that
    message's hand-off under the caller's span. A trace already linked keeps its link. True
    when this call made the link (the caller :func:`unjoin` s it if the message is not
    taken); no-op with telemetry off."""
    if not _sampler or not traceparent or colony_trace in _remote:
        return False
    remote = parse_traceparent(traceparent)
    if remote is None:
        return False
    while len(_remote) >= REMOTE_LIMIT:
        _unclaimed.discard(_remote.popitem(last=False)[0])
    _remote[colony_trace] = remote
    _unclaimed.add(colony_trace)
    return True


def unjoin(colony_trace: str) -> None:
    """Undo a :func:`join` whose message was refused or was a duplicate."""
    _remote.pop(colony_trace, None)
    _unclaimed.discard(colony_trace)


def claim(colony_trace: str) -> bool:
    """Whether this hand-off from outside is the joined request's (the first since
    :func:`join`): its deliveries' handlings are children of the caller's span; any later
    message sent into the trace starts a root span (in the same OTel trace)."""
    if colony_trace in _unclaimed:
        _unclaimed.discard(colony_trace)
        return True
    return False


def sampled(colony_trace: str, trace_id: int | None = None) -> bool:
    """Whether the colony trace is recorded (the first live tracing's sampler decides);
    ``trace_id``: its OTel trace id, when the caller has it already."""
    if not _sampler:
        return False
    if trace_id is None:
        trace_id = trace_id_of(colony_trace)
    return _sampler[0](trace_id, _remote.get(colony_trace))


def begin(message: Envelope) -> None:
    """A handling of ``message`` begins in this task (the colony's hook, telemetry on)."""
    _current.set(message)


def outgoing_traceparent(model: str | None = None, provider: str | None = None) -> str | None:
    """The ``traceparent`` for an outgoing provider request made while handling a message:
    the child of that handling's LLM-call span, which the span maker then makes whatever the
    handling's outcome (``model``, ``provider``: what the request asks, for that span). None
    with telemetry off or outside a handling."""
    if not _sampler:
        return None
    message = _current.get()
    if message is None:
        return None
    trace = message.trace_id
    trace_id = trace_id_of(trace)
    recorded = sampled(trace, trace_id)
    if recorded and message.id not in _calls:  # (a handling's first call names the span)
        while len(_calls) >= CALL_LIMIT:
            _calls.popitem(last=False)
        _calls[message.id] = Call(model, provider)
    return format_traceparent(trace_id, span_id_of(message.id, "/llm"), recorded)


def take_call(message_id: str) -> Call | None:
    """The provider call the handling of ``message_id`` made, forgotten as it is taken."""
    return _calls.pop(message_id, None) if _calls else None


def register(decide: Decide) -> None:
    """A tracing starts in this process (its sampler decides for every colony trace)."""
    _sampler.append(decide)


def unregister(decide: Decide) -> None:
    if decide in _sampler:
        _sampler.remove(decide)
    if not _sampler:
        _remote.clear()
        _unclaimed.clear()
        _calls.clear()
