"""The scripted Anthropic server: Anthropic's wire, its request checks and its reply shapes."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from cells.llm.dialects.anthropic import AnthropicMessages
from scripted import Delay, Raw, ScriptItem, Status
from scripted.anthropic import (
    ScriptedAnthropic,
    anthropic_empty,
    anthropic_error,
    anthropic_in_body_error,
    anthropic_max_tokens,
    anthropic_refusal,
    anthropic_text,
    anthropic_tool_use,
)

D = AnthropicMessages()
USER = {"role": "user", "content": "hi"}
BODY = {"model": "claude-mock", "max_tokens": 64, "messages": [USER]}


async def post(
    client: httpx.AsyncClient, provider: ScriptedAnthropic, body: Any = BODY, **kw: Any
) -> httpx.Response:
    return await client.post(provider.url + "/messages", json=body, **kw)


def use(*ids: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": i, "name": "search", "input": {"q": i}} for i in ids
        ],
    }


def results(*ids: str) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": i, "content": "ok"} for i in ids],
    }


def body_with(*messages: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"model": "claude-mock", "max_tokens": 64, "messages": [USER, *messages], **more}


def error_of(resp: httpx.Response) -> dict[str, Any]:
    body = resp.json()
    assert body["type"] == "error"
    error: dict[str, Any] = body["error"]
    return error


# -- contract ----------------------------------------------------------------------------------


async def test_replies_are_served_in_order_and_the_last_one_repeats(
    client: httpx.AsyncClient,
) -> None:
    async with ScriptedAnthropic([anthropic_text("one"), anthropic_text("two")]) as provider:
        answers = [(await post(client, provider)).json()["content"][0]["text"] for _ in range(3)]
        assert provider.url == f"http://127.0.0.1:{provider.port}/v1"
    assert answers == ["one", "two", "two"]
    assert provider.served == 3


async def test_requests_and_headers_are_recorded(client: httpx.AsyncClient) -> None:
    async with ScriptedAnthropic([anthropic_text("x")]) as provider:
        await post(client, provider, headers=D.headers("sk-ant-test"))
    assert provider.requests == [BODY]
    assert provider.headers[0]["x-api-key"] == "sk-ant-test"
    assert provider.headers[0]["anthropic-version"] == "2023-06-01"


async def test_other_paths_are_anthropic_404s(client: httpx.AsyncClient) -> None:
    async with ScriptedAnthropic([anthropic_text("x")]) as provider:
        resp = await client.post(provider.url + "/chat/completions", json=BODY)
    assert resp.status_code == 404
    assert error_of(resp)["type"] == "not_found_error"
    assert provider.served == 0


async def test_a_body_that_is_not_json_is_an_invalid_request(client: httpx.AsyncClient) -> None:
    async with ScriptedAnthropic([anthropic_text("x")]) as provider:
        resp = await client.post(provider.url + "/messages", content=b"{nope")
    assert resp.status_code == 400
    assert error_of(resp) == {
        "type": "invalid_request_error",
        "message": "request body is not valid JSON",
    }


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (401, "authentication_error"),
        (429, "rate_limit_error"),
        (529, "overloaded_error"),
        (503, "api_error"),
    ],
)
async def test_a_status_item_gets_anthropics_default_error_body(
    client: httpx.AsyncClient, code: int, kind: str
) -> None:
    async with ScriptedAnthropic([Status(code)]) as provider:
        resp = await post(client, provider)
    assert resp.status_code == code
    assert resp.json() == {
        "type": "error",
        "error": {"type": kind, "message": f"scripted {code} error"},
    }


async def test_delay_and_raw_items_work(client: httpx.AsyncClient) -> None:
    script: list[ScriptItem] = [
        Delay(0.01, anthropic_text("late")),
        Raw(502, "<html>bad gateway</html>", "text/html"),
    ]
    async with ScriptedAnthropic(script) as provider:
        first = await post(client, provider)
        second = await post(client, provider)
    assert first.json()["content"][0]["text"] == "late"
    assert (second.status_code, second.text) == (502, "<html>bad gateway</html>")


async def test_anthropic_error_carries_retry_after_and_the_type(client: httpx.AsyncClient) -> None:
    item = anthropic_error(429, retry_after=0.5, message="slow down")
    async with ScriptedAnthropic([item]) as provider:
        resp = await post(client, provider)
    assert resp.status_code == 429
    assert resp.headers["retry-after"] == "0.5"
    assert error_of(resp) == {"type": "rate_limit_error", "message": "slow down"}


# -- request checks ------------------------------------------------------------------------------


async def test_a_tool_use_without_results_is_refused_with_anthropics_message(
    client: httpx.AsyncClient,
) -> None:
    async with ScriptedAnthropic([anthropic_text("x")]) as provider:
        resp = await post(
            client, provider, body_with(use("toolu_A", "toolu_B"), results("toolu_A"))
        )
    assert resp.status_code == 400
    assert error_of(resp) == {
        "type": "invalid_request_error",
        "message": "messages.1: `tool_use` ids were found without `tool_result` blocks immediately "
        "after: toolu_B. Each `tool_use` block must have a corresponding `tool_result` block in "
        "the next message.",
    }
    assert provider.served == 0
    assert len(provider.requests) == 1


async def test_a_trailing_tool_use_is_unanswered(client: httpx.AsyncClient) -> None:
    async with ScriptedAnthropic([anthropic_text("x")]) as provider:
        resp = await post(client, provider, body_with(use("toolu_A")))
    assert resp.status_code == 400
    assert "toolu_A" in error_of(resp)["message"]


async def test_results_must_come_before_any_text(client: httpx.AsyncClient) -> None:
    late = {
        "role": "user",
        "content": [
            {"type": "text", "text": "here you go"},
            {"type": "tool_result", "tool_use_id": "toolu_A", "content": "ok"},
        ],
    }
    early = {
        "role": "user",
        "content": [*results("toolu_A")["content"], {"type": "text", "text": "more"}],
    }
    async with ScriptedAnthropic([anthropic_text("x")]) as provider:
        refused = await post(client, provider, body_with(use("toolu_A"), late))
        accepted = await post(client, provider, body_with(use("toolu_A"), early))
    assert refused.status_code == 400
    assert error_of(refused)["message"].startswith("messages.1: `tool_use` ids were found")
    assert accepted.status_code == 200


async def test_a_result_without_its_tool_use_is_refused(client: httpx.AsyncClient) -> None:
    async with ScriptedAnthropic([anthropic_text("x")]) as provider:
        resp = await post(
            client, provider, body_with(use("toolu_A"), results("toolu_A", "toolu_Z"))
        )
    assert resp.status_code == 400
    assert error_of(resp)["message"] == (
        "messages.2.content.1: unexpected `tool_use_id` found in `tool_result` blocks: toolu_Z. "
        "Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"model": "m", "messages": [USER]}, "max_tokens: Field required"),
        ({"max_tokens": 1, "messages": [USER]}, "model: Field required"),
        (
            {"model": "m", "max_tokens": 1, "messages": []},
            "messages: at least one message is required",
        ),
        (
            {"model": "m", "max_tokens": 1, "messages": [{"role": "assistant", "content": "hi"}]},
            'messages: first message must use the "user" role',
        ),
        (
            {"model": "m", "max_tokens": 1, "messages": [{"role": "system", "content": "x"}, USER]},
            'messages: Unexpected role "system". The Messages API accepts a top-level `system` '
            'parameter, not "system" as an input message role.',
        ),
        (
            {
                "model": "m",
                "max_tokens": 1,
                "messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}],
            },
            "messages: text content blocks must be non-empty",
        ),
        (
            {
                "model": "m",
                "max_tokens": 1,
                "messages": [{"role": "user", "content": [{"type": "text", "text": " \n"}]}],
            },
            "messages: text content blocks must contain non-whitespace text",
        ),
        (
            {
                "model": "m",
                "max_tokens": 1,
                "messages": [USER, {"role": "assistant", "content": []}, USER],
            },
            "messages.1: all messages must have non-empty content except for the optional final "
            "assistant message",
        ),
        (
            {
                "model": "m",
                "max_tokens": 1,
                "messages": [USER],
                "tools": [{"name": "get.weather", "input_schema": {}}],
            },
            "tools.0.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'",
        ),
    ],
)
async def test_anthropics_other_request_checks(
    client: httpx.AsyncClient, body: dict[str, Any], message: str
) -> None:
    async with ScriptedAnthropic([anthropic_text("x")]) as provider:
        resp = await post(client, provider, body)
    assert resp.status_code == 400
    assert error_of(resp) == {"type": "invalid_request_error", "message": message}
    assert provider.served == 0


# -- reply helpers through the dialect ---------------------------------------------------------


def test_tool_use_helper_orders_thinking_redacted_text_then_calls() -> None:
    body = anthropic_tool_use(
        [("toolu_A", "get_weather", {"city": "Paris"}), ("toolu_B", "get_time", {"tz": "UTC"})],
        text="Checking.",
        thinking="plan",
        signature="sig-1",
        redacted="opaque",
    )
    assert [b["type"] for b in body["content"]] == [
        "thinking",
        "redacted_thinking",
        "text",
        "tool_use",
        "tool_use",
    ]
    assert body["content"][0] == {"type": "thinking", "thinking": "plan", "signature": "sig-1"}
    assert (body["type"], body["role"], body["stop_reason"], body["stop_sequence"]) == (
        "message",
        "assistant",
        "tool_use",
        None,
    )
    reply = D.parse(body)
    assert reply.calls == ["toolu_A", "toolu_B"]
    assert reply.native == body["content"]
    assert reply.text == "Checking."


def test_text_helper_parses_as_a_stop() -> None:
    reply = D.parse(anthropic_text("hello", cache_read=7))
    assert (reply.finish_reason, reply.text, reply.usage.cache_read) == ("stop", "hello", 7)
    assert (
        D.parse(anthropic_text("x", "stop_sequence", stop_sequence="##")).stop_reason
        == "stop_sequence"
    )


def test_empty_helper_is_an_empty_round() -> None:
    reply = D.parse(anthropic_empty())
    assert reply.empty
    assert reply.finish_reason == "stop"


def test_refusal_helper_carries_the_category() -> None:
    body = anthropic_refusal("cyber", "I can't help with that.")
    assert body["stop_details"] == {"type": "refusal", "category": "cyber", "explanation": None}
    reply = D.parse(body)
    assert (reply.finish_reason, reply.refusal_category, reply.text) == (
        "content_filter",
        "cyber",
        "I can't help with that.",
    )


def test_max_tokens_helper_drops_the_partial_call() -> None:
    reply = D.parse(anthropic_max_tokens("Let me", ("toolu_C", "get_weather", {})))
    assert (reply.finish_reason, reply.calls, reply.text) == ("length", [], "Let me")
    ctx = D.parse(anthropic_max_tokens(stop_reason="model_context_window_exceeded"))
    assert ctx.finish_reason == "length"


def test_in_body_error_helper_reads_as_an_error() -> None:
    assert D.in_body_error(anthropic_in_body_error()) == (529, "Overloaded")
    assert D.in_body_error(anthropic_in_body_error("rate_limit_error", "slow")) == (429, "slow")


# -- the dialect against the server ------------------------------------------------------------


async def test_a_tool_round_with_thinking_replays_natively_and_passes_the_checks(
    client: httpx.AsyncClient,
) -> None:
    first = anthropic_tool_use(
        [
            ("toolu_A", "get_weather", {"units": "metric", "city": "Paris"}),
            ("toolu_B", "get_time", {"tz": "Europe/Paris"}),
        ],
        text="Checking both.",
        thinking="two lookups",
        signature="EqQB-sig",
    )
    script = [first, anthropic_text("15 °C; time unknown.")]
    kept: dict[tuple[str, ...], Any] = {}
    turns: list[Any] = [{"origin": "user", "type": "text", "text": "Weather and time in Paris?"}]

    def body() -> dict[str, Any]:
        return D.request(
            model="claude-mock",
            prompt="Be brief.",
            tools=[],
            turns=turns,
            max_tokens=256,
            temperature=0.2,
            native=lambda calls: kept.get(calls),
            extra={},
        )

    async with ScriptedAnthropic(script) as provider:
        resp = await post(client, provider, body(), headers=D.headers(""))
        assert resp.status_code == 200
        reply = D.parse(resp.json())
        kept[tuple(reply.calls)] = json.loads(json.dumps(reply.native))  # as the cell stores it
        turns.extend(reply.turns)
        turns.append(
            {"origin": "tool", "type": "tool_result", "id": "toolu_A", "text": '{"temp_c":15}'}
        )
        turns.append(
            {
                "origin": "tool",
                "type": "tool_result",
                "id": "toolu_B",
                "text": '{"$error":"unknown tz"}',
            }
        )
        resp = await post(client, provider, body())
        assert resp.status_code == 200, resp.text
        final = D.parse(resp.json())
    assert final.text == "15 °C; time unknown."
    assert provider.served == 2
    replayed = provider.requests[1]["messages"][1]
    assert replayed == {"role": "assistant", "content": first["content"]}
    assert list(replayed["content"][2]["input"]) == ["units", "city"]  # the model's own key order
    assert provider.requests[1]["messages"][2]["content"][1] == {
        "type": "tool_result",
        "tool_use_id": "toolu_B",
        "content": "unknown tz",
        "is_error": True,
    }
    assert "x-api-key" not in provider.headers[0]
