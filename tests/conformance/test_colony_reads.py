"""The ``/colony/*`` reads answer a routed message with the slot named after the endpoint.

A cell reads the colony the way an HTTP client does: a message to ``/colony/registry`` (and
``graph``, ``trace``, ``messages``, ``dead_letters``) carrying ``{"query": {…}}`` is answered,
straight to its ``reply_to``, with the same body ``GET /colony/<read>`` serves: a new trace, TTL
64, sender ``/colony``. An unreadable filter is answered, never dropped.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from colony.config.loader import load_tree
from colony.paths import ANSWERING
from colony.testing import ColonyHarness
from tests.conftest import TreeFactory, cell, hive

USER = {"messages": [{"origin": "user", "type": "text", "text": "hi"}]}

ASKER = """
import json, sys
doc = json.load(sys.stdin)
body = doc["body"]
if "ask" in body:  # the outside request: emit the read (the edge takes it to /colony/...)
    print(json.dumps({"messages": [], **body["ask"]}))
else:  # the colony's answer: hand it on to /sink
    print(json.dumps({"header": {"done": True}, "messages": [], "answer": body}))
"""


def asking_tree(make_tree: TreeFactory, endpoint: str) -> Any:
    return make_tree(
        {
            "main/config.json": hive(
                {"from": ".", "to": "./asker"},
                {"from": "./asker", "to": endpoint, "condition": "!has(hop.done)"},
                {"from": "./asker", "to": "/sink", "condition": "has(hop.done)"},
            ),
            "main/asker/config.json": cell("code", {"script_inline": ASKER}),
        }
    )


async def ask(colony: ColonyHarness, query: Any) -> tuple[str, Any]:
    trace = await colony.send("/", {**USER, "ask": {"query": query}})
    await colony.settle()
    [reply] = colony.captured("/sink")
    return trace, reply


async def test_a_cell_reading_the_registry_gets_a_reply_carrying_the_registry_slot(
    make_tree: TreeFactory,
) -> None:
    async with ColonyHarness(
        asking_tree(make_tree, "/colony/registry"), capture=["/sink"]
    ) as colony:
        trace, done = await ask(colony, {"cell_type": "code", "limit": 5})
        assert [row["path"] for row in done.body["answer"]["registry"]] == ["/asker"]
        assert done.trace_id != trace  # the reply started a new trace
        # 64 at ingress: hive transit 63, asker 62, /colony dispatch 61 (dead for the reply);
        # the reply starts at 64: asker 63, then /sink 62.
        assert done.ttl == 62
        assert await colony.dead_letters() == []
        reply_rows = await colony.message_log(done.trace_id)
        assert reply_rows[0].to_path == "/asker"
        assert reply_rows[0].parent_message_id is None


@pytest.mark.parametrize(
    ("endpoint", "query", "slot"),
    [
        ("/colony/graph", {"scope": "/"}, "graph"),
        ("/colony/trace", {"since": 0}, "trace"),
        ("/colony/messages", {"limit": 2}, "messages"),
        ("/colony/dead_letters", {"error_code": "no_route"}, "dead_letters"),
    ],
)
async def test_every_read_answers_a_routed_message_with_its_slot(
    make_tree: TreeFactory, endpoint: str, query: dict[str, Any], slot: str
) -> None:
    tree = make_tree({"main/config.json": hive(), "main/a/config.json": cell("code")})
    async with ColonyHarness(tree, capture=["/sink"]) as colony:
        await colony.send("/nowhere", USER)  # a dead letter and a message-log row to read
        await colony.settle()
        await colony.send(endpoint, {"messages": [], "query": query}, reply_to="/sink")
        await colony.settle()
        [reply] = colony.captured("/sink")
        assert slot in reply.body
        assert reply.ttl == 63
        assert reply.headers.context == {}
        assert reply.reply_to is None
        if slot == "messages":
            assert {"next", "scan_budget", "scan_truncated"} <= set(reply.body)
        if slot == "dead_letters":
            assert reply.body["dead_letters"] == []  # filtered: the letter is unresolved_path


@pytest.mark.parametrize(
    ("endpoint", "body", "slot"),
    [
        ("/colony/trace", {"query": {"trace_id": "not-a-uuid"}}, "trace"),
        ("/colony/registry", {"query": {"active": "maybe"}}, "registry"),
        ("/colony/messages", {"query": {"colour": "red"}}, "messages"),
        ("/colony/graph", {"query": "/a"}, "graph"),
        ("/colony/dead_letters", {"query": {"limit": "many"}}, "dead_letters"),
    ],
)
async def test_an_unreadable_filter_is_answered_invalid_query_never_dropped(
    make_tree: TreeFactory, endpoint: str, body: dict[str, Any], slot: str
) -> None:
    async with ColonyHarness(make_tree({"main/config.json": hive()}), capture=["/sink"]) as colony:
        await colony.send(endpoint, {"messages": [], **body}, reply_to="/sink")
        await colony.settle()
        [reply] = colony.captured("/sink")
        answer = reply.body[slot]
        assert (answer["status"], answer["error_code"]) == ("error", "invalid_query")
        assert "not-a-uuid" not in answer["details"]  # the rejected value is not echoed
        assert colony.logs("colony_read_refused")


async def test_a_read_without_reply_to_is_logged_and_costs_one_decision(
    make_tree: TreeFactory,
) -> None:
    async with ColonyHarness(make_tree({"main/config.json": hive()})) as colony:
        before = colony.colony.decisions
        await colony.send("/colony/registry", {"messages": []})
        await colony.settle()
        assert colony.colony.decisions == before + 1
        assert await colony.dead_letters() == []
        assert colony.logs("colony_read_unanswered")


async def test_a_colony_path_that_does_not_answer_is_still_dead_lettered(
    make_tree: TreeFactory,
) -> None:
    async with ColonyHarness(make_tree({"main/config.json": hive()}), capture=["/sink"]) as colony:
        await colony.send("/colony/mutations", {"messages": []}, reply_to="/sink")
        await colony.settle()
        assert colony.captured("/sink") == []
        [letter] = await colony.dead_letters()
        assert letter.error_code == "colony_endpoint_unimplemented"


def test_validate_and_the_router_agree_on_which_colony_paths_answer(
    make_tree: TreeFactory,
) -> None:
    others = ["/colony/mutations", "/colony/templates", "/colony/events"]
    edges = [{"from": ".", "to": path} for path in [*sorted(ANSWERING), *others]]
    root = make_tree({"main/config.json": hive(*edges)})
    result = load_tree(root, cell_types={"code"})
    warned = {
        json.loads(json.dumps(d.message)).split()[2]
        for d in result.diagnostics
        if d.code == "colony_endpoint_unknown"
    }
    assert warned == set(others)
    assert {
        "/colony/registry",
        "/colony/graph",
        "/colony/trace",
        "/colony/messages",
        "/colony/dead_letters",
        "/colony/runs",
        "/colony/stats",
    } == ANSWERING
