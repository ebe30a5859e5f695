"""The HTTP API over real sockets on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cells.llm.chat_endpoint import ChatRoute
from colony.api import build_app, serve
from colony.testing import ColonyHarness
from tests.conftest import TreeFactory, cell, hive

USER = {"messages": [{"origin": "user", "type": "text", "text": "hi"}]}


class Api:
    def __init__(self, colony: ColonyHarness, client: httpx.AsyncClient) -> None:
        self.colony = colony
        self.client = client


@pytest.fixture
async def api(make_tree: TreeFactory) -> AsyncIterator[Api]:
    tree = make_tree(
        {
            "main/config.json": hive(
                {"from": ".", "to": "./box"}, {"from": "./box/echo", "to": "/sink"}
            ),
            "main/box/config.json": hive({"from": ".", "to": "./echo", "condition": "has(hop.go)"}),
            "main/box/echo/config.json": cell(
                "code",
                {
                    "script_inline": "import sys,json; d=json.load(sys.stdin); print(json.dumps({'messages': d['body']['messages']}))"
                },
            ),
        }
    )
    async with ColonyHarness(tree, capture=["/sink"]) as colony:
        chat = ChatRoute()
        app = build_app(colony.colony, token=None, extra_routes={("POST", "/llm/chat"): chat})
        runner = await serve(app, "127.0.0.1", 0)
        port = runner.addresses[0][1]
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", trust_env=False
        ) as client:
            yield Api(colony, client)
        await runner.cleanup()
        await chat.close()


async def test_a_posted_message_is_routed_and_its_trace_is_readable(api: Api) -> None:
    response = await api.client.post(
        "/messages",
        json={"target": "/", "body": USER, "hop": {"go": True}, "headers": {"turn_id": "t"}},
    )
    assert response.status_code == 202
    trace = response.json()["trace_id"]
    await api.colony.settle()
    [done] = api.colony.captured("/sink")
    assert done.headers.context == {"turn_id": "t"}
    rows = (await api.client.get("/colony/trace", params={"trace_id": trace})).json()["trace"]
    assert [(r["from_path"], r["to_path"]) for r in rows] == [
        ("@external", "/"),
        ("/", "/box"),
        ("/box", "/box/echo"),
        ("/box/echo", "/sink"),
    ]
    newest = (
        await api.client.get("/colony/messages", params={"trace_id": trace, "limit": 1})
    ).json()["messages"]
    assert newest[0]["to_path"] == "/sink"


async def test_a_message_posted_twice_with_one_idempotency_key_is_routed_once(api: Api) -> None:
    doc = {"target": "/", "body": USER, "hop": {"go": True}}
    first = await api.client.post("/messages", json=doc, headers={"Idempotency-Key": "order-9"})
    again = await api.client.post("/messages", json=doc, headers={"Idempotency-Key": "order-9"})
    other = await api.client.post("/messages", json=doc, headers={"Idempotency-Key": "order-10"})
    assert (first.status_code, again.status_code, other.status_code) == (202, 200, 202)
    assert again.json() == {"duplicate": True, "idempotency_key": "order-9"}
    await api.colony.settle()
    assert len(api.colony.captured("/sink")) == 2
    too_long = await api.client.post("/messages", json=doc, headers={"Idempotency-Key": "k" * 201})
    assert too_long.status_code == 422
    assert too_long.json()["error"] == "invalid_idempotency_key"


@pytest.mark.parametrize(
    ("doc", "token"),
    [
        ({"target": "/", "body": {"text": "no slot"}}, "invalid_ubf_body"),
        ({"target": "/"}, "invalid_ubf_body"),
        ({"target": "/", "body": USER, "ttl": 0}, "invalid_ttl"),
        ({"target": "/", "body": USER, "ttl": -3}, "invalid_ttl"),
        ({"target": "/", "body": USER, "ttl": 3.5}, "invalid_ttl"),
        ({"target": "/", "body": USER, "ttl": "abc"}, "invalid_ttl"),
        ({"target": "/", "body": USER, "ttl": 4294967296}, "invalid_ttl"),
        ({"target": "/", "body": USER, "headers": [1]}, "invalid_headers"),
        ({"target": "/", "body": USER, "hop": "x"}, "invalid_hop"),
        ({"body": USER}, "invalid_target"),
    ],
)
async def test_every_refusal_is_a_422_with_its_token(
    api: Api, doc: dict[str, Any], token: str
) -> None:
    response = await api.client.post("/messages", json=doc)
    assert response.status_code == 422
    assert response.json()["error"] == token
    assert response.json()["detail"]


async def test_unreadable_requests_are_400_and_unknown_routes_404_in_the_same_shape(
    api: Api,
) -> None:
    bad = await api.client.post(
        "/messages", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert (bad.status_code, bad.json()["error"]) == (400, "invalid_json")
    media = await api.client.post("/messages", content=b"x", headers={"Content-Type": "text/plain"})
    assert (media.status_code, media.json()["error"]) == (415, "unsupported_media_type")
    missing = await api.client.get("/nope")
    assert (missing.status_code, missing.json()["error"]) == (404, "not_found")
    query = await api.client.get("/colony/trace", params={"trace_id": "not-a-uuid"})
    assert (query.status_code, query.json()["error"]) == (400, "bad_query")
    assert (await api.client.get("/colony/events")).status_code == 501


async def test_registry_and_graph_describe_the_colony(api: Api) -> None:
    registry = (await api.client.get("/colony/registry", params={"type": "code"})).json()[
        "registry"
    ]
    assert [r["path"] for r in registry] == ["/box/echo"]
    assert registry[0]["active"] is True
    graph = (await api.client.get("/colony/graph")).json()["graph"]
    assert {n["path"] for n in graph["nodes"]} >= {"/box/echo", "/", "/box"}
    [guarded] = [e for e in graph["edges"] if "condition" in e]
    assert (guarded["from"], guarded["to"], guarded["condition"]) == (
        "/box",
        "/box/echo",
        "has(hop.go)",
    )


async def test_dead_letters_are_listed_filtered_deleted_and_replayed(api: Api) -> None:
    await api.client.post("/messages", json={"target": "/", "body": USER})  # no go: hive_no_route
    await api.client.post("/messages", json={"target": "/nowhere", "body": USER})
    await api.colony.settle()
    letters = (await api.client.get("/colony/dead_letters")).json()["dead_letters"]
    assert [d["error_code"] for d in letters] == ["hive_no_route", "unresolved_path"]
    only = (
        await api.client.get(
            "/colony/dead_letters", params={"error_code": "unresolved_path", "limit": 5000}
        )
    ).json()
    assert [d["resolved_target"] for d in only["dead_letters"]] == ["/nowhere"]
    replay = await api.client.post(f"/colony/dead_letters/{letters[0]['id']}/replay")
    assert replay.status_code == 202
    assert replay.json()["trace_id"] == letters[0]["trace_id"]
    assert (await api.client.post("/colony/dead_letters/99999/replay")).status_code == 404
    deleted = (
        await api.client.delete("/colony/dead_letters", params={"error_code": "unresolved_path"})
    ).json()
    assert [d["error_code"] for d in deleted["dead_letters"]] == ["unresolved_path"]
    await api.colony.settle()
    left = (await api.client.get("/colony/dead_letters")).json()["dead_letters"]
    assert [d["error_code"] for d in left] == ["hive_no_route", "hive_no_route"]


async def test_a_token_guards_every_route_but_health(make_tree: TreeFactory) -> None:
    async with ColonyHarness(make_tree({"main/config.json": hive()})) as colony:
        runner = await serve(build_app(colony.colony, token="s3cret"), "127.0.0.1", 0)
        port = runner.addresses[0][1]
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", trust_env=False
        ) as client:
            assert (await client.get("/health")).status_code == 200
            denied = await client.get("/colony/registry")
            assert (denied.status_code, denied.json()["error"]) == (401, "unauthorized")
            ok = await client.get("/colony/registry", headers={"Authorization": "Bearer s3cret"})
            assert ok.status_code == 200
        await runner.cleanup()


async def test_the_openapi_document_lists_every_route(api: Api) -> None:
    doc = (await api.client.get("/openapi.json")).json()
    assert doc["openapi"].startswith("3.")
    assert {
        "/messages",
        "/colony/dead_letters",
        "/colony/dead_letters/{id}/replay",
        "/llm/chat",
        "/health",
    } <= set(doc["paths"])


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
async def test_no_request_the_document_allows_makes_the_api_fail(
    api: Api, data: st.DataObject
) -> None:
    doc = data.draw(
        st.dictionaries(
            st.sampled_from(["target", "body", "headers", "hop", "ttl", "x"]),
            json_values,
            max_size=5,
        )
    )
    response = await api.client.post(
        "/messages", content=json.dumps(doc).encode(), headers={"Content-Type": "application/json"}
    )
    assert response.status_code in (202, 400, 422)
    path = data.draw(
        st.sampled_from(
            [
                "/colony/registry",
                "/colony/trace",
                "/colony/messages",
                "/colony/dead_letters",
                "/colony/graph",
            ]
        )
    )
    params = data.draw(
        st.dictionaries(
            st.sampled_from(["limit", "since", "trace_id", "id", "error_code", "scope", "active"]),
            st.text(max_size=6),
            max_size=3,
        )
    )
    got = await api.client.get(path, params=params)
    assert got.status_code in (200, 400), got.text
    assert isinstance(got.json(), dict)
