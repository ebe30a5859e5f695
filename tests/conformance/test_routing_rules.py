"""runtime.md §11: routing, TTL, dead letters, modifiers (one test per rule, named after it)."""

from __future__ import annotations

from typing import Any

import pytest

from colony.config.models import CellBlock
from colony.errors import ConfigError
from colony.testing import ColonyHarness
from tests.conformance.cells import CALLS, TEST_TYPES, user
from tests.conftest import TreeFactory, cell, hive


def harness(root: Any, **kwargs: Any) -> ColonyHarness:
    kwargs.setdefault("capture", ["/sink"])
    return ColonyHarness(root, cell_types=TEST_TYPES, **kwargs)


# -- rule 1: default TTL at ingress -----------------------------------------------------------


async def test_a_message_sent_without_ttl_carries_the_colony_default(
    make_tree: TreeFactory,
) -> None:
    root = make_tree({"colony.json": {"message_default_ttl": 17}, "main/config.json": hive()})
    async with harness(root) as colony:
        await colony.send("/sink", user())
        await colony.send("/sink", user(), ttl=9)
        await colony.settle()
        assert [m.ttl for m in colony.captured("/sink")] == [16, 8]


# -- rule 5 -----------------------------------------------------------------------------------


async def test_a_message_with_ttl_zero_is_dead_lettered_ttl_expired_and_reaches_nothing(
    make_tree: TreeFactory,
) -> None:
    root = make_tree({"main/config.json": hive()})
    async with harness(root) as colony:
        trace = await colony.send("/sink", user(), ttl=0)
        await colony.settle()
        assert colony.captured("/sink") == []
        [letter] = await colony.dead_letters()
        assert (letter.error_code, letter.trace_id, letter.message.ttl) == ("ttl_expired", trace, 0)
        assert (letter.original_target, letter.resolved_target) == ("/sink", "/sink")


async def test_a_ttl_death_logs_one_error_line_naming_id_target_trace_and_the_default(
    make_tree: TreeFactory,
) -> None:
    root = make_tree({"main/config.json": hive()})
    async with harness(root) as colony:
        trace = await colony.send("/sink", user(), ttl=0)
        await colony.settle()
        [line] = colony.logs(level="error")
        assert line["event"] == "ttl_expired"
        assert line["trace_id"] == trace
        assert line["target"] == "/sink"
        assert line["reason"] == "ttl_expired"
        assert line["message_default_ttl"] == 64
        [letter] = await colony.dead_letters()
        assert line["message_id"] == letter.message_id


# -- rule 6 -----------------------------------------------------------------------------------


async def test_a_cycle_of_hives_ends_in_ttl_expired(make_tree: TreeFactory) -> None:
    root = make_tree(
        {
            "main/config.json": hive({"from": ".", "to": "./b"}),
            "main/b/config.json": hive({"from": ".", "to": ".."}),
        }
    )
    async with harness(root, capture=[]) as colony:
        trace = await colony.send("/", user(), ttl=4)
        await colony.settle()
        [letter] = await colony.dead_letters()
        assert letter.error_code == "ttl_expired"
        log = await colony.message_log(trace)
        assert [(r.from_path, r.to_path, r.ttl) for r in log] == [
            ("@external", "/", 3),
            ("/", "/b", 2),
            ("/b", "/", 1),
            ("/", "/b", 0),
        ]


# -- rule 7 and 8: unresolved paths -----------------------------------------------------------


async def test_an_unresolved_target_with_reply_to_gets_exactly_one_terminal_error_reply(
    make_tree: TreeFactory,
) -> None:
    root = make_tree({"main/config.json": hive()})
    async with harness(root) as colony:
        trace = await colony.send("/nowhere", user(), context={"turn_id": "t1"}, reply_to="/sink")
        await colony.settle()
        [reply] = colony.captured("/sink")
        assert reply.reply_to is None
        assert reply.trace_id == trace
        log = await colony.message_log(trace)
        assert reply.parent_message_id == trace  # the original's id (a source: id == trace)
        assert reply.headers.hop == {
            "finish_reason": "error",
            "error_code": "unresolved_path",
            "dead_target": "/nowhere",
        }
        assert reply.headers.context == {"turn_id": "t1"}
        assert reply.body["messages"][0]["origin"] == "assistant"
        assert await colony.dead_letters() == []
        assert [(r.from_path, r.to_path) for r in log] == [("/colony", "/sink")]


