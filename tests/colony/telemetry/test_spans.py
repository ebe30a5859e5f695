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
