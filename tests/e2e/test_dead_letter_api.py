"""Dead letters one by one over HTTP: show the stored body, replay once (then only with force),
revive a failed cell; and listing never reads a body."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator

import pytest

from colony.persist.db import ColonyDb
from colony.persist.records import read_dead_letters
from colony.persist.source import Source
from colony.testing import ColonyHarness
from tests.api_client import Api, served
from tests.conformance.cells import TEST_TYPES, user
from tests.conftest import TreeFactory, cell, hive


@pytest.fixture
async def api(make_tree: TreeFactory) -> AsyncIterator[Api]:
    tree = make_tree(
        {
            "main/config.json": hive({"from": ".", "to": "./a"}, {"from": "./a", "to": "/sink"}),
            "main/a/config.json": cell("stateful_echo", {"crash_on": "boom"}, restart_limit=0),
        }
    )
    async with (
        ColonyHarness(tree, capture=["/sink"], cell_types=TEST_TYPES) as colony,
        served(colony) as api,
    ):
        yield api


async def _one_letter(api: Api, text: str = "lost") -> int:
    await api.client.post("/messages", json={"target": "/nowhere", "body": user(text)})
    await api.colony.settle()
    [letter] = (await api.client.get("/colony/dead_letters")).json()["dead_letters"]
    return int(letter["id"])


async def test_a_dead_letter_is_shown_by_id_with_its_stored_message_body(api: Api) -> None:
    letter_id = await _one_letter(api, "the body we lost")
    shown = await api.client.get(f"/colony/dead_letters/{letter_id}")
    assert shown.status_code == 200
    letter = shown.json()["dead_letter"]
    assert letter["error_code"] == "unresolved_path"
    assert letter["message"]["body_payload"] == user("the body we lost")
    assert letter["message"]["id"] == letter["message_id"]
    assert (letter["replayed_at"], letter["replayed_as"]) == (None, None)
    missing = await api.client.get("/colony/dead_letters/99999")
    assert (missing.status_code, missing.json()["error"]) == (404, "not_found")
    assert (await api.client.get("/colony/dead_letters/abc")).status_code == 400


async def test_a_replayed_dead_letter_is_marked_and_a_second_replay_needs_force(
    api: Api,
) -> None:
    letter_id = await _one_letter(api)
    first = await api.client.post(f"/colony/dead_letters/{letter_id}/replay")
    assert first.status_code == 202
    letter = (await api.client.get(f"/colony/dead_letters/{letter_id}")).json()["dead_letter"]
    assert letter["replayed_as"] == first.json()["message_id"]
    assert isinstance(letter["replayed_at"], int)
    again = await api.client.post(f"/colony/dead_letters/{letter_id}/replay")
    assert (again.status_code, again.json()["error"]) == (409, "already_replayed")
    assert first.json()["message_id"] in again.json()["detail"]
    assert "force=true" in again.json()["detail"]
    forced = await api.client.post(
        f"/colony/dead_letters/{letter_id}/replay", params={"force": "true"}
    )
    assert forced.status_code == 202
    letter = (await api.client.get(f"/colony/dead_letters/{letter_id}")).json()["dead_letter"]
    assert letter["replayed_as"] == forced.json()["message_id"]
    await api.colony.settle()
    codes = [
        d["error_code"]
        for d in (await api.client.get("/colony/dead_letters")).json()["dead_letters"]
    ]
    assert codes == ["unresolved_path"] * 3  # the original and two replays, one trace


async def test_a_failed_cell_is_revived_through_the_api(api: Api) -> None:
    await api.colony.send("/a", user("boom"))
    await api.colony.settle()
    registry = (await api.client.get("/colony/registry", params={"path": "/a"})).json()
    assert registry["registry"][0]["failed"] is True
    revived = await api.client.post("/colony/cells/revive", json={"path": "/a"})
    assert revived.status_code == 200
    assert (revived.json()["revived"], revived.json()["status_before"]) == (True, "failed")
    await api.colony.send("/a", user("back"))
    await api.colony.settle()
    assert [m.body["messages"][-1]["text"] for m in api.colony.captured("/sink")] == ["back"]
    not_failed = await api.client.post("/colony/cells/revive", json={"path": "/a"})
    assert not_failed.json()["revived"] is False
    unknown = await api.client.post("/colony/cells/revive", json={"path": "/nope"})
    assert (unknown.status_code, unknown.json()["error"]) == (404, "not_found")
    assert (await api.client.post("/colony/cells/revive", json={})).status_code == 422


async def test_the_openapi_document_lists_the_dead_letter_and_revive_routes(api: Api) -> None:
    paths = (await api.client.get("/openapi.json")).json()["paths"]
    assert {"/colony/dead_letters/{id}", "/colony/cells/revive"} <= set(paths)


def test_listing_dead_letters_never_reads_a_stored_body(make_tree: TreeFactory) -> None:
    """The stored bodies here are not even JSON: a listing that decoded one would fail."""
    root = make_tree({"main/config.json": hive()})
    db = ColonyDb(root / "colony.db")
    db.close()
    junk = "{" + "x" * 1_000_000
    with sqlite3.connect(root / "colony.db") as conn:
        conn.executemany(
            "INSERT INTO dead_letters(sender_path, original_target, resolved_target, error_code, "
            "trace_id, created_at, message_json, message_id) VALUES (?,?,?,?,?,?,?,?)",
            [("/", "/x", "/x", "unresolved_path", "t", 1, junk, f"m{i}") for i in range(50)],
        )
    rows = read_dead_letters(Source.sqlite(root / "colony.db"))
    assert [r.message_id for r in rows] == [f"m{i}" for i in range(50)]
    assert all("message" not in vars(r) for r in rows)  # nothing decoded
