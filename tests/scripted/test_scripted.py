"""The scripted OpenAI server: wire behaviour the llm cell's tests rely on."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from scripted import (
    Delay,
    Raw,
    ScriptedOpenAI,
    ScriptItem,
    Status,
    empty_reply,
    error_status,
    in_body_error,
    text_reply,
    tool_calls_reply,
)

USER = {"role": "user", "content": "hi"}
BODY = {"model": "gpt-4o-mock", "messages": [USER]}


async def post(
    client: httpx.AsyncClient, provider: ScriptedOpenAI, body: Any = BODY, **kw: Any
) -> httpx.Response:
    return await client.post(provider.url + "/chat/completions", json=body, **kw)


def content(resp: httpx.Response) -> Any:
    return resp.json()["choices"][0]["message"]["content"]


def tool_turn(*ids: str) -> Any:
    return tool_calls_reply([(i, "search", {"q": i}) for i in ids])["choices"][0]["message"]


def tool_result(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "ok"}


async def test_replies_are_served_in_order_and_the_last_one_repeats(client):
    async with ScriptedOpenAI([text_reply("one"), text_reply("two")]) as provider:
        answers = [content(await post(client, provider)) for _ in range(4)]
    assert answers == ["one", "two", "two", "two"]
    assert provider.served == 4


async def test_the_url_is_the_v1_base_on_loopback():
    async with ScriptedOpenAI([text_reply("x")]) as provider:
        assert provider.url == f"http://127.0.0.1:{provider.port}/v1"


async def test_requests_and_headers_are_recorded_in_arrival_order(client):
    async with ScriptedOpenAI([text_reply("x")]) as provider:
        for n in range(3):
            body = {"model": "m", "messages": [{"role": "user", "content": str(n)}]}
            await post(
                client, provider, body, headers={"Authorization": f"Bearer k{n}", "X-Run": "t"}
            )
    assert [r["messages"][0]["content"] for r in provider.requests] == ["0", "1", "2"]
    assert [h["authorization"] for h in provider.headers] == ["Bearer k0", "Bearer k1", "Bearer k2"]
    assert all(
        h["x-run"] == "t" and h["content-type"] == "application/json" for h in provider.headers
    )


async def test_a_status_item_answers_that_status_with_retry_after(client):
    script: list[ScriptItem] = [error_status(429, retry_after=1.5), Status(503), text_reply("fine")]
    async with ScriptedOpenAI(script) as provider:
        limited = await post(client, provider)
        unavailable = await post(client, provider)
        ok = await post(client, provider)
    assert limited.status_code == 429
    assert limited.headers["retry-after"] == "1.5"
    assert limited.json()["error"]["code"] == 429
    assert unavailable.status_code == 503
    assert unavailable.json() == {
        "error": {"message": "scripted 503 error", "type": "scripted", "code": 503}
    }
    assert "retry-after" not in unavailable.headers
    assert content(ok) == "fine"


async def test_a_status_item_can_carry_its_own_body_and_headers(client):
    async with ScriptedOpenAI([Status(418, {"teapot": True}, {"x-why": "tea"})]) as provider:
        resp = await post(client, provider)
    assert (resp.status_code, resp.json(), resp.headers["x-why"]) == (418, {"teapot": True}, "tea")


async def test_status_headers_override_the_content_type(client):
    async with ScriptedOpenAI(
        [Status(200, "x", {"Content-Type": "application/x-custom"})]
    ) as provider:
        resp = await post(client, provider)
    assert resp.headers.get_list("content-type") == ["application/x-custom"]


async def test_a_raw_item_answers_non_json(client):
    async with ScriptedOpenAI([Raw(502, "<html>bad gateway</html>", "text/html")]) as provider:
        resp = await post(client, provider)
    assert resp.status_code == 502
    assert resp.headers["content-type"] == "text/html"
    assert resp.text == "<html>bad gateway</html>"


async def test_an_empty_script_answers_500(client):
    async with ScriptedOpenAI([]) as provider:
        resp = await post(client, provider)
    assert resp.status_code == 500
    assert provider.served == 0


async def test_a_delay_times_the_client_out_and_the_server_stays_healthy(client):
    async with ScriptedOpenAI([Delay(2.0, text_reply("late")), text_reply("next")]) as provider:
        with pytest.raises(httpx.ReadTimeout):
            await post(client, provider, timeout=0.1)
        resp = await post(client, provider)
        assert content(resp) == "next"
        assert provider.served == 2


async def test_a_short_delay_then_answers(client):
    async with ScriptedOpenAI([Delay(0.01, Delay(0.01, Status(500)))]) as provider:
        resp = await post(client, provider)
    assert resp.status_code == 500


async def test_exiting_during_a_delay_closes_the_waiting_connection(client):
    async with ScriptedOpenAI([Delay(30.0, text_reply("never"))]) as provider:
        pending = asyncio.create_task(post(client, provider))
        for _ in range(500):  # until the request is in (consumed and now delayed)
            if provider.served:
                break
            await asyncio.sleep(0.01)
    with pytest.raises(httpx.RemoteProtocolError):
        await pending


async def test_tool_calls_answered_by_tool_messages_for_every_id_are_accepted(client):
    messages = [USER, tool_turn("call_a", "call_b"), tool_result("call_b"), tool_result("call_a")]
    async with ScriptedOpenAI([text_reply("done")]) as provider:
        resp = await post(client, provider, {"model": "m", "messages": messages})
    assert resp.status_code == 200
    assert provider.served == 1


async def test_a_missing_tool_result_is_refused_without_consuming_the_script(client):
    bad = [USER, tool_turn("call_a", "call_b"), tool_result("call_a")]
    good = [USER, tool_turn("call_a"), tool_result("call_a")]
    async with ScriptedOpenAI([text_reply("first"), text_reply("second")]) as provider:
        refused = await post(client, provider, {"model": "m", "messages": bad})
        accepted = await post(client, provider, {"model": "m", "messages": good})
    assert refused.status_code == 400
    assert refused.json() == {
        "error": {
            "message": "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: call_b",
            "type": "invalid_request_error",
            "param": "messages",
            "code": None,
        }
    }
    assert content(accepted) == "first"
    assert provider.served == 1
    assert len(provider.requests) == 2  # the refused one is recorded too


async def test_a_message_between_tool_calls_and_their_results_is_refused(client):
    messages = [
        USER,
        tool_turn("call_a"),
        {"role": "user", "content": "well?"},
        tool_result("call_a"),
    ]
    async with ScriptedOpenAI([text_reply("x")]) as provider:
        resp = await post(client, provider, {"model": "m", "messages": messages})
    assert resp.status_code == 400
    assert resp.json()["error"]["type"] == "invalid_request_error"
    assert provider.served == 0


@pytest.mark.parametrize(
    "messages",
    [
        pytest.param([USER, tool_turn("call_a")], id="trailing tool_calls"),
        pytest.param([USER, tool_result("call_a")], id="orphan tool message"),
        pytest.param([USER, tool_turn("call_a"), tool_result("call_z")], id="unknown id"),
        pytest.param(
            [USER, tool_turn("call_a"), tool_result("call_a"), tool_result("call_a")],
            id="duplicate result",
        ),
        pytest.param("not a list", id="messages not a list"),
    ],
)
async def test_other_sequencing_violations_are_refused(client, messages):
    async with ScriptedOpenAI([text_reply("x")]) as provider:
        resp = await post(client, provider, {"model": "m", "messages": messages})
    assert resp.status_code == 400
    assert provider.served == 0


async def test_an_assistant_message_with_empty_tool_calls_needs_no_results(client):
    messages = [USER, {"role": "assistant", "content": "hm", "tool_calls": []}, USER]
    async with ScriptedOpenAI([text_reply("x")]) as provider:
        resp = await post(client, provider, {"model": "m", "messages": messages})
    assert resp.status_code == 200


async def test_a_body_that_is_not_json_is_refused_without_consuming_the_script(client):
    async with ScriptedOpenAI([text_reply("x")]) as provider:
        resp = await client.post(provider.url + "/chat/completions", content=b"{nope")
    assert resp.status_code == 400
    assert resp.json()["error"]["type"] == "invalid_request_error"
    assert provider.served == 0
    assert provider.requests == ["{nope"]


async def test_unknown_paths_and_methods_get_404_and_are_not_recorded(client):
    async with ScriptedOpenAI([text_reply("x")]) as provider:
        elsewhere = await client.post(provider.url + "/completions", json=BODY)
        wrong_method = await client.get(provider.url + "/chat/completions")
    assert elsewhere.status_code == wrong_method.status_code == 404
    assert "error" in elsewhere.json()
    assert provider.requests == []
    assert provider.served == 0


async def test_a_query_string_does_not_change_the_route(client):
    async with ScriptedOpenAI([text_reply("x")]) as provider:
        resp = await client.post(provider.url + "/chat/completions?api-version=1", json=BODY)
    assert resp.status_code == 200


async def test_one_client_reuses_one_connection(client):
    script: list[ScriptItem] = [text_reply("a"), Status(429), Raw(200, "?"), text_reply("b")]
    async with ScriptedOpenAI(script) as provider:
        statuses = [(await post(client, provider)).status_code for _ in range(6)]
    assert statuses == [200, 429, 200, 200, 200, 200]
    assert provider.connections == 1


async def test_connection_close_is_honoured(client):
    async with ScriptedOpenAI([text_reply("x")]) as provider:
        first = await post(client, provider, headers={"Connection": "close"})
        second = await post(client, provider)
    assert first.headers["connection"] == "close"
    assert (first.status_code, second.status_code) == (200, 200)
    assert provider.connections == 2


async def test_the_server_binds_only_loopback():
    async with ScriptedOpenAI([text_reply("x")]) as provider:
        assert provider.addresses
        assert all(host == "127.0.0.1" for host, _ in provider.addresses)
    with pytest.raises(ValueError, match="loopback"):
        ScriptedOpenAI([], host="0.0.0.0")


async def test_concurrent_requests_each_get_a_reply(client):
    async with ScriptedOpenAI([Delay(0.05, text_reply("x"))]) as provider:
        replies = await asyncio.gather(*(post(client, provider) for _ in range(20)))
    assert [content(r) for r in replies] == ["x"] * 20
    assert provider.served == 20
    assert provider.connections > 1


def test_text_reply_has_the_chat_completion_shape():
    body = text_reply("hello", "length", model="m1", id="c1", prompt_tokens=3, completion_tokens=4)
    assert isinstance(body.pop("created"), int)
    assert body == {
        "id": "c1",
        "object": "chat.completion",
        "model": "m1",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "hello"},
                "finish_reason": "length",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
    }
    refused = text_reply(None, refusal="I can't help with that.")
    assert refused["choices"][0]["message"] == {
        "role": "assistant",
        "content": None,
        "refusal": "I can't help with that.",
    }


def test_tool_calls_reply_serialises_arguments_compactly():
    body = tool_calls_reply(
        [("call_1", "search", {"q": "a b", "n": 2}), ("call_2", "raw", '{"broken":')]
    )
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "search", "arguments": '{"q":"a b","n":2}'},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "raw", "arguments": '{"broken":'},
            },
        ],
    }
    assert json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"]) == {
        "q": "a b",
        "n": 2,
    }
    assert tool_calls_reply([], "thinking…")["choices"][0]["message"]["content"] == "thinking…"
    assert body["usage"] == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def test_empty_reply_has_no_content_and_no_tokens():
    body = empty_reply()
    assert body["choices"][0] == {
        "index": 0,
        "message": {"role": "assistant", "content": None},
        "finish_reason": "stop",
    }
    assert body["usage"]["completion_tokens"] == 0


def test_error_helpers():
    assert error_status(500) == Status(500)
    assert error_status(429, retry_after=2).headers == {"retry-after": "2"}
    assert error_status(400, message="bad").body["error"]["message"] == "bad"
    assert in_body_error("overloaded", code=529) == {
        "error": {"message": "overloaded", "type": "server_error", "code": 529}
    }
