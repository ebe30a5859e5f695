"""The HTTP API over real sockets on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from colony.api import build_app, serve
from colony.testing import ColonyHarness
from tests.api_client import Api, served
from tests.conftest import TreeFactory, cell, hive

USER = {"messages": [{"origin": "user", "type": "text", "text": "hi"}]}


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
    async with ColonyHarness(tree, capture=["/sink"]) as colony, served(colony) as api:
        yield api


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


async def routed(api: Api) -> tuple[str, list[dict[str, Any]]]:
    """Post one message through /box/echo to /sink; its trace rows, oldest first."""
    response = await api.client.post(
        "/messages", json={"target": "/", "body": USER, "hop": {"go": True}}
    )
    trace = response.json()["trace_id"]
    await api.colony.settle()
    rows = (await api.client.get("/colony/trace", params={"trace_id": trace})).json()["trace"]
    return trace, rows


async def test_message_rows_carry_meclaws_headers_json_and_body_payload_strings(api: Api) -> None:
    trace, rows = await routed(api)
    listed = (await api.client.get("/colony/messages", params={"trace_id": trace})).json()
    assert {"messages", "next", "scan_budget", "scan_truncated"} == set(listed)
    assert (listed["scan_budget"], listed["scan_truncated"]) == (5000, False)
    for row in [*rows, *listed["messages"]]:
        assert isinstance(row["headers_json"], str)
        assert isinstance(row["body_payload"], str)
        assert json.loads(row["headers_json"]) == row["headers"]
        assert json.loads(row["body_payload"]) == row["body"]
    assert rows[0]["body"] == USER


async def test_every_messages_filter_meclaw_accepts_filters(api: Api) -> None:
    trace, rows = await routed(api)
    await routed(api)  # a second trace the filters must leave out

    async def ids(**params: Any) -> list[str]:
        response = await api.client.get("/colony/messages", params=params)
        assert response.status_code == 200, response.text
        return [row["id"] for row in response.json()["messages"]]

    # Newest first means by (created_at, id) descending, meclaw's order and its page cursor's.
    order = sorted(rows, key=lambda row: (row["created_at"], row["id"]), reverse=True)
    newest_first = [row["id"] for row in order]
    assert await ids(trace_id=trace) == newest_first
    assert await ids(parent_message_id=rows[1]["id"]) == [rows[2]["id"]]
    from_box = [row["id"] for row in order if row["from_path"].startswith("/box")]
    assert await ids(trace_id=trace, from_path_prefix="/box") == from_box
    assert await ids(trace_id=trace, to_path_prefix="/box/") == [rows[2]["id"]]
    assert await ids(trace_id=trace, body_kind="blob") == []
    assert await ids(trace_id=trace, until=0) == []
    assert await ids(trace_id=trace, since=rows[0]["created_at"]) == newest_first
    assert await ids(trace_id=trace, correlation_id="00000000-0000-7000-8000-000000000000") == []
    page = (await api.client.get("/colony/messages", params={"trace_id": trace, "limit": 2})).json()
    assert [row["id"] for row in page["messages"]] == newest_first[:2]
    cursor = page["next"]
    assert (
        await ids(trace_id=trace, before_created_at=cursor["created_at"], before_id=cursor["id"])
        == newest_first[2:]
    )
    assert await ids(trace_id=trace, before_id=cursor["id"]) == newest_first[2:]
    budget = (
        await api.client.get("/colony/messages", params={"scan_budget": 2, "body_kind": "inline"})
    ).json()
    assert (budget["scan_budget"], budget["scan_truncated"]) == (2, True)
    assert await ids(id=rows[0]["id"]) == [rows[0]["id"]]


async def test_trace_filters_by_correlation_id_and_error(api: Api) -> None:
    trace, rows = await routed(api)
    assert len(rows) == 4
    errors = await api.client.get("/colony/trace", params={"trace_id": trace, "error": "true"})
    assert errors.json()["trace"] == []
    other = await api.client.get(
        "/colony/trace",
        params={"trace_id": trace, "correlation_id": "00000000-0000-7000-8000-000000000000"},
    )
    assert other.json()["trace"] == []
    only_box = await api.client.get(
        "/colony/trace", params={"trace_id": trace, "path_prefix": "/box"}
    )
    assert [r["to_path"] for r in only_box.json()["trace"]] == ["/box", "/box/echo"]


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/colony/messages", {"colour": "red"}),
        ("/colony/messages", {"parent_message_id": "not-a-uuid"}),
        ("/colony/messages", {"before_id": "123"}),
        ("/colony/messages", {"until": "soon"}),
        ("/colony/messages", {"body_kind": "inlined"}),
        ("/colony/messages", {"scan_budget": "lots"}),
        ("/colony/trace", {"correlation_id": "xyz"}),
        ("/colony/trace", {"error": "yes"}),
        ("/colony/trace", {"trace": "x"}),
        ("/colony/registry", {"active": "1"}),
        ("/colony/registry", {"kind": "code"}),
        ("/colony/graph", {"scopes": "/"}),
        ("/colony/dead_letters", {"code": "x"}),
        ("/colony/dead_letters", {"limit": "1e3"}),
        ("/colony/dead_letters", {"since": "١٢"}),
    ],
)
async def test_an_unknown_or_malformed_filter_is_400_bad_query(
    api: Api, path: str, params: dict[str, str]
) -> None:
    response = await api.client.get(path, params=params)
    assert (response.status_code, response.json()["error"]) == (400, "bad_query"), response.text
    assert next(iter(params)) in response.json()["detail"]


async def test_a_filter_given_twice_is_400_bad_query(api: Api) -> None:
    response = await api.client.get("/colony/messages?limit=1&limit=2")
    assert (response.status_code, response.json()["error"]) == (400, "bad_query")


async def test_a_bad_uuid_detail_never_echoes_the_rejected_value(api: Api) -> None:
    secret = "sk-live-0123456789"
    for path, name in [
        ("/colony/trace", "trace_id"),
        ("/colony/trace", "correlation_id"),
        ("/colony/messages", "id"),
        ("/colony/messages", "before_id"),
    ]:
        response = await api.client.get(path, params={name: secret})
        assert response.status_code == 400
        assert secret not in response.text
        assert name in response.json()["detail"]


async def test_graph_scope_returns_only_edges_with_both_ends_inside(api: Api) -> None:
    graph = (await api.client.get("/colony/graph", params={"scope": "/box"})).json()["graph"]
    assert {n["path"] for n in graph["nodes"]} == {"/box", "/box/echo"}
    assert [(e["from"], e["to"]) for e in graph["edges"]] == [("/box", "/box/echo")]
    whole = (await api.client.get("/colony/graph")).json()["graph"]
    assert ("/box/echo", "/sink") in {(e["from"], e["to"]) for e in whole["edges"]}


async def test_registry_and_dead_letter_filters_filter(api: Api) -> None:
    inactive = await api.client.get("/colony/registry", params={"active": "false"})
    assert inactive.json()["registry"] == []
    by_path = await api.client.get("/colony/registry", params={"path": "/box/echo"})
    assert [r["path"] for r in by_path.json()["registry"]] == ["/box/echo"]
    await api.client.post("/messages", json={"target": "/nowhere", "body": USER})
    await api.colony.settle()
    letters = await api.client.get(
        "/colony/dead_letters", params={"error_code": "unresolved_path", "since": 0}
    )
    [letter] = letters.json()["dead_letters"]
    assert letter["message_id"]
    assert letter["resolved_target"] == "/nowhere"
    later = await api.client.get("/colony/dead_letters", params={"since": 2**40})
    assert later.json()["dead_letters"] == []