async def test_an_unresolved_target_without_reply_to_is_one_unresolved_path_dead_letter(
    make_tree: TreeFactory,
) -> None:
    root = make_tree({"main/config.json": hive()})
    async with harness(root) as colony:
        await colony.send("nowhere/deeper", user(), ttl=5)
        await colony.settle()
        [letter] = await colony.dead_letters()
        assert (letter.error_code, letter.sender_path) == ("unresolved_path", "/")
        assert (letter.original_target, letter.resolved_target) == (
            "nowhere/deeper",
            "/nowhere/deeper",
        )
        assert letter.message.ttl == 4  # the decision was paid for


async def test_an_error_reply_that_is_itself_unroutable_is_dead_lettered(
    make_tree: TreeFactory,
) -> None:
    root = make_tree({"main/config.json": hive()})
    async with harness(root) as colony:
        await colony.send("/nowhere", user(), reply_to="/gone")
        await colony.settle()
        [letter] = await colony.dead_letters()
        assert (letter.error_code, letter.resolved_target) == ("unresolved_path", "/gone")


# -- rule 9 -----------------------------------------------------------------------------------


async def test_an_emission_matching_no_out_edge_is_one_no_route_dead_letter(
    make_tree: TreeFactory,
) -> None:
    tree = {
        "main/config.json": hive(
            {"from": ".", "to": "./a"},
            {"from": "./a", "to": "/sink", "condition": "has(hop.never)"},
        ),
        "main/a/config.json": cell("echo", {"header": {"k": "v"}, "target": "/elsewhere"}),
    }
    async with harness(make_tree(tree)) as colony:
        await colony.send("/", user())
        await colony.settle()
        [letter] = await colony.dead_letters()
        assert (letter.error_code, letter.sender_path) == ("no_route", "/a")
        assert (letter.original_target, letter.resolved_target) == ("/elsewhere", "/elsewhere")
        assert colony.captured("/sink") == []


async def test_an_unconditional_edge_delivers_what_would_otherwise_be_no_route(
    make_tree: TreeFactory,
) -> None:
    tree = {
        "main/config.json": hive({"from": ".", "to": "./a"}, {"from": "./a", "to": "/sink"}),
        "main/a/config.json": cell("echo", {"header": {"k": "v"}}),
    }
    async with harness(make_tree(tree)) as colony:
        await colony.send("/", user())
        await colony.settle()
        assert len(colony.captured("/sink")) == 1
        assert await colony.dead_letters() == []


# -- rule 10 ----------------------------------------------------------------------------------


async def test_a_hive_whose_out_edges_all_decline_is_hive_no_route_not_unresolved_path(
    make_tree: TreeFactory,
) -> None:
    tree = {
        "main/config.json": hive({"from": ".", "to": "./box"}),
        "main/box/config.json": hive({"from": ".", "to": "/sink", "condition": "has(hop.go)"}),
    }
    async with harness(make_tree(tree)) as colony:
        await colony.send("/box", user(), hop={"stop": True})
        await colony.settle()
        [letter] = await colony.dead_letters()
        assert (letter.error_code, letter.resolved_target, letter.sender_path) == (
            "hive_no_route",
            "/box",
            "/box",
        )


# -- rule 11 ----------------------------------------------------------------------------------


async def test_a_message_to_an_inactive_cell_is_cell_inactive(make_tree: TreeFactory) -> None:
    tree = {
        "main/config.json": hive({"from": ".", "to": "./a"}, {"from": "./a", "to": "/sink"}),
        "main/a/config.json": cell("echo"),
        "main/lonely/config.json": cell("echo"),  # no edge touches it
    }
    async with harness(make_tree(tree)) as colony:
        await colony.send("/lonely", user(), ttl=5)
        await colony.settle()
        [letter] = await colony.dead_letters()
        assert (letter.error_code, letter.resolved_target) == ("cell_inactive", "/lonely")
        assert letter.message.ttl == 5  # no routing decision was paid
        assert "/lonely" not in CALLS


