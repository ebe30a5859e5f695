"""The scripted Ollama server: Ollama's endpoint, error shape, checks and reply bodies."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from cells.llm.dialects.base import Tool
from cells.llm.dialects.ollama import OllamaChat
from scripted import Delay, Raw, ScriptItem, Status
from scripted.ollama import (
    ScriptedOllama,
    ollama_calls,
    ollama_empty,
    ollama_error,
    ollama_length,
    ollama_text,
)

USER = {"role": "user", "content": "hi"}
BODY = {"model": "llama3.2", "messages": [USER], "stream": False}
OLLAMA = OllamaChat()


async def post(
    client: httpx.AsyncClient, server: ScriptedOllama, body: Any = BODY, **kw: Any
) -> httpx.Response:
    return await client.post(server.url + "/api/chat", json=body, **kw)


def assistant_with_calls(*names: str) -> dict[str, Any]:
    message: dict[str, Any] = ollama_calls([(n, {"q": n}) for n in names])["message"]
    return message


def tool(name: str) -> dict[str, Any]:
    return {"role": "tool", "tool_name": name, "content": "ok"}


# -- server ---------------------------------------------------------------------------------


async def test_the_url_is_the_server_root_on_loopback() -> None:
    async with ScriptedOllama([ollama_text("x")]) as server:
        assert server.url == f"http://127.0.0.1:{server.port}"
        assert OLLAMA.url(server.url, "m") == server.url + "/api/chat"


async def test_replies_are_served_in_order_and_the_last_one_repeats(
    client: httpx.AsyncClient,
) -> None:
    async with ScriptedOllama([ollama_text("one"), ollama_text("two")]) as server:
        answers = [(await post(client, server)).json()["message"]["content"] for _ in range(3)]
        assert (answers, server.served) == (["one", "two", "two"], 3)
        assert server.requests == [BODY] * 3


async def test_headers_are_recorded(client: httpx.AsyncClient) -> None:
    async with ScriptedOllama([ollama_text("x")]) as server:
        await post(client, server, headers=OLLAMA.headers("proxy-key"))
        await post(client, server, headers=OLLAMA.headers(""))
    assert server.headers[0]["authorization"] == "Bearer proxy-key"
    assert "authorization" not in server.headers[1]


async def test_another_path_is_a_404_in_ollamas_error_shape(client: httpx.AsyncClient) -> None:
    async with ScriptedOllama([ollama_text("x")]) as server:
        resp = await client.post(server.url + "/v1/chat/completions", json=BODY)
        assert resp.status_code == 404
        assert list(resp.json()) == ["error"]
        assert isinstance(resp.json()["error"], str)
        assert server.served == 0


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"model": "m", "messages": [USER]}, "stream must be false"),
        ({**BODY, "stream": True}, "stream must be false"),
        ({"messages": [USER], "stream": False}, "model is required"),
        ({"model": "m", "messages": "hi", "stream": False}, "messages must be a list"),
        ([1, 2], "cannot unmarshal"),
    ],
)
async def test_requests_ollama_cannot_serve_here_are_400s_without_consuming_the_script(
    client: httpx.AsyncClient, body: Any, words: str
) -> None:
    async with ScriptedOllama([ollama_text("x")]) as server:
        resp = await post(client, server, body)
        assert resp.status_code == 400
        assert words in resp.json()["error"]
        assert server.served == 0
        assert server.requests == [body]


async def test_a_body_that_is_not_json_is_a_400(client: httpx.AsyncClient) -> None:
    async with ScriptedOllama([ollama_text("x")]) as server:
        resp = await client.post(server.url + "/api/chat", content=b"{nope")
    assert resp.status_code == 400
    assert resp.json() == {"error": "request body is not valid JSON"}


@pytest.mark.parametrize(
    "messages",
    [
        [USER, assistant_with_calls("f", "g"), tool("f")],
        [USER, assistant_with_calls("f", "g"), tool("f"), USER],
        [USER, assistant_with_calls("f", "g"), tool("f"), tool("h")],
        [USER, assistant_with_calls("f", "g"), tool("f"), tool("f")],
        [USER, assistant_with_calls("f"), {"role": "tool", "content": "no name"}],
    ],
)
async def test_calls_must_each_be_answered_by_a_tool_message_naming_them(
    client: httpx.AsyncClient, messages: list[Any]
) -> None:
    async with ScriptedOllama([ollama_text("x")]) as server:
        resp = await post(client, server, {**BODY, "messages": messages})
        assert resp.status_code == 400
        assert "tool" in resp.json()["error"]
        assert server.served == 0


async def test_answered_calls_in_any_order_are_accepted(client: httpx.AsyncClient) -> None:
    messages = [USER, assistant_with_calls("f", "g", "f"), tool("g"), tool("f"), tool("f"), USER]
    async with ScriptedOllama([ollama_text("x")]) as server:
        resp = await post(client, server, {**BODY, "messages": messages})
        assert resp.status_code == 200
        assert server.served == 1


async def test_status_delay_and_raw_items_work(client: httpx.AsyncClient) -> None:
    script: list[ScriptItem] = [
        ollama_error(404, 'model "nope" not found, try pulling it first'),
        ollama_error(503, retry_after=0.5),
        Status(500),
        Raw(502, "<html>bad gateway</html>", "text/html"),
        Delay(5.0, ollama_text("late")),
        ollama_text("after"),
    ]
    async with ScriptedOllama(script) as server:
        missing = await post(client, server)
        assert missing.status_code == 404
        assert OLLAMA.in_body_error(missing.json()) == (404, missing.json()["error"])
        busy = await post(client, server)
        assert (busy.status_code, busy.headers["retry-after"]) == (503, "0.5")
        assert busy.json() == {"error": "scripted 503 error"}
        assert (await post(client, server)).json() == {"error": "scripted 500 error"}
        raw = await post(client, server)
        assert (raw.status_code, raw.text) == (502, "<html>bad gateway</html>")
        with pytest.raises(httpx.ReadTimeout):
            await post(client, server, timeout=0.2)
        after = await post(client, server)
        assert after.json()["message"]["content"] == "after"


# -- reply bodies ---------------------------------------------------------------------------


def test_a_text_reply_has_ollamas_fields() -> None:
    body = ollama_text("hello", model="qwen3", created_at="T", prompt_eval_count=3, eval_count=2)
    assert body["message"] == {"role": "assistant", "content": "hello"}
    assert (body["done"], body["done_reason"], body["created_at"]) == (True, "stop", "T")
    assert (body["prompt_eval_count"], body["eval_count"], body["model"]) == (3, 2, "qwen3")
    assert list(body)[:5] == ["model", "created_at", "message", "done_reason", "done"]


def test_a_calls_reply_has_no_ids_and_object_arguments() -> None:
    body = ollama_calls([("f", {"x": 1}), ("g", '{"y":2}'), ("h", "{broken")], thinking="t")
    message = body["message"]
    assert message["content"] == ""
    assert message["thinking"] == "t"
    assert message["tool_calls"] == [
        {"function": {"name": "f", "arguments": {"x": 1}}},
        {"function": {"name": "g", "arguments": {"y": 2}}},
        {"function": {"name": "h", "arguments": "{broken"}},
    ]
    assert body["done_reason"] == "stop"
    assert ollama_calls([("f", {})], "Checking.")["message"]["content"] == "Checking."


def test_the_empty_reply_is_a_load_with_nothing_generated() -> None:
    body = ollama_empty()
    assert body["done_reason"] == "load"
    assert body["message"] == {"role": "assistant", "content": ""}
    assert "eval_count" not in body
    assert "prompt_eval_count" not in body
    assert OLLAMA.parse(body).empty


def test_the_length_reply_is_cut_off() -> None:
    body = ollama_length("Let me", [("f", {})])
    assert (body["done_reason"], body["eval_count"]) == ("length", 512)
    assert OLLAMA.parse(body).calls == []


def test_created_at_is_fresh_and_increasing_unless_given() -> None:
    stamps = [ollama_text("x")["created_at"] for _ in range(50)]
    assert stamps == sorted(stamps)
    assert len(set(stamps)) == 50
    assert stamps[0].endswith("Z")
    assert len(stamps[0]) == len("2026-05-04T09:12:33.482913274Z")


async def test_dialect_bodies_pass_the_servers_checks_over_two_rounds(
    client: httpx.AsyncClient,
) -> None:
    turns: list[Any] = [{"origin": "user", "type": "text", "text": "go"}]
    script = [ollama_calls([("f", {"q": 1}), ("g", {"q": 2})], "On it."), ollama_text("done")]
    tools = [Tool("f", "F.", {"type": "object"}), Tool("g", None, {"type": "object"})]
    async with ScriptedOllama(script) as server:
        for _ in range(2):
            body = OLLAMA.request(
                model="m",
                prompt="Be brief.",
                tools=tools,
                turns=turns,
                max_tokens=32,
                temperature=0.1,
                native=lambda ids: None,
                extra={},
            )
            resp = await post(client, server, body)
            assert resp.status_code == 200, resp.text
            reply = OLLAMA.parse(resp.json())
            turns += reply.turns
            turns += [
                {"origin": "tool", "type": "tool_result", "id": i, "text": "ok"}
                for i in reversed(reply.calls)
            ]
    assert reply.text == "done"
    assert [m["role"] for m in server.requests[1]["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
    ]
