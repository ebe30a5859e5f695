"""The spans of a colony trace, made after the fact from each committed hand-off.

:class:`SpanMaker` is a tap (:attr:`colony.events.Events.taps`): it gets every hand-off's
:class:`colony.effects.Effects` once it was carried out, and turns the handling that caused
it into finished spans (the SDK's ``ReadableSpan``, with the start and end times the record
holds) for the span processor, so neither the router nor the runner does anything for
telemetry, and no live span is ever opened: the SDK's tracer would cost three times as much
per span, for bookkeeping (sampling, limits, locks) the colony does once per trace. One
hand-off makes:

* the handling span (``handle <cell path>``, INTERNAL): cell path and type, message id,
  TTL, outcome (an ``error``, ``crashed``, ``timed_out`` or ``refused`` outcome sets the
  span's status to ERROR with the error's text);
* for an LLM call, a ``chat <request model>`` CLIENT child following the OpenTelemetry GenAI
  conventions: whenever the handling sent a provider request (the transport noted it when it
  asked for the ``traceparent``: :func:`colony.telemetry.context.take_call`), so the span a
  provider was told about exists even when the call failed, timed out or crashed; else when
  the emission's hop has a ``model`` and token counts. The requested model comes from the
  request (or ``meta.request_model``), the answering one from ``meta.model`` / hop ``model``;
* for a web tool cell (``web_fetch``, ``web_search``), a ``GET`` CLIENT child for its HTTP
  call, from the ``http_status``, ``duration_ms`` and URL the cell's hop reports.

Parentage: the handling of message M is a child of the handling whose hand-off routed M
(remembered here from that hand-off's deliveries, which hive transits do not break) until M is
handled; a message the colony was sent from outside has no parent, or the caller's span when
it came with a ``traceparent`` (only the message that brought it: another message sent into
the same trace later starts a root span). A message redelivered after a restart starts a
root span of its own, in the same trace. Span ids are derived
(:mod:`colony.telemetry.context`), so the ids here match the ``traceparent`` a cell sent
while the handling ran.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from colony.effects import Effects, Handled
from colony.envelope import Envelope
from colony.telemetry import context as ids

ROUTED_LIMIT = 100_000
"""Messages remembered between the hand-off that routed them and their handling (the oldest
go first: a message never handled, egress or a dead letter, must not stay forever)."""

TOOL_CELLS = frozenset({"web_fetch", "web_search"})
"""Cell types whose handling is one outgoing HTTP call (a ``GET``)."""

_MS = 1_000_000
_ROOT = 0
"""A routed message whose handling has no colony parent (it came from outside)."""
_CALLER = -2
"""A routed message of the request that joined a caller's trace: its parent is the caller's
span."""
_UNKNOWN = (_ROOT, -1)
"""Where a message nobody remembers routing sits (redelivered after a restart): a root."""
_FAILED = frozenset({"error", "crashed", "timed_out", "refused"})
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_UNSET = Status(StatusCode.UNSET)
PROVIDERS = {
    "openai": ("openai", "openai"),
    "openai-responses": ("openai", "openai"),
    "anthropic": ("anthropic", "anthropic"),
    "gemini": ("gcp.gemini", "gemini"),
}
"""The llm cell's provider → (``gen_ai.provider.name``, the older ``gen_ai.system``), the
GenAI conventions' well-known values; a provider they do not name (``ollama``) is itself."""