async def test_a_ttl_zero_message_to_an_inactive_cell_is_ttl_expired(
    make_tree: TreeFactory,
) -> None:
    tree = {
        "main/config.json": hive({"from": ".", "to": "/sink"}),
        "main/lonely/config.json": cell("echo"),
    }
    async with harness(make_tree(tree)) as colony:
        await colony.send("/lonely", user(), ttl=0)
        await colony.settle()
        assert [d.error_code for d in await colony.dead_letters()] == ["ttl_expired"]


async def test_a_cell_inside_an_island_hive_is_inactive(make_tree: TreeFactory) -> None:
    tree = {
        "main/config.json": hive({"from": ".", "to": "/sink"}),
        "main/island/config.json": hive({"from": "./a", "to": "./b"}),
        "main/island/a/config.json": cell("echo"),
        "main/island/b/config.json": cell("echo"),
    }
    async with harness(make_tree(tree)) as colony:
        await colony.send("/island/a", user())
        await colony.settle()
        assert [d.error_code for d in await colony.dead_letters()] == ["cell_inactive"]


# -- rule 12 ----------------------------------------------------------------------------------


async def test_two_unconditional_edges_from_one_cell_both_deliver(make_tree: TreeFactory) -> None:
    tree = {
        "main/config.json": hive(
            {"from": ".", "to": "./a"},
            {"from": "./a", "to": "/sink"},
            {"from": "./a", "to": "/park"},
        ),
        "main/a/config.json": cell("echo"),
    }
    async with harness(make_tree(tree), capture=["/sink", "/park"]) as colony:
        await colony.send("/", user())
        await colony.settle()
        assert len(colony.captured("/sink")) == 1
        assert len(colony.captured("/park")) == 1


async def test_fan_out_follows_declaration_order(make_tree: TreeFactory) -> None:
    tree = {
        "main/config.json": hive(
            {"from": ".", "to": "/park"},
            {"from": ".", "to": "/sink"},
        ),
    }
    async with harness(make_tree(tree), capture=["/sink", "/park"]) as colony:
        trace = await colony.send("/", user())
        await colony.settle()
        log = await colony.message_log(trace)
        assert [r.to_path for r in log] == ["/", "/park", "/sink"]


# -- rule 13 ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("condition", "hop", "debug", "warnings"),
    [
        ("hop.tool_name == 'web_search'", {}, 1, 0),
        ("has(hop.tool_name) && hop.tool_name == 'web_search'", {}, 0, 0),
        ("hop.n > 'x'", {"n": 7}, 0, 1),
        ("hopp.x == 1", {}, 0, 1),
        ("hop.n", {"n": 7}, 0, 1),
    ],
)
async def test_a_condition_error_skips_the_edge_missing_keys_at_debug_others_at_warn(
    make_tree: TreeFactory, condition: str, hop: dict[str, Any], debug: int, warnings: int
) -> None:
    tree = {
        "main/config.json": hive(
            {"from": ".", "to": "/sink", "condition": condition}, {"from": ".", "to": "/park"}
        ),
    }
    async with harness(make_tree(tree), capture=["/sink", "/park"]) as colony:
        await colony.send("/", user(), hop=hop)
        await colony.settle()
        assert colony.captured("/sink") == []
        assert len(colony.captured("/park")) == 1
        assert len(colony.logs("edge_condition_missing_key", "debug")) == debug
        assert len(colony.logs("edge_condition_failed", "warning")) == warnings
        assert len(colony.logs(level="warning")) == warnings


# -- rules 14 and 15: modifiers ---------------------------------------------------------------


async def test_modifier_sets_read_the_incoming_headers_and_run_before_deletes(
    make_tree: TreeFactory,
) -> None:
    edge = {
        "from": ".",
        "to": "/sink",
        "modifier": {
            "set_context": {"a": "context.b", "b": "'new-b'", "gone": "'set-then-deleted'"},
            "delete_context": ["gone", "absent"],
            "set_hop": {"route": "'overwritten'", "copy": "hop.route"},
            "delete_hop": ["drop"],
        },
    }
    async with harness(make_tree({"main/config.json": hive(edge)})) as colony:
        await colony.send("/", user(), context={"b": "old-b"}, hop={"route": "in", "drop": 1})
        await colony.settle()
        [message] = colony.captured("/sink")
        assert message.headers.context == {"a": "old-b", "b": "new-b"}
        assert message.headers.hop == {"route": "overwritten", "copy": "in"}


