"""The span maker on hand-offs built by hand: what it remembers between a message's routing and
its handling, and what an error looks like."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import StatusCode

from colony.effects import Delivery, Effects, Handled
from colony.envelope import Envelope, follow_up, source_message
from colony.telemetry import context, spans
from colony.telemetry.spans import SpanMaker


@pytest.fixture
def made() -> Iterator[tuple[SpanMaker, InMemorySpanExporter, list[bool]]]:
    """A span maker writing to memory; the list's one flag is what the sampler answers."""
    exporter = InMemorySpanExporter()
    answer = [True]

    def decide(trace_id: int, remote: context.Remote | None) -> bool:
        return answer[0]

    context.register(decide)
    try:
        maker = SpanMaker(
            SimpleSpanProcessor(exporter), Resource.create({}), InstrumentationScope("test")
        )
        yield maker, exporter, answer
    finally:
        context.unregister(decide)


def _ingress(message: Envelope) -> Effects:
    fx = Effects()
    fx.deliveries.append(Delivery("/a", message, "@external"))
    return fx


def _handled(message: Envelope, outcome: str = "ok", error: str | None = None) -> Effects:
    fx = Effects()
    fx.handled = Handled(message.id, message.trace_id, "/a", "code", 1000, 5, outcome, error)
    return fx


def test_a_trace_not_sampled_leaves_nothing_behind(made) -> None:
    maker, exporter, answer = made
    answer[0] = False
    message = source_message("/a", {})
    maker(_ingress(message))
    maker(_handled(message))
    assert exporter.get_finished_spans() == ()
    assert len(maker._routed) == 0


def test_messages_routed_and_never_handled_are_forgotten_oldest_first(
    made, monkeypatch: pytest.MonkeyPatch
) -> None:
    maker, _, _ = made
    monkeypatch.setattr(spans, "ROUTED_LIMIT", 3)
    sent = [source_message("/a", {}) for _ in range(5)]
    for message in sent:
        maker(_ingress(message))
    assert list(maker._routed) == [m.id for m in sent[2:]]


def test_a_crashed_handling_is_an_error_span_with_its_text_and_a_child_keeps_its_parent(
    made,
) -> None:
    maker, exporter, _ = made
    first = source_message("/a", {})
    maker(_ingress(first))
    fx = _handled(first, "crashed", "ValueError: boom")
    second = follow_up(first, target="/b", context={}, hop={}, body={}, reply_to=None, ttl=9)
    fx.deliveries.append(Delivery("/b", second, "/a"))
    maker(fx)
    maker(_handled(second))
    crashed, child = exporter.get_finished_spans()
    assert crashed.status.status_code == StatusCode.ERROR
    assert crashed.status.description == "ValueError: boom"
    assert dict(crashed.attributes or {})["error.type"] == "crashed"
    assert crashed.parent is None
    assert child.parent is not None
    assert child.parent.span_id == crashed.context.span_id
    assert dict(child.attributes or {})["colony.message.ttl"] == 9


def _llm_handled(message: Envelope, outcome: str, logs: list[Envelope] | None = None) -> Effects:
    fx = Effects()
    fx.handled = Handled(message.id, message.trace_id, "/llm", "llm", 1000, 50, outcome, "boom")
    for emitted in logs or []:
        fx.deliveries.append(Delivery("/next", emitted, "/llm"))
    return fx


def _provider_call(message: Envelope, model: str, provider: str) -> str | None:
    """What the llm cell's transport does while handling ``message``: ask for the header."""
    context.begin(message)
    return context.outgoing_traceparent(model, provider)


@pytest.mark.parametrize("outcome", ["timed_out", "crashed"])
def test_a_handling_that_ended_mid_call_still_makes_the_chat_span_its_request_named(
    made, outcome: str
) -> None:
    maker, exporter, _ = made
    message = source_message("/llm", {})
    maker(_ingress(message))
    sent = _provider_call(message, "asked-model", "anthropic")
    assert sent is not None
    maker(_llm_handled(message, outcome))
    handle, chat = exporter.get_finished_spans()
    assert f"{chat.context.span_id:016x}" == sent.split("-")[2]
    assert chat.parent is not None
    assert chat.parent.span_id == handle.context.span_id
    assert chat.name == "chat asked-model"
    attributes = dict(chat.attributes or {})
    assert attributes["gen_ai.request.model"] == "asked-model"
    assert attributes["gen_ai.provider.name"] == "anthropic"
    assert attributes["error.type"] == outcome
    assert chat.status.status_code == StatusCode.ERROR


