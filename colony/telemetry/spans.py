"""The spans of a colony trace, made after the fact from each committed hand-off.

:class:`SpanMaker` is a tap (:attr:`colony.events.Events.taps`): it gets every hand-off's
:class:`colony.effects.Effects` once it was carried out, and turns the handling that caused
it into spans with the explicit start and end times the record holds, so neither the router
nor the runner does anything for telemetry. One hand-off makes:

* the handling span (``handle <cell path>``, INTERNAL): cell path and type, message id,
  TTL, outcome (an ``error``, ``crashed``, ``timed_out`` or ``refused`` outcome sets the
  span's status to ERROR with the error's text);
* for an LLM call (the emission's hop has a ``model`` and token counts), a ``chat <model>``
  CLIENT child following the OpenTelemetry GenAI conventions;
* for a web tool cell (``web_fetch``, ``web_search``), a ``GET`` CLIENT child for its HTTP
  call, from the ``http_status`` and ``duration_ms`` the cell's hop reports.

Parentage: the handling of message M is a child of the handling whose hand-off routed M
(remembered here from that hand-off's message-log rows, across hive transits); a message the
colony was sent from outside has no parent, or the caller's span when it came with a
``traceparent``. Span ids are derived (:mod:`colony.telemetry.context`), so the ids here
match the ``traceparent`` a cell sent while the handling ran.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import Tracer
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode

from colony.effects import Effects, Handled, LogRow
from colony.telemetry import context as ids

ROUTED_LIMIT = 100_000
"""Messages remembered between the hand-off that routed them and their handling (the oldest
go first: a message never handled, egress or a dead letter, must not stay forever)."""

TOOL_CELLS = frozenset({"web_fetch", "web_search"})
"""Cell types whose handling is one outgoing HTTP call (a ``GET``)."""

_MS = 1_000_000
_ROOT = 0
"""A routed message whose handling has no colony parent (it came from outside)."""
_FAILED = frozenset({"error", "crashed", "timed_out", "refused"})


class FixedIds(IdGenerator):
    """Hands the SDK the span (and root trace) id the colony derived for the next span."""

    def __init__(self) -> None:
        self.span_id = 0
        self.trace_id = 0
        self._random = RandomIdGenerator()

    def generate_span_id(self) -> int:
        span_id, self.span_id = self.span_id, 0
        return span_id or self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        trace_id, self.trace_id = self.trace_id, 0
        return trace_id or self._random.generate_trace_id()


class SpanMaker:
    """Turns committed hand-offs into spans (a tap; see the module docstring)."""

    def __init__(self, tracer: Tracer, fixed: FixedIds) -> None:
        self._tracer = tracer
        self._fixed = fixed
        self._routed: dict[str, tuple[int, int]] = {}
        """message id → (span id of the handling that routed it, or _ROOT; its TTL)."""

    def __call__(self, fx: Effects) -> None:
        handled = fx.handled
        parent = _ROOT if handled is None else ids.span_id_of(handled.message_id)
        routed = self._routed
        for row in fx.logs:
            routed[row.message.id] = (parent, row.ttl)
        while len(routed) > ROUTED_LIMIT:
            del routed[next(iter(routed))]
        if handled is not None and ids.sampled(handled.trace_id):
            self._handling(handled, fx.logs)

    def _handling(self, h: Handled, logs: list[LogRow]) -> None:
        trace_id = ids.trace_id_of(h.trace_id)
        span_id = ids.span_id_of(h.message_id)
        parent, ttl = self._routed.pop(h.message_id, (_ROOT, -1))
        if parent == _ROOT:
            remote = ids.remote_of(h.trace_id)
            parent = remote.span_id if remote is not None else _ROOT
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
        span = self._start(
            f"handle {h.cell}", trace_id, span_id, parent, SpanKind.INTERNAL, attributes, start
        )
        if h.outcome in _FAILED:
            span.set_status(Status(StatusCode.ERROR, h.error or h.outcome))
            span.set_attribute("error.type", h.outcome)
        span.end(end_time=end)
        if h.model is not None:
            self._llm(h, trace_id, span_id, end, logs)
        elif h.cell_type in TOOL_CELLS:
            self._tool(h, trace_id, span_id, start, logs)

    def _llm(self, h: Handled, trace_id: int, parent: int, end: int, logs: list[LogRow]) -> None:
        hop: dict[str, Any] = {}
        meta: dict[str, Any] = {}
        for row in logs:
            message = row.message
            if message.hop.get("model") == h.model:
                hop = message.hop
                body = message.body
                found = body.get("meta") if isinstance(body, dict) else None
                meta = found if isinstance(found, dict) else {}
                break
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": h.model,
            "gen_ai.response.model": meta.get("model") or h.model,
        }
        provider = meta.get("provider")
        if isinstance(provider, str):
            attributes["gen_ai.provider.name"] = provider
            attributes["gen_ai.system"] = provider  # the older name, for older backends
        if isinstance(meta.get("response_id"), str):
            attributes["gen_ai.response.id"] = meta["response_id"]
        if h.tokens_prompt is not None:
            attributes["gen_ai.usage.input_tokens"] = h.tokens_prompt
        if h.tokens_completion is not None:
            attributes["gen_ai.usage.output_tokens"] = h.tokens_completion
        reason = hop.get("finish_reason")
        if isinstance(reason, str):
            attributes["gen_ai.response.finish_reasons"] = (reason,)
        latency = h.llm_latency_ms if h.llm_latency_ms is not None else h.duration_ms
        span = self._start(
            f"chat {h.model}",
            trace_id,
            ids.span_id_of(h.message_id, "/llm"),
            parent,
            SpanKind.CLIENT,
            attributes,
            end - min(latency, h.duration_ms) * _MS,
        )
        if h.outcome == "error":
            span.set_status(Status(StatusCode.ERROR, h.error or "error"))
        span.end(end_time=end)

    def _tool(self, h: Handled, trace_id: int, parent: int, start: int, logs: list[LogRow]) -> None:
        hop = next(
            (r.message.hop for r in logs if isinstance(r.message.hop.get("operation"), str)), None
        )
        if hop is None:
            return
        attributes: dict[str, Any] = {
            "http.request.method": "GET",
            "colony.tool.operation": hop["operation"],
        }
        status = hop.get("http_status")
        if isinstance(status, int):
            attributes["http.response.status_code"] = status
        duration = hop.get("duration_ms")
        took = duration if isinstance(duration, int) else h.duration_ms
        span = self._start(
            "GET",
            trace_id,
            ids.span_id_of(h.message_id, "/http"),
            parent,
            SpanKind.CLIENT,
            attributes,
            start,
        )
        failed = hop.get("finish_reason") == "error" or (isinstance(status, int) and status >= 400)
        if failed:
            code = hop.get("error_code")
            span.set_attribute("error.type", code if isinstance(code, str) else str(status))
            span.set_status(Status(StatusCode.ERROR))
        span.end(end_time=start + took * _MS)

    def _start(
        self,
        name: str,
        trace_id: int,
        span_id: int,
        parent: int,
        kind: SpanKind,
        attributes: dict[str, Any],
        start: int,
    ) -> trace.Span:
        fixed = self._fixed
        fixed.span_id = span_id
        if parent == _ROOT:
            fixed.trace_id = trace_id
            context = Context()  # a root: never under whatever span happens to be current
        else:
            above = SpanContext(trace_id, parent, is_remote=True, trace_flags=_SAMPLED)
            context = trace.set_span_in_context(NonRecordingSpan(above))
        return self._tracer.start_span(
            name, context=context, kind=kind, attributes=attributes, start_time=start
        )


_SAMPLED = trace.TraceFlags(trace.TraceFlags.SAMPLED)