async def test_a_loop_counter_edge_turns_iter_1_into_2(make_tree: TreeFactory) -> None:
    edge = {
        "from": ".",
        "to": "/sink",
        "modifier": {"set_context": {"iter": "int(context.iter) + 1"}},
    }
    async with harness(make_tree({"main/config.json": hive(edge)})) as colony:
        await colony.send("/", user(), context={"iter": 1})
        await colony.send("/", user(), context={"iter": "1"})
        await colony.settle()
        assert [m.headers.context["iter"] for m in colony.captured("/sink")] == [2, 2]


async def test_a_failing_modifier_skips_its_edge_with_a_warning_even_for_a_missing_key(
    make_tree: TreeFactory,
) -> None:
    tree = {
        "main/config.json": hive(
            {"from": ".", "to": "/sink", "modifier": {"set_hop": {"x": "hop.absent"}}},
            {"from": ".", "to": "/park"},
        )
    }
    async with harness(make_tree(tree), capture=["/sink", "/park"]) as colony:
        await colony.send("/", user())
        await colony.settle()
        assert colony.captured("/sink") == []
        assert len(colony.captured("/park")) == 1
        [warning] = colony.logs("edge_modifier_failed", "warning")
        assert warning["key"] == "x"


# -- rule 16 ----------------------------------------------------------------------------------


async def test_an_emission_replaces_the_hop_and_carries_the_context(make_tree: TreeFactory) -> None:
    tree = {
        "main/config.json": hive({"from": ".", "to": "./a"}, {"from": "./a", "to": "/sink"}),
        "main/a/config.json": cell("echo", {"header": {"finish_reason": "stop"}}),
    }
    async with harness(make_tree(tree)) as colony:
        await colony.send("/", user(), context={"turn_id": "t"}, hop={"operation": "select"})
        await colony.settle()
        [message] = colony.captured("/sink")
        assert message.headers.hop == {"finish_reason": "stop"}
        assert message.headers.context == {"turn_id": "t"}
        assert message.reply_to == "/a"


async def test_a_hive_transit_keeps_the_hop_and_passes_reply_to_through(
    make_tree: TreeFactory,
) -> None:
    tree = {
        "main/config.json": hive({"from": ".", "to": "./a"}, {"from": "./a", "to": "./box"}),
        "main/a/config.json": cell("echo", {"header": {"k": 1}}),
        "main/box/config.json": hive({"from": ".", "to": "/sink"}),
    }
    async with harness(make_tree(tree)) as colony:
        await colony.send("/", user())
        await colony.settle()
        [message] = colony.captured("/sink")
        assert message.headers.hop == {"k": 1}
        assert message.reply_to == "/a"


# -- rule 17: restore_ttl ---------------------------------------------------------------------


def _loop_tree(restore: bool) -> dict[str, Any]:
    modifier: dict[str, Any] = {"set_context": {"iter": "int(context.iter) + 1"}}
    if restore:
        modifier["restore_ttl"] = True
    return {
        "main/config.json": hive(
            {"from": ".", "to": "./worker", "modifier": {"set_context": {"iter": "0"}}},
            {
                "from": "./worker",
                "to": "./worker",
                "condition": "int(context.iter) < 6",
                "modifier": modifier,
            },
            {"from": "./worker", "to": "/sink", "condition": "int(context.iter) >= 6"},
        ),
        "main/worker/config.json": cell("echo", {"header": {"round": True}}),
    }


async def test_a_restoring_loop_edge_completes_rounds_a_budget_could_not_pay(
    make_tree: TreeFactory,
) -> None:
    async with harness(make_tree(_loop_tree(True)), colony={"message_default_ttl": 4}) as colony:
        await colony.send("/", user())
        await colony.settle()
        [done] = colony.captured("/sink")
        assert done.headers.context["iter"] == 6
        assert done.ttl <= 4
        assert await colony.dead_letters() == []


async def test_the_same_loop_without_restore_ttl_dies_of_ttl_exhaustion(
    make_tree: TreeFactory,
) -> None:
    async with harness(make_tree(_loop_tree(False)), colony={"message_default_ttl": 4}) as colony:
        await colony.send("/", user())
        await colony.settle()
        assert colony.captured("/sink") == []
        assert [d.error_code for d in await colony.dead_letters()] == ["ttl_expired"]