def test_a_reply_without_token_counts_still_makes_a_chat_span_with_both_models(made) -> None:
    maker, exporter, _ = made
    message = source_message("/llm", {})
    maker(_ingress(message))
    _provider_call(message, "gemini-pro-latest", "gemini")
    reply = follow_up(
        message,
        target="/next",
        context={},
        hop={"finish_reason": "stop", "model": "gemini-pro-002"},
        body={"messages": [], "meta": {"provider": "gemini", "model": "gemini-pro-002"}},
        reply_to=None,
        ttl=9,
    )
    maker(_llm_handled(message, "ok", [reply]))
    chat = next(s for s in exporter.get_finished_spans() if s.name.startswith("chat"))
    attributes = dict(chat.attributes or {})
    assert chat.name == "chat gemini-pro-latest"
    assert attributes["gen_ai.request.model"] == "gemini-pro-latest"
    assert attributes["gen_ai.response.model"] == "gemini-pro-002"
    assert attributes["gen_ai.provider.name"] == "gcp.gemini"  # the conventions' name
    assert attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert chat.status.status_code == StatusCode.UNSET


@pytest.mark.parametrize(
    ("provider", "named"),
    [("openai-responses", "openai"), ("anthropic", "anthropic"), ("ollama", "ollama")],
)
def test_the_provider_name_is_the_genai_conventions_well_known_value(
    made, provider: str, named: str
) -> None:
    maker, exporter, _ = made
    message = source_message("/llm", {})
    maker(_ingress(message))
    _provider_call(message, "m", provider)
    maker(_llm_handled(message, "ok"))
    chat = next(s for s in exporter.get_finished_spans() if s.name.startswith("chat"))
    assert dict(chat.attributes or {})["gen_ai.provider.name"] == named


def test_a_tool_span_names_the_url_its_cell_reports_without_credentials(made) -> None:
    maker, exporter, _ = made
    message = source_message("/fetch", {})
    maker(_ingress(message))
    result = follow_up(
        message,
        target="/next",
        context={},
        hop={
            "operation": "web_fetch",
            "http_status": 200,
            "duration_ms": 3,
            "final_url": "https://user:pw@example.org:8443/a?b=c",
        },
        body={},
        reply_to=None,
        ttl=9,
    )
    fx = Effects()
    fx.handled = Handled(message.id, message.trace_id, "/fetch", "web_fetch", 1000, 5, "ok")
    fx.deliveries.append(Delivery("/next", result, "/fetch"))
    maker(fx)
    get = next(s for s in exporter.get_finished_spans() if s.name == "GET")
    attributes = dict(get.attributes or {})
    assert attributes["url.full"] == "https://example.org:8443/a?b=c"
    assert attributes["server.address"] == "example.org"
    assert attributes["server.port"] == 8443


CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_only_the_message_that_brought_the_traceparent_is_under_the_callers_span(made) -> None:
    maker, exporter, _ = made
    first = source_message("/a", {})
    assert context.join(first.trace_id, CALLER)
    maker(_ingress(first))
    maker(_handled(first))
    # a later message into the same colony trace, without a traceparent, or with another one
    later = follow_up(first, target="/a", context={}, hop={}, body={}, reply_to=None, ttl=9)
    assert not context.join(first.trace_id, "00-" + "1" * 32 + "-" + "2" * 16 + "-01")
    maker(_ingress(later))
    maker(_handled(later))
    joined, again = exporter.get_finished_spans()
    assert joined.parent is not None
    assert f"{joined.parent.span_id:016x}" == "00f067aa0ba902b7"
    assert again.parent is None  # a root: the caller's span was the first request's
    caller_trace = int("4bf92f3577b34da6a3ce929d0e0e4736", 16)
    assert joined.context.trace_id == again.context.trace_id == caller_trace  # one trace still
