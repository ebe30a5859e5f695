"""Fuzz every HTTP endpoint from the served ``/openapi.json``: no request is a 500.

Each operation of the document gets requests generated from its own parameters and body
schema (plus the wrong things a client sends: junk values, unknown parameters, bodies that are
not JSON or not the declared media type). Every answer must be a status the document lists for
that operation or a client error; 4xx bodies are ``{"error", "detail"}``; the server still
answers ``/health`` afterwards; and a message the API accepted (202) is in the message log or
a dead letter, never lost. The document is read from :mod:`colony.openapi` at collection time
(to parametrize per operation) and checked to be exactly what ``/openapi.json`` serves.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cells.llm.chat_endpoint import ChatRoute
from colony.openapi import document
from colony.testing import ColonyHarness, ScriptedAnthropic, anthropic_text
from tests.api_client import Api, served
from tests.conftest import TreeFactory, cell, hive
from tests.fuzz.strategies import json_values, mostly

USER = {"messages": [{"origin": "user", "type": "text", "text": "hi"}]}
OPENAPI = document(extra=ChatRoute.openapi)
"""What the fixture's server serves (it mounts ``POST /llm/chat``)."""
CLIENT_ERRORS = {400, 404, 405, 409, 413, 415, 422}
"""What any route may answer to a request it cannot serve (the middleware's shapes)."""

OPERATIONS = [
    (path, method)
    for path, item in OPENAPI["paths"].items()
    for method in item
    if method in ("get", "post", "put", "patch", "delete")
    and path != "/colony/events"  # it never ends: test_any_event_filters_open_a_stream_or_are_a_400
]

texts = st.text(st.characters(codec="utf-8"), max_size=12)
numbers = st.integers(-(2**70), 2**70).map(str)
junk = texts | numbers | st.sampled_from(["", "-0", "1_000", "0x10", "١٢", " 7", "1e3", "nan"])