class SpanMaker:
    """Turns committed hand-offs into spans (a tap; see the module docstring)."""

    def __init__(
        self, processor: SpanProcessor, resource: Resource, scope: InstrumentationScope
    ) -> None:
        self._processor = processor
        self._resource = resource
        self._scope = scope
        self._routed: OrderedDict[str, tuple[int, int]] = OrderedDict()
        """message id → (span id of the handling that routed it, or _ROOT; its TTL)."""

    def flush(self) -> None:
        """Export what the processor holds now (blocking: call it off the loop; the
        benchmark's way to count the export thread's work)."""
        self._processor.force_flush()

    def __call__(self, fx: Effects) -> None:
        handled = fx.handled
        routed = self._routed
        call = None
        if handled is not None:
            trace = handled.trace_id
            above = routed.pop(handled.message_id, _UNKNOWN)
            call = ids.take_call(handled.message_id)
            by = ids.span_id_of(handled.message_id)
        elif fx.deliveries:  # an ingress, or a long-running cell's own emission
            trace = fx.deliveries[0].message.trace_id
            by = _CALLER if ids.claim(trace) else _ROOT
        else:
            return
        trace_id = ids.trace_id_of(trace)
        if not ids.sampled(trace, trace_id):
            return  # a trace not recorded: nothing remembered, nothing made
        for delivery in fx.deliveries:  # into a cell's mailbox: a handling to come
            message = delivery.message
            routed[message.id] = (by, message.ttl)
        while len(routed) > ROUTED_LIMIT:
            routed.popitem(last=False)
        if handled is not None:
            self._handling(handled, trace_id, by, above, _emitted(fx), call)

    def _handling(
        self,
        h: Handled,
        trace_id: int,
        span_id: int,
        above: tuple[int, int],
        logs: list[Envelope],
        call: ids.Call | None,
    ) -> None:
        parent, ttl = above
        caller = False
        if parent == _CALLER:
            remote = ids.remote_of(h.trace_id)
            parent, caller = (_ROOT, False) if remote is None else (remote.span_id, True)
        start = h.started_ms * _MS
        end = start + h.duration_ms * _MS
        attributes: dict[str, Any] = {
            "colony.cell.path": h.cell,
            "colony.cell.type": h.cell_type,
            "colony.message.id": h.message_id,
            "colony.trace.id": h.trace_id,
            "colony.outcome": h.outcome,
        }
        if ttl >= 0:
            attributes["colony.message.ttl"] = ttl
        status = _UNSET
        if h.outcome in _FAILED:
            status = Status(StatusCode.ERROR, h.error or h.outcome)
            attributes["error.type"] = h.outcome
        self._emit(
            f"handle {h.cell}",
            trace_id,
            span_id,
            parent,
            SpanKind.INTERNAL,
            attributes,
            start,
            end,
            status,
            caller,
        )
        if call is not None or h.model is not None:
            self._llm(h, trace_id, span_id, end, logs, call)
        elif h.cell_type in TOOL_CELLS:
            self._tool(h, trace_id, span_id, start, logs)

    def _llm(
        self,
        h: Handled,
        trace_id: int,
        parent: int,
        end: int,
        logs: list[Envelope],
        call: ids.Call | None,
    ) -> None:
        hop, meta = _report(logs, h.model)
        asked = call.model if call is not None else None
        asked = asked or _text(meta.get("request_model")) or h.model or _text(meta.get("model"))
        attributes: dict[str, Any] = {"gen_ai.operation.name": "chat"}
        if asked is not None:
            attributes["gen_ai.request.model"] = asked
        answered = _text(meta.get("model")) or h.model
        if answered is not None:
            attributes["gen_ai.response.model"] = answered
        provider = _text(meta.get("provider")) or (call.provider if call is not None else None)
        if provider is not None:
            name, system = PROVIDERS.get(provider, (provider, provider))
            attributes["gen_ai.provider.name"] = name
            attributes["gen_ai.system"] = system  # the older name, for older backends
        if isinstance(meta.get("response_id"), str):
            attributes["gen_ai.response.id"] = meta["response_id"]
        if h.tokens_prompt is not None:
            attributes["gen_ai.usage.input_tokens"] = h.tokens_prompt
        if h.tokens_completion is not None:
            attributes["gen_ai.usage.output_tokens"] = h.tokens_completion
        reason = hop.get("finish_reason")
        if isinstance(reason, str):
            attributes["gen_ai.response.finish_reasons"] = (reason,)
        status = _UNSET
        if h.outcome in _FAILED:
            status = Status(StatusCode.ERROR, h.error or h.outcome)
            attributes["error.type"] = _text(hop.get("error_code")) or h.outcome
        latency = h.llm_latency_ms if h.llm_latency_ms is not None else h.duration_ms
        self._emit(
            "chat" if asked is None else f"chat {asked}",
            trace_id,
            ids.span_id_of(h.message_id, "/llm"),
            parent,
            SpanKind.CLIENT,
            attributes,
            end - min(latency, h.duration_ms) * _MS,
            end,
            status,
        )

    def _tool(
        self, h: Handled, trace_id: int, parent: int, start: int, logs: list[Envelope]
    ) -> None:
        hop = next((m.hop for m in logs if isinstance(m.hop.get("operation"), str)), None)
        if hop is None:
            return
        attributes: dict[str, Any] = {
            "http.request.method": "GET",
            "colony.tool.operation": hop["operation"],
        }
        code = hop.get("http_status")
        if isinstance(code, int):
            attributes["http.response.status_code"] = code
        _url(attributes, hop.get("url") or hop.get("final_url"))
        status = _UNSET
        if hop.get("finish_reason") == "error" or (isinstance(code, int) and code >= 400):
            error = hop.get("error_code")
            attributes["error.type"] = error if isinstance(error, str) else str(code)
            status = Status(StatusCode.ERROR)
        duration = hop.get("duration_ms")
        took = duration if isinstance(duration, int) else h.duration_ms
        self._emit(
            "GET",
            trace_id,
            ids.span_id_of(h.message_id, "/http"),
            parent,
            SpanKind.CLIENT,
            attributes,
            start,
            start + took * _MS,
            status,
        )

    def _emit(
        self,
        name: str,
        trace_id: int,
        span_id: int,
        parent: int,
        kind: SpanKind,
        attributes: dict[str, Any],
        start: int,
        end: int,
        status: Status,
        caller: bool = False,
    ) -> None:
        """Hand one finished span to the processor (``caller``: its parent is the span of
        the request that started the trace, a remote one)."""
        span = ReadableSpan(
            name,
            SpanContext(trace_id, span_id, False, _SAMPLED),
            None if parent == _ROOT else SpanContext(trace_id, parent, caller, _SAMPLED),
            self._resource,
            attributes,
            kind=kind,
            status=status,
            start_time=start,
            end_time=end,
            instrumentation_scope=self._scope,
        )
        self._processor.on_end(span)


