"""topologies/telegram-research, booted as shipped with the SDK's in-memory exporter: its
colony trace becomes one OpenTelemetry trace (a span per handling, LLM and tool children, the
message tree as the span tree, the provider told where its requests belong)."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from colony.runs import select_handling
from tests.topologies.test_research_bot import research_bot, two_rounds


def _attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_the_research_bot_makes_one_span_per_handling_llm_spans_with_tokens_and_the_message_tree(
    spans: InMemorySpanExporter,
) -> None:
    async with research_bot(script_for=two_rounds) as bot:
        await bot.ask("What do sea otters use stones for?")
        log = await bot.colony.message_log()
        (trace,) = {row.trace_id for row in log}
        handlings = select_handling(bot.colony.colony.db.source, trace)
        provider_headers = list(bot.model.headers)
    done = spans.get_finished_spans()  # the colony stopped: everything was flushed

    otel_trace = uuid.UUID(trace).int
    assert {s.context.trace_id for s in done} == {otel_trace}  # the colony trace id, as hex
    handle = [s for s in done if s.name.startswith("handle ")]
    # one span per handling, and each handling has its span
    assert Counter(
        (_attrs(s)["colony.message.id"], _attrs(s)["colony.cell.path"]) for s in handle
    ) == Counter((h["message_id"], h["cell"]) for h in handlings)
    for span in handle:
        a = _attrs(span)
        assert span.name == f"handle {a['colony.cell.path']}"
        assert span.kind == SpanKind.INTERNAL
        assert a["colony.outcome"] == "ok"
        assert isinstance(a["colony.message.ttl"], int)
        assert span.end_time is not None
        assert span.start_time is not None
        assert span.end_time >= span.start_time
    by_message = {_attrs(s)["colony.message.id"]: s for s in handle}
    assert {_attrs(s)["colony.cell.type"] for s in handle} >= {
        "llm",
        "code",
        "store",
        "web_search",
        "web_fetch",
    }

    # the LLM calls: GenAI attributes, token counts, children of the planner's handlings
    chats = sorted((s for s in done if s.name.startswith("chat ")), key=lambda s: s.start_time or 0)
    assert len(chats) == 3
    for chat in chats:
        a = _attrs(chat)
        assert chat.kind == SpanKind.CLIENT
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.provider.name"] == "openai"
        # the model the tree asks for names the span; the one the provider answered with is
        # the response's (the scripted server answers as gpt-4o-mock whatever it was asked)
        assert a["gen_ai.request.model"] == "scripted-model"
        assert a["gen_ai.response.model"] == "gpt-4o-mock"
        assert chat.name == "chat scripted-model"
        assert a["gen_ai.usage.input_tokens"] == 10  # what the scripted server reports
        assert a["gen_ai.usage.output_tokens"] == 5
        assert chat.parent is not None
        parent = next(s for s in handle if s.context.span_id == chat.parent.span_id)
        assert _attrs(parent)["colony.cell.path"] == "/planner"
    assert [_attrs(c)["gen_ai.response.finish_reasons"] for c in chats] == [
        ("tool_calls",),
        ("tool_calls",),
        ("stop",),
    ]

    # the tool HTTP calls: a GET under each web_search and web_fetch handling
    gets = [s for s in done if s.name == "GET"]
    assert len(gets) == 4
    for get in gets:
        assert get.kind == SpanKind.CLIENT
        assert get.parent is not None
        parent = next(s for s in handle if s.context.span_id == get.parent.span_id)
        assert _attrs(parent)["colony.cell.type"] == _attrs(get)["colony.tool.operation"]
        assert get.status.status_code != StatusCode.ERROR
    statuses = [_attrs(g).get("http.response.status_code") for g in gets]
    assert [
        _attrs(g)["colony.tool.operation"]
        for g, st in zip(gets, statuses, strict=True)
        if st == 200
    ] == [
        "web_fetch",
        "web_fetch",
    ]  # a fetch reports its status; a search only an error's

    # the span tree is the message tree: a handling's parent is the handling whose hand-off
    # routed its message (its nearest ancestor handled by a cell, across hive transits)
    parent_of: dict[str, str] = {r.id: r.parent_message_id for r in log if r.parent_message_id}
    roots = [s for s in handle if s.parent is None]
    assert [_attrs(s)["colony.cell.path"] for s in roots] == ["/prep"]  # the chat's update
    for span in handle:
        if span.parent is None:
            continue
        above = parent_of[_attrs(span)["colony.message.id"]]
        while above not in by_message:  # up through hive transits
            above = parent_of[above]
        assert span.parent.span_id == by_message[above].context.span_id

    # each provider request carried the traceparent of its LLM span
    sent = [h["traceparent"] for h in provider_headers]
    assert sent == [f"00-{otel_trace:032x}-{c.context.span_id:016x}-01" for c in chats]
