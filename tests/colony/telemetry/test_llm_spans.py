"""The LLM-call span of a handling whose provider request failed: the span the request named
as its parent (``traceparent``) is exported, an error, with the model it asked for.
fixtures/trees/tool-loop against a scripted OpenAI that refuses the request."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from colony.testing import ColonyHarness, ScriptedOpenAI, error_status
from tests.conftest import FIXTURES

TREE = FIXTURES / "trees" / "tool-loop"
QUESTION = {"origin": "user", "type": "text", "text": "What is 2+3?"}


async def test_a_provider_call_answered_400_gets_an_error_chat_span_the_traceparent_named(
    spans: InMemorySpanExporter,
) -> None:
    script = [error_status(400, message="bad request")]
    async with (
        ScriptedOpenAI(script) as model,
        ColonyHarness(TREE, capture=["/sink"], llm_base_url=model.url) as colony,
    ):
        await colony.send("/", {"messages": [QUESTION]}, context={"iter": "0"})
        await colony.settle(timeout=30)
        sent = [h["traceparent"] for h in model.headers]
    done = spans.get_finished_spans()
    assert len(sent) == 1  # a 400 is not retried
    _version, trace, span, _flags = sent[0].split("-")
    [chat] = [s for s in done if f"{s.context.span_id:016x}" == span]
    assert f"{chat.context.trace_id:032x}" == trace
    attributes: dict[str, Any] = dict(chat.attributes or {})
    assert chat.name == "chat scripted-model"
    assert chat.kind == SpanKind.CLIENT
    assert chat.status.status_code == StatusCode.ERROR
    assert attributes["error.type"] == "provider_error"  # the cell's error_code for a 400
    assert attributes["gen_ai.request.model"] == "scripted-model"
    assert "gen_ai.response.model" not in attributes  # nobody answered with one
    assert attributes["gen_ai.provider.name"] == "openai"
    assert "gen_ai.usage.input_tokens" not in attributes
    parent = next(s for s in done if chat.parent and s.context.span_id == chat.parent.span_id)
    assert parent.name == "handle /brain"
    assert dict(parent.attributes or {})["colony.outcome"] == "error"