async def test_restore_ttl_resets_never_accumulates_and_never_lowers(
    make_tree: TreeFactory,
) -> None:
    tree = {
        "main/config.json": hive(
            {"from": ".", "to": "./box", "condition": "true", "modifier": {"restore_ttl": True}},
        ),
        "main/box/config.json": hive(
            {"from": ".", "to": "/sink", "condition": "true", "modifier": {"restore_ttl": True}},
        ),
    }
    async with harness(make_tree(tree), colony={"message_default_ttl": 10}) as colony:
        await colony.send("/", user(), ttl=3)
        await colony.send("/", user(), ttl=50)
        await colony.settle()
        low, high = colony.captured("/sink")
        assert low.ttl == 9  # restored to 10 twice (not 20), then one delivery decision
        assert high.ttl == 47  # a bigger budget is kept: 50 - 3 decisions


# -- rule 18 ----------------------------------------------------------------------------------


async def test_a_restoring_edge_without_a_condition_refuses_the_boot(
    make_tree: TreeFactory,
) -> None:
    tree = {
        "main/config.json": hive({"from": ".", "to": "/sink", "modifier": {"restore_ttl": True}})
    }
    with pytest.raises(ConfigError, match="restore_ttl_unconditional"):
        async with harness(make_tree(tree)):
            pass


# -- rule 19: ttl_notice ----------------------------------------------------------------------


async def test_ttl_notice_tells_the_anchor_once_and_still_dead_letters(
    make_tree: TreeFactory,
) -> None:
    tree = {
        "main/config.json": hive({"from": ".", "to": "./a"}, {"from": "./a", "to": "/sink"}),
        "main/a/config.json": cell("echo"),
    }
    async with harness(make_tree(tree), colony={"ttl_notice": True}) as colony:
        # / (ttl 1 left) -> /a (0 left): /a's emission dies on its way to /sink with
        # reply_to = /a, so /a hears of it once; its echo of the notice then reaches /sink.
        trace = await colony.send("/", user(), context={"turn_id": "t"}, ttl=2)
        await colony.settle()
        letters = await colony.dead_letters()
        assert [d.error_code for d in letters] == ["ttl_expired"]
        _first, notice = CALLS["/a"]
        assert notice.reply_to is None
        assert notice.trace_id == trace
        assert notice.ttl == 63
        assert notice.headers.context == {"turn_id": "t"}
        assert notice.headers.hop == {
            "finish_reason": "error",
            "error_code": "ttl_expired",
            "dead_target": "/sink",
            "dead_message_id": letters[0].message_id,
        }
        assert len(colony.captured("/sink")) == 1


async def test_without_ttl_notice_a_ttl_death_is_only_a_dead_letter(make_tree: TreeFactory) -> None:
    tree = {
        "main/config.json": hive({"from": ".", "to": "./a"}, {"from": "./a", "to": "/sink"}),
        "main/a/config.json": cell("echo"),
    }
    async with harness(make_tree(tree)) as colony:
        await colony.send("/", user(), ttl=2)
        await colony.settle()
        assert len(CALLS["/a"]) == 1
        assert [d.error_code for d in await colony.dead_letters()] == ["ttl_expired"]


# -- rule 21 ----------------------------------------------------------------------------------


async def test_an_emission_to_an_unanswering_colony_endpoint_is_one_unimplemented_dead_letter(
    make_tree: TreeFactory,
) -> None:
    tree = {
        "main/config.json": hive({"from": ".", "to": "./a"}, {"from": "./a", "to": "/sink"}),
        "main/a/config.json": cell("echo", {"target": "/colony/events"}),
    }
    async with harness(make_tree(tree)) as colony:
        await colony.send("/", user())
        await colony.settle()
        [letter] = await colony.dead_letters()
        assert (letter.error_code, letter.sender_path) == ("colony_endpoint_unimplemented", "/a")
        assert colony.captured("/sink") == []


async def test_a_message_to_colony_itself_is_colony_endpoint_invalid(
    make_tree: TreeFactory,
) -> None:
    async with harness(make_tree({"main/config.json": hive()})) as colony:
        await colony.send("/colony", user())
        await colony.settle()
        assert [d.error_code for d in await colony.dead_letters()] == ["colony_endpoint_invalid"]


