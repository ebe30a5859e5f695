"""W3C trace context at the colony's edges: a ``traceparent`` on ``POST /messages`` makes the
colony trace part of the caller's trace, and provider requests carry the span they belong to.
fixtures/trees/tool-loop (an llm cell behind hives, a tool loop) against a scripted OpenAI."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from colony.telemetry.spans import SpanMaker
from colony.testing import ColonyHarness, ScriptedOpenAI, text_reply, tool_calls_reply
from tests.api_client import Api, served
from tests.conftest import FIXTURES

TREE = FIXTURES / "trees" / "tool-loop"
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
QUESTION = {"origin": "user", "type": "text", "text": "What is 2+3?"}
CALC = {
    "type": "function",
    "function": {
        "name": "calc",
        "description": "Add numbers.",
        "parameters": {"type": "object", "properties": {"numbers": {"type": "array"}}},
    },
}


def _message() -> dict[str, Any]:
    return {
        "target": "/",
        "body": {"system": {"tools": {"calc": {"text": json.dumps(CALC)}}}, "messages": [QUESTION]},
        "headers": {"thread": json.dumps([QUESTION]), "iter": "0"},
    }


@asynccontextmanager
async def _bot(script: list[Any]) -> AsyncIterator[tuple[ScriptedOpenAI, ColonyHarness, Api]]:
    """The tool-loop colony on a scripted model, served over HTTP."""
    async with (
        ScriptedOpenAI(script) as model,
        ColonyHarness(TREE, capture=["/sink"], llm_base_url=model.url) as colony,
        served(colony) as api,
    ):
        yield model, colony, api


async def _post(traceparent: str | None) -> tuple[list[dict[str, str]], str]:
    """POST one question (with ``traceparent`` when given) and run it to its answer; the
    provider's request headers and the colony trace id."""
    script = [tool_calls_reply([("call-1", "calc", {"numbers": [2, 3]})]), text_reply("5.")]
    async with _bot(script) as (model, colony, api):
        headers = {} if traceparent is None else {"traceparent": traceparent}
        answer = await api.client.post("/messages", json=_message(), headers=headers)
        assert answer.status_code == 202
        await colony.settle(timeout=30)
        assert len(colony.captured("/sink")) == 1
        return list(model.headers), answer.json()["trace_id"]


async def test_a_traceparent_on_post_messages_puts_the_colony_trace_under_the_callers_span(
    spans: InMemorySpanExporter,
) -> None:
    sent, _ = await _post(f"00-{CALLER_TRACE}-{CALLER_SPAN}-01")
    done = spans.get_finished_spans()
    assert done
    assert {f"{s.context.trace_id:032x}" for s in done} == {CALLER_TRACE}
    roots = [s for s in done if s.parent is not None and f"{s.parent.span_id:016x}" == CALLER_SPAN]
    assert [s.name for s in roots] == ["handle /brain"]  # the first handling, past the root hive
    ids = {s.context.span_id for s in done}
    assert all(s.parent is not None and (s.parent.span_id in ids or s in roots) for s in done)
    chats = sorted((s for s in done if s.name.startswith("chat ")), key=lambda s: s.start_time or 0)
    assert [h["traceparent"] for h in sent] == [
        f"00-{CALLER_TRACE}-{c.context.span_id:016x}-01" for c in chats
    ]


async def test_a_caller_that_does_not_sample_gets_no_spans_and_passes_the_flag_on(
    spans: InMemorySpanExporter,
) -> None:
    sent, _ = await _post(f"00-{CALLER_TRACE}-{CALLER_SPAN}-00")
    assert spans.get_finished_spans() == ()
    assert len(sent) == 2
    for headers in sent:
        version, trace, _span, flags = headers["traceparent"].split("-")
        assert (version, trace, flags) == ("00", CALLER_TRACE, "00")


async def test_a_malformed_traceparent_is_ignored_and_the_trace_is_the_colonys_own(
    spans: InMemorySpanExporter,
) -> None:
    _, trace = await _post("00-not-a-trace-01")
    done = spans.get_finished_spans()
    assert done
    assert {f"{s.context.trace_id:032x}" for s in done} == {trace.replace("-", "")}
    assert [s.name for s in done if s.parent is None] == ["handle /brain"]


async def test_without_telemetry_nothing_is_hooked_and_no_traceparent_is_sent(
    no_otel_env: None,
) -> None:
    script = [text_reply("5.")]
    async with _bot(script) as (model, colony, api):
        assert not any(isinstance(tap, SpanMaker) for tap in colony.colony.events.taps)
        assert colony.colony.events.began_hooks == []
        headers = {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}
        answer = await api.client.post("/messages", json=_message(), headers=headers)
        assert answer.status_code == 202
        await colony.settle(timeout=30)
        assert [h.get("traceparent") for h in model.headers] == [None]


async def test_a_duplicate_post_with_a_traceparent_links_no_trace(
    spans: InMemorySpanExporter,
) -> None:
    from colony.telemetry import context

    script = [text_reply("5.")]
    async with _bot(script) as (_model, colony, api):
        headers = {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01", "Idempotency-Key": "k1"}
        first = await api.client.post("/messages", json=_message(), headers=headers)
        assert first.status_code == 202
        again = await api.client.post("/messages", json=_message(), headers=headers)
        assert again.json()["duplicate"] is True
        # the taken message's trace is linked; the duplicate's (never run) is not
        assert list(context._remote) == [first.json()["trace_id"]]
        await colony.settle(timeout=30)