def value_for(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values of one JSON schema, mostly valid, sometimes any JSON value instead."""
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties", {})
        valid: st.SearchStrategy[Any] = st.fixed_dictionaries(
            {name: value_for(props[name]) for name in schema.get("required", [])},
            optional={
                n: value_for(s) for n, s in props.items() if n not in schema.get("required", [])
            },
        )
        if not props:
            valid = st.just(USER) | st.dictionaries(texts, json_values, max_size=3)
        if schema.get("nullable"):
            valid = st.none() | valid
        return mostly(valid, json_values)
    if kind == "integer":
        lo, hi = schema.get("minimum", -(2**70)), schema.get("maximum", 2**70)
        return mostly(st.integers(lo, hi), json_values)
    if kind == "string":
        return mostly(
            st.sampled_from(["/", "/echo", "/nowhere", "", "//", "/.."]), texts | json_values
        )
    return json_values


TOOLS = [{"name": "calc", "description": "Add.", "input_schema": {"type": "object"}}]
chat_bodies = mostly(
    st.fixed_dictionaries(
        {"prompt": mostly(st.sampled_from(["hi", ""]), json_values)},
        optional={
            "tools": mostly(st.just(TOOLS), json_values),
            "system": mostly(st.just("Be brief."), json_values),
            "conversation": json_values,
            "turn": st.integers(-1, 3) | json_values,
            "results": json_values,
            "model": json_values,
            "max_tokens": st.integers(-1, 2**40) | json_values,
            "x": json_values,
        },
    ),
    json_values,
)


INT64 = st.integers(-(2**63), 2**63 - 1).map(str)


def param_value(name: str, schema: dict[str, Any]) -> st.SearchStrategy[str]:
    """A query or path parameter's text: what the schema declares, or junk."""
    if schema.get("format") == "uuid":
        return st.uuids().map(str) | junk
    if name == "since":
        return st.integers(-5, 2**40).map(str) | INT64 | st.integers().map(str) | texts
    if name == "id":  # the dead letters the fixture made are 1 and 2
        return mostly(st.integers(-1, 4).map(str), numbers | junk)
    if schema.get("type") == "integer":
        return st.integers(-5, 5).map(str) | numbers | junk
    if name == "cell":
        return mostly(st.just("/brain"), st.sampled_from(["/", "/echo", ""]) | junk)
    return st.sampled_from(["/", "/echo", "/brain", "true", "false", "hive_no_route"]) | junk


@st.composite
def requests(draw: st.DrawFn, path: str, method: str) -> dict[str, Any]:
    operation = OPENAPI["paths"][path][method]
    url = path
    params: dict[str, str] = {}
    for param in operation.get("parameters", []):
        value = draw(param_value(param["name"], param["schema"]))
        if param["in"] == "path":
            url = url.replace("{" + param["name"] + "}", quote(value, safe="") or "0")
        elif param.get("required") or draw(st.booleans()):
            params[param["name"]] = value
    params.update(draw(st.dictionaries(st.sampled_from(["x", "limit", "ids"]), junk, max_size=1)))
    content: bytes | None = None
    headers: dict[str, str] = {}
    body = operation.get("requestBody")
    if body is not None:
        schema = body["content"]["application/json"]["schema"]
        shape = draw(mostly(st.just("schema"), st.sampled_from(["bytes", "text/plain", "none"])))
        if shape == "schema":
            values = chat_bodies if path == "/llm/chat" else value_for(schema)
            content = json.dumps(draw(values)).encode()
            headers["Content-Type"] = "application/json"
        elif shape == "bytes":
            content = draw(st.binary(max_size=40))
            headers["Content-Type"] = "application/json"
        elif shape == "text/plain":
            content = b"{}"
            headers["Content-Type"] = "text/plain"
    elif draw(st.booleans()):
        content = json.dumps(draw(json_values)).encode()
        headers["Content-Type"] = "application/json"
    return {
        "method": method.upper(),
        "url": url,
        "params": params,
        "content": content,
        "headers": headers,
    }


@pytest.fixture
async def api(make_tree: TreeFactory) -> AsyncIterator[Api]:
    async with ScriptedAnthropic([anthropic_text("ok")]) as model:
        tree = make_tree(
            {
                "main/config.json": hive({"from": ".", "to": "./echo"}),
                "main/echo/config.json": cell(
                    "code",
                    {"script_inline": "import sys,json; json.load(sys.stdin); print('[]')"},
                ),
                "main/brain/config.json": cell(
                    "llm", {"provider": "anthropic", "model": "claude-x", "base_url": model.url}
                ),
            }
        )
        async with ColonyHarness(tree) as colony, served(colony, client_timeout=30) as api:
            # Dead letters for the dead-letter routes to list, drain and replay.
            for target in ("/nowhere", "/elsewhere"):
                await colony.send(target, USER)
            await colony.settle()
            yield api


async def accounted_for(api: Api, message_id: str) -> None:
    """The message is in the message log (delivered) or a dead letter (refused), never lost."""
    logged = await api.client.get("/colony/messages", params={"id": message_id})
    delivered = [row["id"] for row in logged.json()["messages"]]
    dead = [d.message_id for d in await api.colony.dead_letters()]
    assert delivered == [message_id] or message_id in dead, (delivered, dead)


async def test_the_served_document_is_the_one_the_fuzzer_reads(api: Api) -> None:
    assert (await api.client.get("/openapi.json")).json() == json.loads(json.dumps(OPENAPI))


@pytest.mark.parametrize(("path", "method"), OPERATIONS, ids=[f"{m} {p}" for p, m in OPERATIONS])
@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
async def test_no_request_to_any_endpoint_is_a_500(
    api: Api, path: str, method: str, data: st.DataObject
) -> None:
    request = data.draw(requests(path, method), label="request")
    response = await api.client.request(**request)
    documented = {int(code) for code in OPENAPI["paths"][path][method]["responses"]}
    status = response.status_code
    event(f"HTTP {status}")
    assert status in documented | CLIENT_ERRORS, (status, response.text)
    assert status != 500
    declared = OPENAPI["paths"][path][method]["responses"].get(str(status), {})
    if "text/plain" in declared.get("content", {}):  # GET /metrics: Prometheus' text format
        assert response.headers["Content-Type"].startswith("text/plain")
        return
    doc = response.json()  # every other answer is JSON, errors included
    assert isinstance(doc, dict)
    if 400 <= status < 500:
        assert isinstance(doc.get("error"), str), doc
        assert isinstance(doc.get("detail"), str), doc
    if status == 202:  # accepted: the message is routed and logged, never lost
        await api.colony.settle()
        await accounted_for(api, doc["message_id"])
    health = await api.client.get("/health")
    assert (health.status_code, health.json()["status"]) == (200, "ok")


async def test_a_method_the_document_does_not_list_is_a_405_in_the_error_shape(api: Api) -> None:
    for path, item in OPENAPI["paths"].items():
        url = path.replace("{id}", "1")
        for method in {"GET", "POST", "PUT", "PATCH", "DELETE"} - {m.upper() for m in item}:
            response = await api.client.request(method, url)
            assert response.status_code == 405, (method, path, response.text)
            assert set(response.json()) == {"error", "detail"}


SINCE_OPERATIONS = [
    (path, method)
    for path, method in OPERATIONS
    if any(p["name"] == "since" for p in OPENAPI["paths"][path][method].get("parameters", []))
]


@pytest.mark.parametrize(
    ("path", "method"), SINCE_OPERATIONS, ids=[f"{m} {p}" for p, m in SINCE_OPERATIONS]
)
async def test_a_since_beyond_int64_is_a_400_not_a_500(api: Api, path: str, method: str) -> None:
    response = await api.client.request(method.upper(), path, params={"since": str(2**63)})
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "bad_query"


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
async def test_any_event_filters_open_a_stream_or_are_a_400(api: Api, data: st.DataObject) -> None:
    names = st.sampled_from(["trace_id", "cell", "kind", "colour"])
    params = data.draw(st.dictionaries(names, texts | st.just("route,handle_end"), max_size=3))
    ids = st.from_regex(r"[0-9A-Za-z\-]{1,24}", fullmatch=True)  # what a header may carry
    headers = data.draw(st.dictionaries(st.just("Last-Event-ID"), ids, max_size=1))
    async with api.client.stream(
        "GET", "/colony/events", params=params, headers=headers
    ) as response:
        if response.status_code == 200:
            assert response.headers["Content-Type"].startswith("text/event-stream")
        else:
            await response.aread()
            assert (response.status_code, response.json()["error"]) == (400, "bad_query")