# -- rules 30 and 31: the message log ---------------------------------------------------------


async def test_a_chain_through_hives_costs_the_arithmetic_ttl_and_logs_each_hive_as_its_own_hop(
    make_tree: TreeFactory,
) -> None:
    tree = {
        "main/config.json": hive(
            {"from": ".", "to": "./a"},
            {"from": "./a", "to": "./box"},
            {"from": "./box/relay", "to": "./out"},
        ),
        "main/a/config.json": cell("echo"),
        "main/box/config.json": hive({"from": ".", "to": "./relay"}),
        "main/box/relay/config.json": cell("echo"),
        "main/out/config.json": hive({"from": ".", "to": "/sink"}),
    }
    async with harness(make_tree(tree)) as colony:
        trace = await colony.send("/", user(), ttl=20)
        await colony.settle()
        [done] = colony.captured("/sink")
        log = await colony.message_log(trace)
        assert [(r.from_path, r.to_path, r.ttl) for r in log] == [
            ("@external", "/", 19),
            ("/", "/a", 18),
            ("/a", "/box", 17),
            ("/box", "/box/relay", 16),
            ("/box/relay", "/out", 15),
            ("/out", "/sink", 14),
        ]
        assert done.ttl == 14  # six routing decisions
        ids = {r.id for r in log}
        roots = [r for r in log if r.parent_message_id is None]
        assert len(roots) == 1
        assert roots[0].from_path == "@external"
        assert all(r.parent_message_id in ids for r in log if r is not roots[0])
        assert all(r.trace_id == trace for r in log)


async def test_only_rows_without_a_parent_come_from_external(make_tree: TreeFactory) -> None:
    tree = {
        "main/config.json": hive({"from": ".", "to": "./a"}, {"from": "./a", "to": "/sink"}),
        "main/a/config.json": cell("echo"),
    }
    async with harness(make_tree(tree)) as colony:
        await colony.send("/", user())
        await colony.send("/a", user())
        await colony.settle()
        log = await colony.message_log()
        assert all((r.from_path == "@external") == (r.parent_message_id is None) for r in log)
        assert sum(r.from_path == "@external" for r in log) == 2


# -- UBF validation of emissions (decisions #4) -----------------------------------------------


async def test_an_emission_that_is_not_ubf_is_dead_lettered_invalid_ubf_body(
    make_tree: TreeFactory,
) -> None:
    tree = {
        "main/config.json": hive({"from": ".", "to": "./a"}, {"from": "./a", "to": "/sink"}),
        "main/a/config.json": cell("echo", {"emit": [{"header": {"x": 1}, "text": "no slots"}]}),
    }
    async with harness(make_tree(tree)) as colony:
        await colony.send("/", user())
        await colony.settle()
        [letter] = await colony.dead_letters()
        assert (letter.error_code, letter.sender_path) == ("invalid_ubf_body", "/a")
        assert colony.captured("/sink") == []


async def test_an_empty_multi_send_stops_the_chain_without_a_dead_letter(
    make_tree: TreeFactory,
) -> None:
    tree = {
        "main/config.json": hive({"from": ".", "to": "./a"}, {"from": "./a", "to": "/sink"}),
        "main/a/config.json": cell("echo", {"emit": []}),
    }
    async with harness(make_tree(tree)) as colony:
        await colony.send("/", user())
        await colony.settle()
        assert colony.captured("/sink") == []
        assert await colony.dead_letters() == []


async def test_each_content_of_a_multi_send_is_routed_in_order(make_tree: TreeFactory) -> None:
    emit = [{"header": {"n": n}, "messages": []} for n in range(3)]
    tree = {
        "main/config.json": hive({"from": ".", "to": "./a"}, {"from": "./a", "to": "/sink"}),
        "main/a/config.json": cell("echo", {"emit": emit}),
    }
    async with harness(make_tree(tree)) as colony:
        await colony.send("/", user())
        await colony.settle()
        assert [m.headers.hop["n"] for m in colony.captured("/sink")] == [0, 1, 2]


def test_a_cell_block_with_timeout_keeps_its_integer() -> None:
    assert CellBlock(type="x", timeout=-1).timeout == -1
