"""The scripted OpenAI Responses server: routing, script contract, input checks, reply shapes."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from scripted.core import Delay, Raw, ScriptItem, Status
from scripted.responses import (
    ScriptedResponses,
    responses_calls,
    responses_empty,
    responses_failed,
    responses_incomplete,
    responses_refusal,
    responses_text,
)

USER = {"role": "user", "content": "hi"}
BODY = {"model": "gpt-5-mock", "input": [USER], "store": False}
REASONING = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA=="}
MESSAGE = {
    "type": "message",
    "role": "assistant",
    "content": [{"type": "output_text", "text": "Checking."}],
}


def call(call_id: str) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": "f", "arguments": "{}"}


def output(call_id: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": "ok"}


async def post(
    client: httpx.AsyncClient, server: ScriptedResponses, body: Any = BODY, **kw: Any
) -> httpx.Response:
    return await client.post(server.url + "/responses", json=body, **kw)


def text_of(resp: httpx.Response) -> str:
    return str(resp.json()["output"][0]["content"][0]["text"])


def with_input(*items: dict[str, Any], store: bool = False) -> dict[str, Any]:
    return {"model": "gpt-5-mock", "input": [USER, *items], "store": store}


# -- the shared contract ----------------------------------------------------------------------


async def test_served_in_order_the_last_repeats_and_the_url_is_v1(client):
    async with ScriptedResponses([responses_text("one"), responses_text("two")]) as server:
        assert server.url == f"http://127.0.0.1:{server.port}/v1"
        answers = [text_of(await post(client, server)) for _ in range(3)]
    assert answers == ["one", "two", "two"]
    assert server.served == 3


async def test_requests_and_headers_are_recorded(client):
    async with ScriptedResponses([responses_text("x")]) as server:
        await post(client, server, headers={"Authorization": "Bearer sk-1"})
    assert server.requests == [BODY]
    assert server.headers[0]["authorization"] == "Bearer sk-1"


async def test_status_delay_and_raw_items_work(client):
    script: list[ScriptItem] = [
        Status(429, headers={"retry-after": "1"}),
        Delay(0.01, responses_text("late")),
        Raw(502, "<html>bad gateway</html>", "text/html"),
    ]
    async with ScriptedResponses(script) as server:
        limited = await post(client, server)
        late = await post(client, server)
        raw = await post(client, server)
    assert limited.status_code == 429
    assert limited.headers["retry-after"] == "1"
    assert limited.json() == {
        "error": {"message": "scripted 429 error", "type": "scripted", "param": None, "code": 429}
    }
    assert text_of(late) == "late"
    assert (raw.status_code, raw.text) == (502, "<html>bad gateway</html>")


async def test_a_delay_times_the_client_out(client):
    async with ScriptedResponses([Delay(2.0, responses_text("late")), responses_text("next")]) as s:
        with pytest.raises(httpx.ReadTimeout):
            await post(client, s, timeout=0.1)
        assert text_of(await post(client, s)) == "next"


async def test_other_paths_are_404(client):
    async with ScriptedResponses([responses_text("x")]) as server:
        chat = await client.post(server.url + "/chat/completions", json=BODY)
    assert chat.status_code == 404
    assert server.requests == []
    assert server.served == 0


async def test_a_body_that_is_not_json_is_refused(client):
    async with ScriptedResponses([responses_text("x")]) as server:
        resp = await client.post(server.url + "/responses", content=b"{nope")
    assert resp.status_code == 400
    assert server.served == 0


# -- input checks -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "items",
    [
        [],
        [call("call_1"), output("call_1")],
        [REASONING, MESSAGE, call("call_1"), call("call_2"), output("call_1"), output("call_2")],
        [REASONING, call("call_1"), output("call_1")],
        [call("call_1"), call("call_2"), output("call_2"), output("call_1")],  # any order
        [MESSAGE, {"role": "user", "content": "more"}],
        [{"type": "reasoning", "id": "rs_2", "summary": []}, MESSAGE],  # store: true below
    ],
)
async def test_well_formed_input_is_served(client, items):
    async with ScriptedResponses([responses_text("ok")]) as server:
        resp = await post(client, server, with_input(*items, store=True))
    assert resp.status_code == 200, resp.text
    assert server.served == 1


async def test_a_string_input_is_served(client):
    async with ScriptedResponses([responses_text("ok")]) as server:
        resp = await post(client, server, {"model": "m", "input": "hello"})
    assert resp.status_code == 200


def refused(message: str, status: int = 400) -> tuple[int, dict[str, Any]]:
    error = {"message": message, "type": "invalid_request_error", "param": "input", "code": None}
    return status, {"error": error}


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        (
            [call("call_1")],
            refused("No tool output found for function call call_1."),
        ),
        (
            [call("call_1"), call("call_2"), output("call_1")],
            refused("No tool output found for function call call_2."),
        ),
        (
            [output("call_9")],
            refused("No tool call found for function call output with call_id call_9."),
        ),
        (
            [output("call_1"), call("call_1")],  # the first offending item is named
            refused("No tool call found for function call output with call_id call_1."),
        ),
        (
            [REASONING],
            refused(
                "Item 'rs_1' of type 'reasoning' was provided without its required following item."
            ),
        ),
        (
            [REASONING, {"role": "user", "content": "again"}],
            refused(
                "Item 'rs_1' of type 'reasoning' was provided without its required following item."
            ),
        ),
        (
            [call("call_1"), REASONING, output("call_1")],
            refused(
                "Item 'rs_1' of type 'reasoning' was provided without its required following item."
            ),
        ),
        (
            [{"type": "reasoning", "id": "rs_2", "summary": []}, MESSAGE],
            refused(
                "Item with id 'rs_2' not found. Items are not persisted when `store` is set to "
                "false. Try again with `store` set to true, or remove this item from your input.",
                404,
            ),
        ),
    ],
)
async def test_broken_sequencing_is_refused_without_consuming_the_script(client, items, expected):
    async with ScriptedResponses([responses_text("ok")]) as server:
        resp = await post(client, server, with_input(*items))
        assert (resp.status_code, resp.json()) == expected
        assert server.served == 0
        assert len(server.requests) == 1  # recorded all the same
        assert (await post(client, server)).status_code == 200


@pytest.mark.parametrize("body", [{"model": "m"}, {"model": "m", "input": [1]}, [1, 2]])
async def test_a_body_without_an_input_list_is_refused(client, body):
    async with ScriptedResponses([responses_text("ok")]) as server:
        resp = await post(client, server, body)
    assert resp.status_code == 400
    assert resp.json()["error"]["type"] == "invalid_request_error"
    assert server.served == 0


# -- reply builders ---------------------------------------------------------------------------


def test_responses_text_has_the_response_shape():
    body = responses_text("hello", reasoning=("rs_1", "enc"), cached_tokens=3)
    assert list(body) == [
        "id",
        "object",
        "created_at",
        "status",
        "model",
        "output",
        "usage",
        "incomplete_details",
        "error",
    ]
    assert body["id"].startswith("resp_")
    assert (body["object"], body["status"], body["incomplete_details"]) == (
        "response",
        "completed",
        None,
    )
    assert [i["type"] for i in body["output"]] == ["reasoning", "message"]
    assert body["output"][0]["encrypted_content"] == "enc"
    assert body["output"][1]["content"][0] == {
        "type": "output_text",
        "text": "hello",
        "annotations": [],
    }
    assert body["usage"]["input_tokens_details"] == {"cached_tokens": 3}
    assert body["usage"]["total_tokens"] == 15


def test_responses_calls_orders_reasoning_message_then_calls():
    body = responses_calls(
        [("call_A", "get_weather", {"city": "Paris"}), ("call_B", "f", '{"broken"')],
        "Checking.",
        ("rs_1", "gAAA"),
    )
    kinds = [i["type"] for i in body["output"]]
    assert kinds == ["reasoning", "message", "function_call", "function_call"]
    a, b = body["output"][2:]
    assert a == {
        "type": "function_call",
        "id": "fc_A",
        "call_id": "call_A",
        "name": "get_weather",
        "arguments": '{"city":"Paris"}',
        "status": "completed",
    }
    assert b["arguments"] == '{"broken"'
    assert [i["type"] for i in responses_calls([("c", "f", {})])["output"]] == ["function_call"]


def test_empty_incomplete_refusal_and_failed_shapes():
    empty = responses_empty()
    assert (empty["status"], empty["output"], empty["usage"]["output_tokens"]) == (
        "completed",
        [],
        0,
    )
    cut = responses_incomplete("max_output_tokens", "Let", [("call_1", "f", '{"x"')])
    assert cut["status"] == "incomplete"
    assert cut["incomplete_details"] == {"reason": "max_output_tokens"}
    assert [i["status"] for i in cut["output"]] == ["incomplete", "incomplete"]
    assert responses_incomplete("content_filter")["output"] == []
    refusal = responses_refusal("No.")
    assert refusal["output"][0]["content"] == [{"type": "refusal", "refusal": "No."}]
    failed = responses_failed("rate_limit_exceeded", "slow down")
    assert failed["status"] == "failed"
    assert failed["error"] == {"code": "rate_limit_exceeded", "message": "slow down"}
    assert failed["output"] == []
