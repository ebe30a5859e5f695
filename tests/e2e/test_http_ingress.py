"""What enters the colony over HTTP is valid, bounded JSON, and a 202 means committed.

Refused at every JSON ingress (``POST /messages``, ``POST /llm/chat``) with a typed 400 or 422
naming the problem, before anything reaches ``colony.db``: a lone surrogate anywhere in the body
(a text, a context key), bytes that are not UTF-8, NaN or Infinity, nesting past 128 levels,
a UBF field of the wrong JSON type. A non-UTF-8 ``Idempotency-Key`` or query string is a 400
too. No endpoint serves non-standard JSON back. Past the API's in-flight byte bound, or when
the colony's admission says no, ingress answers 429/503 with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from colony.admission import Refusal
from colony.effects import LogRow
from colony.envelope import source_message
from colony.httpguard import ServerLimits
from colony.testing import ColonyHarness, ScriptedAnthropic, anthropic_text
from tests.api_client import Api, served
from tests.conftest import TreeFactory, cell, hive

USER = {"messages": [{"origin": "user", "type": "text", "text": "hi"}]}


@pytest.fixture
async def api(make_tree: TreeFactory) -> AsyncIterator[Api]:
    async with ScriptedAnthropic([anthropic_text("ok")]) as model:
        tree = make_tree(
            {
                "main/config.json": hive({"from": ".", "to": "./sink"}),
                "main/sink/config.json": cell(
                    "code", {"script_inline": "import sys; sys.stdin.read(); print('[]')"}
                ),
                "main/brain/config.json": cell(
                    "llm", {"provider": "anthropic", "model": "claude-x", "base_url": model.url}
                ),
            }
        )
        limits = ServerLimits(max_inflight_bytes=4096)
        async with ColonyHarness(tree) as colony, served(colony, limits=limits) as api:
            yield api


def post(api: Api, path: str, raw: bytes, **headers: Any) -> Any:
    return api.client.post(
        path, content=raw, headers={"Content-Type": "application/json", **headers}
    )


SURROGATES = [
    b'{"target": "/", "body": {"messages": [{"origin": "user", "type": "text", "text": "\\ud800"}]}}',
    b'{"target": "/", "body": {"messages": []}, "headers": {"\\udfff key": 1}}',
    b'{"target": "/", "body": {"messages": []}, "hop": {"x": ["ok", "\\ud83d"]}}',
    b'{"target": "/\\udc00", "body": {"messages": []}}',
]


async def test_a_lone_surrogate_in_a_posted_body_is_refused_with_400(api: Api) -> None:
    for raw in SURROGATES:  # in a text, a context key, the hop, the target
        response = await post(api, "/messages", raw)
        assert (response.status_code, response.json()["error"]) == (400, "invalid_json")
        assert "lone surrogate" in response.json()["detail"]
    await api.nothing_entered()
    # The writer is healthy afterwards: a good message still commits and is logged.
    good = await api.client.post("/messages", json={"target": "/", "body": USER})
    assert good.status_code == 202
    await api.colony.settle()
    assert len(await api.colony.message_log()) == 2


async def test_a_lone_surrogate_posted_to_llm_chat_is_refused_with_400(api: Api) -> None:
    response = await post(api, "/llm/chat?cell=/brain", b'{"prompt": "\\ud800"}')
    assert (response.status_code, response.json()["error"]) == (400, "invalid_json")


async def test_a_body_that_is_not_utf8_is_refused_with_400(api: Api) -> None:
    raw = b'{"target": "/", "body": {"messages": [{"origin": "user", "type": "text", "text": "\xed\xa0\x80"}]}}'
    for path in ("/messages", "/llm/chat?cell=/brain"):
        response = await post(api, path, raw)
        assert (response.status_code, response.json()["error"]) == (400, "invalid_json")
        assert "not UTF-8" in response.json()["detail"]
    await api.nothing_entered()


async def test_a_non_utf8_idempotency_key_is_refused_with_400(api: Api) -> None:
    response = await api.client.post(
        "/messages",
        json={"target": "/", "body": USER},
        headers={b"Idempotency-Key": b"order-\xff\xfe"},
    )
    assert (response.status_code, response.json()["error"]) == (400, "invalid_idempotency_key")
    assert "UTF-8" in response.json()["detail"]
    await api.nothing_entered()


async def test_a_query_string_that_is_not_utf8_is_400_not_a_silent_replacement(api: Api) -> None:
    for path in ("/colony/registry?path=%ED%A0%80", "/colony/dead_letters/1/replay?x=%FF"):
        method = "POST" if "replay" in path else "GET"
        response = await api.client.request(method, path)
        assert (response.status_code, response.json()["error"]) == (400, "bad_query")


async def test_json_nested_past_128_levels_is_a_typed_400_on_messages_and_llm_chat(
    api: Api,
) -> None:
    for depth in (129, 970, 100_000):
        nested = b"[" * depth + b"]" * depth
        bodies = {
            "/messages": b'{"target": "/", "body": {"messages": [], "deep": ' + nested + b"}}",
            "/llm/chat?cell=/brain": b'{"prompt": "hi", "system": ' + nested + b"}",
        }
        for path, raw in bodies.items():
            response = await post(api, path, raw)
            assert (response.status_code, response.json()["error"]) == (400, "invalid_json")
            assert "deeper than 128 levels" in response.json()["detail"]
    await api.nothing_entered()


async def test_nan_and_infinity_are_refused_at_ingress(api: Api) -> None:
    for number in (b"NaN", b"Infinity", b"-Infinity", b"1e400"):
        raw = b'{"target": "/", "body": {"messages": [], "x": [' + number + b"]}}"
        response = await post(api, "/messages", raw)
        assert (response.status_code, response.json()["error"]) == (400, "invalid_json")
        chat = await post(api, "/llm/chat?cell=/brain", b'{"prompt": "hi", "x": ' + number + b"}")
        assert chat.status_code == 400
    await api.nothing_entered()


def strict(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


async def test_no_endpoint_serves_nan_back_as_non_standard_json(api: Api) -> None:
    # A Python cell may emit a float NaN; the message log keeps it. Readers get standard JSON.
    message = source_message("/sink", {"messages": [], "score": float("nan")})
    api.colony.colony.db.write([LogRow(message, "@external", "/sink", message.ttl)])
    await api.colony.settle()
    for path in ("/colony/messages", f"/colony/trace?trace_id={message.trace_id}"):
        response = await api.client.get(path)
        assert response.status_code == 200
        rows = strict(response.text)
        [row] = rows["messages" if "messages" in rows else "trace"]
        assert row["body"]["score"] is None


async def test_a_ubf_field_of_the_wrong_type_is_a_422_not_a_500(api: Api) -> None:
    for turn in [
        {"origin": {"role": "user"}, "type": "text"},
        {"origin": ["user"], "type": "text"},
        {"origin": "user", "type": {"k": 1}},
        {"origin": "user", "type": "text", "text": ["a"]},
    ]:
        response = await api.client.post(
            "/messages", json={"target": "/", "body": {"messages": [turn]}}
        )
        assert (response.status_code, response.json()["error"]) == (422, "invalid_ubf_body")
        assert response.json()["detail"].startswith("messages[0].")


async def test_llm_chat_without_a_cell_says_so_without_none(api: Api) -> None:
    missing = await api.client.post("/llm/chat", json={"prompt": "hi"})
    assert missing.status_code == 400
    assert "None" not in missing.text
    unknown = await api.client.post("/llm/chat?cell=/nope", json={"prompt": "hi"})
    assert unknown.status_code == 404
    assert unknown.json()["detail"].startswith("no llm cell at /nope")
    typed = await api.client.post("/llm/chat?cell=/brain", json={"prompt": 5})
    assert typed.status_code == 400
    assert "Value error" not in typed.text
    assert "Input should" not in typed.text


async def test_requests_past_the_in_flight_byte_bound_answer_429_with_retry_after(
    api: Api,
) -> None:
    # One request holds 4090 bytes of the 4096 bound while its body trickles in.
    _reader, writer = await asyncio.open_connection("127.0.0.1", api.port)
    writer.write(
        b"POST /messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 4090\r\n\r\n{"
    )
    await writer.drain()
    try:
        async with asyncio.timeout(10):
            while True:  # until the server has taken the first request in
                response = await api.client.post("/messages", json={"target": "/", "body": USER})
                if response.status_code == 429:
                    break
                assert response.status_code == 202
        assert response.json()["error"] == "overloaded"
        assert int(response.headers["Retry-After"]) >= 1
        assert (await api.client.get("/health")).status_code == 200  # no body, never shed
    finally:
        writer.close()
    await writer.wait_closed()
    async with asyncio.timeout(10):  # the bytes come back once the server sees the close
        while True:
            again = await api.client.post("/messages", json={"target": "/", "body": USER})
            if again.status_code == 202:
                break


async def test_an_admission_refusal_is_answered_with_its_status_and_retry_after(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[int] = []

    def full(nbytes: int = 0) -> Refusal:
        asked.append(nbytes)
        return Refusal(503, "storage_unavailable", "the disk is full", 7)

    monkeypatch.setattr(api.colony.colony, "admission", full)
    response = await api.client.post("/messages", json={"target": "/", "body": USER})
    assert response.status_code == 503
    assert response.json() == {"error": "storage_unavailable", "detail": "the disk is full"}
    assert response.headers["Retry-After"] == "7"
    assert asked
    assert asked[0] > 0
    await api.nothing_entered()
