"""The web_search cell against a loopback search endpoint."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from cells.text import TRUNCATION_MARKER
from cells.web import WEB_SEARCH
from cells.web.search import WebSearchCell, WebSearchParams, search_url, shape_results
from colony.testing import ColonyHarness, spec_for
from tests.cells.web import (
    LocalServer,
    Reply,
    Request,
    call,
    closed_port,
    error_of,
    fixed,
    redirect,
    turn_of,
)
from tests.conftest import CONTRACT, TreeFactory, hive


def results(n: int) -> list[dict[str, str]]:
    return [
        {"title": f"t{i}", "url": f"https://example.org/{i}", "snippet": f"s{i}"} for i in range(n)
    ]


@asynccontextmanager
async def search_cell(endpoint: str, **params: Any) -> AsyncIterator[WebSearchCell]:
    cell = WebSearchCell(spec_for("/search", {"endpoint": endpoint, **params}))
    try:
        yield cell
    finally:
        await cell.close()


async def search(endpoint: str, query: str = "cats", **params: Any) -> dict[str, Any]:
    async with search_cell(endpoint, **params) as cell:
        return await cell.answer(call({"query": query}))


def answering(body: bytes | str, status: int = 200) -> LocalServer:
    raw = body.encode() if isinstance(body, str) else body
    return LocalServer(fixed(Reply(status, [("Content-Type", "application/json")], raw)))


# -- through a colony -----------------------------------------------------------------------


def search_tree(endpoint: str, **params: Any) -> dict[str, Any]:
    return {
        "main/config.json": hive(
            {"from": ".", "to": "./searcher"}, {"from": "./searcher", "to": "/sink"}
        ),
        "main/searcher/config.json": {
            "cell": {"type": "web_search"},
            "params": {"endpoint": endpoint, **params},
            "contract": CONTRACT,
        },
    }


async def test_a_conforming_answer_passes_through_byte_for_byte(make_tree: TreeFactory) -> None:
    body = '{ "results": [ {"url": "u", "title": "Ünïcode"} ],\n  "z": 1 }'
    async with answering(body) as server:
        tree = make_tree(search_tree(server.url("/search"), api_key="sk-test"))
        async with ColonyHarness(
            tree, capture=["/sink"], cell_types={"web_search": WEB_SEARCH}
        ) as colony:
            await colony.send("/searcher", call({"query": "grüne katzen & co"}, "s-1"))
            await colony.settle()
            [reply] = colony.captured("/sink")
            assert await colony.dead_letters() == []
    hop = reply.headers.hop
    assert hop == {
        "operation": "web_search",
        "result_count": 1,
        "duration_ms": hop["duration_ms"],
        "bytes": len(body.encode()),
    }
    assert reply.body == {
        "messages": [{"origin": "tool", "type": "tool_result", "text": body, "id": "s-1"}]
    }
    [request] = server.requests
    assert request.method == "GET"
    assert urlsplit(request.target).path == "/search"
    assert parse_qs(urlsplit(request.target).query) == {"q": ["grüne katzen & co"]}
    assert request.headers["authorization"] == "Bearer sk-test"


# -- result handling -------------------------------------------------------------------------


async def test_a_long_list_is_trimmed_and_says_so_inside_the_json() -> None:
    body = json.dumps({"results": results(12), "query": "cats"}, indent=2)
    async with answering(body) as server:
        reply = await search(server.url("/"))
    text = turn_of(reply)["text"]
    assert json.loads(text) == {
        "results": results(10),
        "query": "cats",
        "truncated": True,
        "total_results": 12,
    }
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    assert reply["header"]["result_count"] == 12
    assert reply["header"]["bytes"] == len(body.encode())
    assert reply["header"]["truncated"] is True


async def test_max_results_sets_the_trim() -> None:
    async with answering(json.dumps({"results": results(3)})) as server:
        reply = await search(server.url("/"), max_results=2)
    assert [r["title"] for r in json.loads(turn_of(reply)["text"])["results"]] == ["t0", "t1"]
    assert reply["header"]["result_count"] == 3


async def test_a_list_of_exactly_max_results_is_untouched() -> None:
    body = json.dumps({"results": results(10)})
    async with answering(body) as server:
        reply = await search(server.url("/"))
    assert turn_of(reply)["text"] == body
    assert "truncated" not in reply["header"]


@pytest.mark.parametrize(
    "body",
    [
        "<html>not json</html>",
        '{"results": {"not": "a list"}}',
        '{"hits": [1, 2, 3]}',
        "[1, 2, 3]",
        '{"results": [NaN]}',
        "",
    ],
)
async def test_a_non_conforming_body_passes_through_with_zero_results(body: str) -> None:
    async with answering(body) as server:
        reply = await search(server.url("/"))
    assert turn_of(reply)["text"] == body
    assert reply["header"]["result_count"] == 0
    assert "finish_reason" not in reply["header"]


async def test_the_byte_cap_cuts_visibly_after_the_trim() -> None:
    body = json.dumps({"results": results(30)})
    async with answering(body) as server:
        reply = await search(server.url("/"), max_bytes=100)
    text = turn_of(reply)["text"]
    trimmed = json.dumps(
        {"results": results(10), "total_results": 30, "truncated": True},
        sort_keys=True,
        separators=(",", ":"),
    )
    assert text == trimmed[:100] + TRUNCATION_MARKER.format(total=len(trimmed))
    assert reply["header"]["bytes"] == len(body)
    assert reply["header"]["result_count"] == 30
    assert reply["header"]["truncated"] is True


async def test_invalid_utf8_is_replaced_before_anything_else() -> None:
    async with answering(b'{"results": ["\xff"]}') as server:
        reply = await search(server.url("/"))
    assert turn_of(reply)["text"] == '{"results": ["\ufffd"]}'
    assert reply["header"]["result_count"] == 1
    assert reply["header"]["bytes"] == len('{"results": ["\ufffd"]}'.encode())


async def test_an_answer_past_the_read_ceiling_is_cut_unparsed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("cells.web.search.READ_CEILING", 1000)
    body = json.dumps({"results": results(200)})
    async with answering(body) as server:
        reply = await search(server.url("/"), max_bytes=50)
    assert reply["header"]["result_count"] == 0
    assert reply["header"]["bytes"] == len(body)  # the declared Content-Length
    assert reply["header"]["truncated"] is True
    assert turn_of(reply)["text"] == body[:50] + TRUNCATION_MARKER.format(total=len(body))


def test_shaping_leaves_a_lone_surrogate_body_alone() -> None:
    text = '{"results": ["\\ud800", 2, 3]}'
    assert shape_results(text, 1) == (text, 0, False)


# -- the request -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        ("http://h/search", "http://h/search?q=a+b"),
        ("http://h/search?format=json", "http://h/search?format=json&q=a+b"),
        ("http://h/search?", "http://h/search?q=a+b"),
        ("http://h/search?x=1&", "http://h/search?x=1&q=a+b"),
    ],
)
def test_the_query_is_appended_to_the_endpoint(endpoint: str, expected: str) -> None:
    assert search_url(endpoint, "a b") == expected


async def test_no_authorization_header_without_a_key() -> None:
    async with answering("{}") as server:
        await search(server.url("/s?format=json"), api_key="")
        await search(server.url("/s?format=json"))
    assert all("authorization" not in r.headers for r in server.requests)
    assert parse_qs(urlsplit(server.requests[0].target).query) == {
        "format": ["json"],
        "q": ["cats"],
    }


async def test_redirects_of_the_endpoint_are_followed() -> None:
    def handler(request: Request) -> Reply:
        if request.target.startswith("/old"):
            return redirect("/new" + request.target[4:])
        return Reply(body=json.dumps({"results": results(2)}).encode())

    async with LocalServer(handler) as server:
        reply = await search(server.url("/old"))
    assert reply["header"]["result_count"] == 2
    assert [urlsplit(r.target).path for r in server.requests] == ["/old", "/new"]


# -- errors ----------------------------------------------------------------------------------


async def test_a_non_2xx_answer_is_an_http_error_naming_the_status() -> None:
    async with answering('{"error": "bad key"}', status=401) as server:
        reply = await search(server.url("/"))
    assert error_of(reply) == (
        "http_error",
        'web_search endpoint answered HTTP 401 Unauthorized: {"error": "bad key"}',
    )
    assert reply["header"]["http_status"] == 401
    assert reply["header"]["operation"] == "web_search"
    assert turn_of(reply)["id"] == "call-1"


SEARCH_KEY = "srch-Wq3Zk81LmPx0"


async def test_an_endpoint_echoing_the_bearer_key_in_its_error_body_is_quoted_redacted(
    make_tree: TreeFactory,
) -> None:
    """Issue 15 item 15: the excerpt of an error body goes to the message log and the model,
    so the key it echoes (and anything shaped like a secret) is redacted first."""
    echo = json.dumps(
        {
            "error": f"invalid key {SEARCH_KEY}",
            "received": {"authorization": f"Bearer {SEARCH_KEY}"},
            "hint": "try sk-live-0a1b2c3d4e5f6a7b8c9d",
        }
    )
    async with answering(echo, status=403) as server:
        tree = make_tree(search_tree(server.url("/search"), api_key=SEARCH_KEY))
        async with ColonyHarness(
            tree, capture=["/sink"], cell_types={"web_search": WEB_SEARCH}
        ) as colony:
            trace = await colony.send("/searcher", call({"query": "cats"}))
            await colony.settle()
            [reply] = colony.captured("/sink")
            rows = await colony.message_log(trace)
    assert server.requests[0].headers["authorization"] == f"Bearer {SEARCH_KEY}"
    code, text = error_of({"header": reply.headers.hop, "messages": reply.body["messages"]})
    assert code == "http_error"
    assert text.startswith("web_search endpoint answered HTTP 403 Forbidden: ")
    assert "invalid key [redacted]" in text
    assert "sk-live" not in text
    for where in (text, repr(rows), json.dumps(colony.records, default=str)):
        assert SEARCH_KEY not in where


async def test_a_successful_answer_never_quotes_the_cells_own_key() -> None:
    async with answering(f'{{"results": [], "echo": "{SEARCH_KEY}"}}') as server:
        reply = await search(server.url("/"), api_key=SEARCH_KEY)
    assert turn_of(reply)["text"] == '{"results": [], "echo": "[redacted]"}'


async def test_a_server_error_without_a_body_is_an_http_error_too() -> None:
    async with answering(b"", status=503) as server:
        reply = await search(server.url("/"))
    assert error_of(reply) == (
        "http_error",
        "web_search endpoint answered HTTP 503 Service Unavailable",
    )


@pytest.mark.parametrize(
    ("args", "text"),
    [
        ({}, "args.query missing or not a string"),
        ({"query": ["x"]}, "args.query missing or not a string"),
        ({"query": ""}, "args.query is empty"),
    ],
)
async def test_a_bad_query_is_invalid_input_on_the_call_id(args: Any, text: str) -> None:
    async with answering("{}") as server, search_cell(server.url("/")) as cell:
        reply = await cell.answer(call(args))
    assert error_of(reply) == ("invalid_input", text)
    assert turn_of(reply)["id"] == "call-1"
    assert server.requests == []


async def test_a_call_that_is_not_json_is_invalid_input_on_its_id() -> None:
    async with search_cell("http://127.0.0.1:9/") as cell:
        reply = await cell.answer(
            {"messages": [{"origin": "assistant", "type": "tool_call", "id": "x", "text": "{"}]}
        )
    code, text = error_of(reply)
    assert code == "invalid_input"
    assert text.startswith("tool_call.text is not valid JSON: ")
    assert turn_of(reply)["id"] == "x"


async def test_an_unreachable_endpoint_is_an_io_error_that_does_not_quote_the_url() -> None:
    endpoint = f"http://127.0.0.1:{closed_port()}/search?key=secret"
    code, text = error_of(await search(endpoint))
    assert code == "io_error"
    assert text.startswith("web_search request failed: ")
    assert "secret" not in text


async def test_a_slow_endpoint_times_out() -> None:
    async with LocalServer(fixed(Reply(hang=True))) as server:
        started = time.perf_counter()
        reply = await search(server.url("/"), external_timeout_ms=1500)
        elapsed = time.perf_counter() - started
    assert error_of(reply) == ("timeout", "web_search timed out after 1.5s")
    assert 1.4 < elapsed < 6


async def test_searches_run_concurrently_on_one_cell() -> None:
    async def slow(request: Request) -> Reply:
        await asyncio.sleep(0.2)
        return Reply(body=json.dumps({"results": results(1)}).encode())

    async with LocalServer(slow) as server, search_cell(server.url("/")) as cell:
        started = time.perf_counter()
        replies = await asyncio.gather(*(cell.answer(call({"query": f"q{i}"})) for i in range(8)))
        elapsed = time.perf_counter() - started
    assert [r["header"]["result_count"] for r in replies] == [1] * 8
    assert elapsed < 1.5


# -- params ----------------------------------------------------------------------------------


def test_the_defaults() -> None:
    assert WebSearchParams(endpoint="http://h/").model_dump() == {
        "endpoint": "http://h/",
        "api_key": None,
        "external_timeout_ms": 15_000,
        "max_concurrency": 8,
        "max_results": 10,
        "max_bytes": 262_144,
    }
    assert WEB_SEARCH.default_max_concurrency == 8


@pytest.mark.parametrize(
    ("params", "key"),
    [
        ({}, "endpoint"),
        ({"endpoint": ""}, "endpoint"),
        ({"endpoint": "ftp://h/x"}, "endpoint"),
        ({"endpoint": "/relative"}, "endpoint"),
        ({"endpoint": "http://h/", "max_concurrency": 0}, "max_concurrency"),
        ({"endpoint": "http://h/", "external_timeout_ms": 0}, "external_timeout_ms"),
        ({"endpoint": "http://h/", "max_results": 0}, "max_results"),
        ({"endpoint": "http://h/", "max_bytes": 0}, "max_bytes"),
        ({"endpoint": "http://h/", "api_key": 5}, "api_key"),
        ({"endpoint": "http://h/", "credential_grant_id": ""}, "credential_grant_id"),
    ],
)
def test_bad_params_are_reported_by_validate(params: dict[str, Any], key: str) -> None:
    assert WEB_SEARCH.check_params is not None
    [problem] = WEB_SEARCH.check_params(params, None)
    assert problem.path == (key,)


def test_the_nested_fixtures_search_params_are_valid() -> None:
    assert WEB_SEARCH.check_params is not None
    assert (
        WEB_SEARCH.check_params({"endpoint": "http://127.0.0.1:9/search", "max_results": 5}, None)
        == []
    )
