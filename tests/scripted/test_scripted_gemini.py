"""The scripted Gemini generateContent server and its reply builders."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from cells.llm.dialects.base import Tool, call_text
from cells.llm.dialects.gemini import SKIP_SIGNATURE, GeminiGenerate
from scripted.core import Delay, Raw, ScriptItem, Status
from scripted.gemini import (
    COUNT_MISMATCH,
    ScriptedGemini,
    gemini_blocked,
    gemini_calls,
    gemini_empty,
    gemini_max_tokens,
    gemini_safety,
    gemini_text,
)

USER = {"role": "user", "parts": [{"text": "hi"}]}
BODY = {"contents": [USER]}
SIG = "c2lnbmF0dXJl"
D = GeminiGenerate()


async def post(
    client: httpx.AsyncClient,
    provider: ScriptedGemini,
    body: Any = BODY,
    model: str = "gemini-2.5-flash",
    **kw: Any,
) -> httpx.Response:
    return await client.post(D.url(provider.url, model), json=body, **kw)


def text_of(resp: httpx.Response) -> Any:
    return resp.json()["candidates"][0]["content"]["parts"][0]["text"]


def model_calls(*names: str, signature: str | None = SIG) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    for n, name in enumerate(names):
        part: dict[str, Any] = {"functionCall": {"name": name, "args": {}}}
        if n == 0 and signature is not None:
            part["thoughtSignature"] = signature
        parts.append(part)
    return {"role": "model", "parts": parts}


def responses(*names: str) -> dict[str, Any]:
    return {
        "role": "user",
        "parts": [{"functionResponse": {"name": n, "response": {"output": 1}}} for n in names],
    }


# -- transport --------------------------------------------------------------------------------


async def test_any_model_is_served_in_order_and_the_last_reply_repeats(client):
    async with ScriptedGemini([gemini_text("one"), gemini_text("two")]) as provider:
        assert provider.url == f"http://127.0.0.1:{provider.port}/v1beta"
        answers = [
            text_of(await post(client, provider, model=m))
            for m in ("gemini-2.5-flash", "gemini-3-pro-preview", "x", "tuned-1.0")
        ]
    assert answers == ["one", "two", "two", "two"]
    assert provider.models == ["gemini-2.5-flash", "gemini-3-pro-preview", "x", "tuned-1.0"]
    assert provider.served == 4


async def test_requests_and_the_api_key_header_are_recorded(client):
    async with ScriptedGemini([gemini_text("x")]) as provider:
        await post(client, provider, headers=D.headers("AIza-key"))
    assert provider.requests == [BODY]
    assert provider.headers[0]["x-goog-api-key"] == "AIza-key"


async def test_errors_have_googles_shape(client):
    script: list[ScriptItem] = [
        Status(429, headers={"retry-after": "2"}),
        Status(503),
        Raw(502, "<html>bad gateway</html>", "text/html"),
        Delay(0.01, gemini_text("late")),
    ]
    async with ScriptedGemini(script) as provider:
        limited = await post(client, provider)
        unavailable = await post(client, provider)
        raw = await post(client, provider)
        late = await post(client, provider)
        elsewhere = await client.post(provider.url + "/models/m:streamGenerateContent", json=BODY)
        wrong_method = await client.get(D.url(provider.url, "m"))
    assert limited.status_code == 429
    assert limited.headers["retry-after"] == "2"
    assert limited.json() == {
        "error": {"code": 429, "message": "scripted 429 error", "status": "RESOURCE_EXHAUSTED"}
    }
    assert unavailable.json()["error"]["status"] == "UNAVAILABLE"
    assert (raw.status_code, raw.text) == (502, "<html>bad gateway</html>")
    assert text_of(late) == "late"
    assert elsewhere.status_code == wrong_method.status_code == 404
    assert elsewhere.json()["error"]["status"] == "NOT_FOUND"
    assert len(provider.requests) == len(provider.models) == 4


async def test_a_delay_times_the_client_out(client):
    async with ScriptedGemini([Delay(2.0, gemini_text("late")), gemini_text("next")]) as provider:
        with pytest.raises(httpx.ReadTimeout):
            await post(client, provider, timeout=0.1)
        assert text_of(await post(client, provider)) == "next"


async def test_a_body_that_is_not_json_is_refused_and_recorded(client):
    async with ScriptedGemini([gemini_text("x")]) as provider:
        resp = await client.post(D.url(provider.url, "m"), content=b"{nope")
    assert resp.status_code == 400
    assert resp.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert provider.requests == ["{nope"]
    assert provider.models == ["m"]
    assert provider.served == 0


async def test_concurrent_requests_each_get_a_reply(client):
    async with ScriptedGemini([Delay(0.05, gemini_text("x"))]) as provider:
        replies = await asyncio.gather(*(post(client, provider) for _ in range(10)))
    assert [text_of(r) for r in replies] == ["x"] * 10


# -- request checks ---------------------------------------------------------------------------


async def test_a_parallel_round_answered_in_full_is_accepted(client):
    contents = [USER, model_calls("f", "g"), responses("g", "f"), USER]
    async with ScriptedGemini([gemini_text("done")]) as provider:
        resp = await post(client, provider, {"contents": contents})
    assert resp.status_code == 200
    assert provider.served == 1


async def test_the_skip_value_is_accepted_and_gemini_2_needs_no_signature(client):
    skip = [USER, model_calls("f", signature=SKIP_SIGNATURE), responses("f")]
    unsigned = [USER, model_calls("f", signature=None), responses("f")]
    async with ScriptedGemini([gemini_text("x")]) as provider:
        assert (await post(client, provider, {"contents": skip})).status_code == 200
    async with ScriptedGemini([gemini_text("x")], require_signatures=False) as provider:
        assert (await post(client, provider, {"contents": unsigned})).status_code == 200


async def test_a_missing_signature_is_refused_without_consuming_the_script(client):
    unsigned = [
        USER,
        model_calls("get_weather", "g", signature=None),
        responses("get_weather", "g"),
    ]
    second_signed = model_calls("f", "g", signature=None)
    second_signed["parts"][1]["thoughtSignature"] = SIG  # on the wrong part
    async with ScriptedGemini([gemini_text("first")]) as provider:
        refused = await post(client, provider, {"contents": unsigned})
        wrong_part = await post(
            client, provider, {"contents": [USER, second_signed, responses("f", "g")]}
        )
        accepted = await post(client, provider, {"contents": [USER]})
    assert refused.status_code == wrong_part.status_code == 400
    error = refused.json()["error"]
    assert (error["code"], error["status"]) == (400, "INVALID_ARGUMENT")
    assert error["message"].startswith(
        "Function call is missing a thought_signature in functionCall parts."
    )
    assert "`default_api:get_weather` , position 2." in error["message"]
    assert text_of(accepted) == "first"
    assert provider.served == 1
    assert len(provider.requests) == 3


@pytest.mark.parametrize(
    ("contents", "message"),
    [
        pytest.param([USER, model_calls("f", "g"), responses("f")], COUNT_MISMATCH, id="too few"),
        pytest.param([USER, model_calls("f"), responses("f", "f")], COUNT_MISMATCH, id="too many"),
        pytest.param([USER, model_calls("f")], COUNT_MISMATCH, id="trailing calls"),
        pytest.param([USER, model_calls("f"), USER], COUNT_MISMATCH, id="text instead"),
        pytest.param(
            [USER, model_calls("f"), responses("g")], "names of the function response", id="names"
        ),
        pytest.param(
            [USER, responses("f")],
            "function response turn comes immediately after a function call turn",
            id="orphan responses",
        ),
        pytest.param(
            [model_calls("f"), responses("f")],
            "function call turn comes immediately after a user turn",
            id="starts with calls",
        ),
        pytest.param(
            [{"role": "model", "parts": [{"text": "hello"}]}, USER],
            "alternate between user and model",
            id="starts with model text",
        ),
        pytest.param([], "contents is not specified", id="no contents"),
        pytest.param([{"role": "user", "parts": []}], "must not be empty", id="empty parts"),
        pytest.param([{"role": "system", "parts": [{"text": "x"}]}], "role", id="system role"),
    ],
)
async def test_sequencing_violations_are_refused(client, contents, message):
    async with ScriptedGemini([gemini_text("x")]) as provider:
        resp = await post(client, provider, {"contents": contents})
    assert resp.status_code == 400
    assert message in resp.json()["error"]["message"]
    assert provider.served == 0


async def test_unknown_fields_are_refused_like_the_real_api(client):
    async with ScriptedGemini([gemini_text("x")]) as provider:
        resp = await post(client, provider, {**BODY, "reasoning": {"effort": "low"}})
        camel = await post(client, provider, {**BODY, "generation_config": {}, "toolConfig": {}})
    assert resp.status_code == 400
    assert resp.json()["error"]["message"] == (
        'Invalid JSON payload received. Unknown name "reasoning": Cannot find field.'
    )
    assert camel.status_code == 200


async def test_what_the_dialect_sends_is_accepted(client):
    """The dialect's requests — recorded or rebuilt history — pass the server's checks."""
    script = [
        gemini_calls([("fc_1", "f", {"a": 1}), ("g", {})], "Looking.", SIG),
        gemini_text("ok"),
    ]
    async with ScriptedGemini(script) as provider:
        first = D.parse((await post(client, provider)).json())
        store = {tuple(first.calls): first.native}
        turns: list[Any] = [{"origin": "user", "type": "text", "text": "go"}, *first.turns]
        turns += [
            {"origin": "tool", "type": "tool_result", "id": first.calls[1], "text": "2"},
            {
                "origin": "tool",
                "type": "tool_result",
                "id": first.calls[0],
                "text": '{"error":"x"}',
            },
        ]
        tools = [Tool("f", None, {"type": "object"}), Tool("g", "G.", {"type": "object"})]

        def body(native: Any) -> Any:
            return D.request(
                model="m",
                prompt="Be brief.",
                tools=tools,
                turns=turns,
                max_tokens=64,
                temperature=0.0,
                native=native,
                extra={},
            )

        replayed = await post(client, provider, body(lambda calls: store.get(calls)))
        rebuilt = await post(client, provider, body(lambda calls: None))
    assert first.calls == ["fc_1", "gemini_scripted-response_1"]
    assert replayed.status_code == rebuilt.status_code == 200
    assert provider.requests[1]["contents"][1]["parts"] == first.native
    assert provider.requests[2]["contents"][1]["parts"][1]["thoughtSignature"] == SKIP_SIGNATURE


# -- reply builders ---------------------------------------------------------------------------


def test_gemini_text_has_the_generate_content_shape():
    body = gemini_text(
        "hello", model="gemini-x", response_id="r9", prompt_tokens=3, candidates_tokens=4
    )
    assert body == {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": "hello"}]},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 4, "totalTokenCount": 7},
        "modelVersion": "gemini-x",
        "responseId": "r9",
    }
    signed = gemini_text("a", signature=SIG, thought="hmm", thoughts_tokens=6, cached_tokens=2)
    assert signed["candidates"][0]["content"]["parts"] == [
        {"text": "hmm", "thought": True},
        {"text": "a", "thoughtSignature": SIG},
    ]
    assert signed["usageMetadata"] == {
        "promptTokenCount": 10,
        "candidatesTokenCount": 5,
        "totalTokenCount": 21,
        "cachedContentTokenCount": 2,
        "thoughtsTokenCount": 6,
    }
    reply = D.parse(signed)
    assert (reply.text, reply.usage.input, reply.usage.output, reply.usage.cache_read) == (
        "a",
        8,
        11,
        2,
    )


def test_gemini_calls_puts_the_signature_on_the_first_call_at_part_level():
    body = gemini_calls(
        [("fc_A", "get_weather", {"city": "Paris"}), ("get_time", {"tz": "Europe/Paris"})],
        text="Checking both cities.",
        signature=SIG,
        thought="plan",
    )
    candidate = body["candidates"][0]
    assert candidate["finishReason"] == "STOP"
    assert candidate["content"]["parts"] == [
        {"text": "plan", "thought": True},
        {"text": "Checking both cities."},
        {
            "functionCall": {"id": "fc_A", "name": "get_weather", "args": {"city": "Paris"}},
            "thoughtSignature": SIG,
        },
        {"functionCall": {"name": "get_time", "args": {"tz": "Europe/Paris"}}},
    ]
    reply = D.parse(body)
    assert reply.finish_reason == "tool_calls"
    assert reply.calls == ["fc_A", "gemini_scripted-response_1"]
    assert reply.turns[0]["text"] == call_text("get_weather", {"city": "Paris"})
    assert reply.text == "Checking both cities."
    assert (
        "thoughtSignature" not in gemini_calls([("f", {})])["candidates"][0]["content"]["parts"][0]
    )


def test_gemini_empty_is_an_empty_round():
    body = gemini_empty()
    assert body["candidates"][0]["content"] == {"role": "model"}
    assert "candidatesTokenCount" not in body["usageMetadata"]
    assert D.parse(body).empty
    malformed = D.parse(gemini_empty("MALFORMED_FUNCTION_CALL"))
    assert malformed.empty
    assert malformed.stop_reason == "MALFORMED_FUNCTION_CALL"


def test_gemini_blocked_and_safety_are_refusals():
    blocked = gemini_blocked("PROHIBITED_CONTENT")
    assert "candidates" not in blocked
    assert blocked["promptFeedback"] == {"blockReason": "PROHIBITED_CONTENT"}
    assert D.parse(blocked).refusal_category == "PROHIBITED_CONTENT"
    safety = gemini_safety()
    candidate = safety["candidates"][0]
    assert "content" not in candidate
    assert candidate["finishReason"] == "SAFETY"
    assert candidate["safetyRatings"][0]["blocked"] is True
    reply = D.parse(gemini_safety("SPII"))
    assert (reply.finish_reason, reply.refusal_category) == ("content_filter", "SPII")


def test_gemini_max_tokens_is_a_cut_off_whose_calls_never_run():
    body = gemini_max_tokens("Let me", [("fc_1", "f", {"a": 1})])
    assert body["candidates"][0]["finishReason"] == "MAX_TOKENS"
    assert body["candidates"][0]["content"]["parts"][1] == {
        "functionCall": {"id": "fc_1", "name": "f", "args": {"a": 1}}
    }
    reply = D.parse(body)
    assert (reply.finish_reason, reply.calls, reply.text) == ("length", [], "Let me")
    assert D.parse(gemini_max_tokens()).text == "The answer is"