def _report(logs: list[Envelope], model: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The hop and ``meta`` of the emission that reports an LLM call: the one naming the
    model the record took, else the first with a ``finish_reason`` (an error's)."""
    found: Envelope | None = None
    for message in logs:
        hop = message.hop
        if model is not None and hop.get("model") == model:
            found = message
            break
        if found is None and "finish_reason" in hop:
            found = message
    if found is None:
        return {}, {}
    body = found.body
    meta = body.get("meta") if isinstance(body, dict) else None
    return found.hop, meta if isinstance(meta, dict) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _url(attributes: dict[str, Any], value: Any) -> None:
    """``url.full`` (without user and password) and ``server.address`` of a URL a tool
    cell's hop reports; nothing for anything else."""
    if not isinstance(value, str):
        return
    try:
        parts = urlsplit(value)
        host = parts.hostname
        port = parts.port
    except ValueError:
        return
    if not host or parts.scheme not in ("http", "https"):
        return
    netloc = host if ":" not in host else f"[{host}]"
    if port is not None:
        netloc = f"{netloc}:{port}"
    attributes["url.full"] = parts._replace(netloc=netloc).geturl()
    attributes["server.address"] = host
    if port is not None:
        attributes["server.port"] = port


def _emitted(fx: Effects) -> list[Envelope]:
    """The messages a handling's hand-off routed, to read its emission's hop: the message-log
    rows, or the deliveries in a colony that keeps no message log."""
    if fx.logs:
        return [row.message for row in fx.logs]
    return [delivery.message for delivery in fx.deliveries]
