"""Where a colony trace sits in OpenTelemetry: its ids, computed from the message alone.

A colony trace is a tree of messages; its OpenTelemetry trace has one span per handling. The
ids are derived, not remembered, so anyone holding a message can name the span of its
handling without a live span object:

* the OTel trace id of colony trace ``T`` is ``T`` itself when it is a UUID (the colony's
  ids are UUIDv7: the 32 hex digits, dashes dropped), else 16 bytes of BLAKE2b of ``T``;
* the span of the handling of message ``M`` has the id ``BLAKE2b-8(M.id)``, its LLM call
  ``BLAKE2b-8(M.id + "/llm")`` and its tool HTTP call ``BLAKE2b-8(M.id + "/http")``.

A trace that came in with a W3C ``traceparent`` (``POST /messages``) joins the caller's
trace: :func:`join` keeps, in this process, the caller's trace id and span id for the colony
trace (a bounded map; a restart or another cluster member carries on under the derived id).

A cell calling out (the llm cell's provider requests) asks :func:`outgoing_traceparent` for
the header to send: it reads the message being handled from a context variable the colony
sets as a handling begins, only while telemetry is on. Nothing here imports OpenTelemetry:
cells import this module whether or not the ``otel`` extra is installed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from hashlib import blake2b
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from colony.envelope import Envelope

REMOTE_LIMIT = 10_000
"""Colony traces whose incoming ``traceparent`` is remembered (the oldest go first)."""

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")


@dataclass(frozen=True, slots=True)
class Remote:
    """The caller's span a colony trace joined."""

    trace_id: int
    span_id: int
    sampled: bool


_remote: dict[str, Remote] = {}
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
    remote = _remote.get(colony_trace)
    if remote is not None:
        return remote.trace_id
    return derived_trace_id(colony_trace)


def derived_trace_id(colony_trace: str) -> int:
    if len(colony_trace) == 36:  # a UUID's text: its 128 bits (parsed without uuid.UUID)
        digits = colony_trace.replace("-", "")
        if len(digits) == 32:
            try:
                value = int(digits, 16)
            except ValueError:
                value = 0
            if 0 < value < 2**128:
                return value
    return int.from_bytes(blake2b(colony_trace.encode(), digest_size=16).digest()) or 1


def span_id_of(message_id: str, part: str = "") -> int:
    """The span id of the handling of ``message_id`` (``part``: ``/llm``, ``/http``)."""
    digest = blake2b((message_id + part).encode(), digest_size=8).digest()
    return int.from_bytes(digest) or 1


def remote_of(colony_trace: str) -> Remote | None:
    return _remote.get(colony_trace)


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


def join(colony_trace: str, traceparent: str | None) -> None:
    """The colony trace ``colony_trace`` was started by a request carrying ``traceparent``:
    its spans join the caller's trace, under the caller's span (no-op with telemetry off)."""
    if not _sampler or not traceparent:
        return
    remote = parse_traceparent(traceparent)
    if remote is None:
        return
    if len(_remote) >= REMOTE_LIMIT:
        del _remote[next(iter(_remote))]
    _remote[colony_trace] = remote


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


def outgoing_traceparent() -> str | None:
    """The ``traceparent`` for an outgoing provider request made while handling a message:
    the child of that handling's LLM-call span. None with telemetry off or outside a
    handling."""
    if not _sampler:
        return None
    message = _current.get()
    if message is None:
        return None
    trace = message.trace_id
    return format_traceparent(trace_id_of(trace), span_id_of(message.id, "/llm"), sampled(trace))


def register(decide: Decide) -> None:
    """A tracing starts in this process (its sampler decides for every colony trace)."""
    _sampler.append(decide)


def unregister(decide: Decide) -> None:
    if decide in _sampler:
        _sampler.remove(decide)
    if not _sampler:
        _remote.clear()
