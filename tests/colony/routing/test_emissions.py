"""What a cell emitted, over :func:`colony.routing.route_emissions` (runtime.md §1.4, §2.4):
UBF and contract checks, direct ``/colony/*`` emissions, out-edges or ``no_route``, and a
long-running cell's own emissions."""

from __future__ import annotations

from typing import Any, cast

import pytest

from colony.cell import Emission
from colony.routing import Emitter, route_emissions
from colony.ubf import body_problem
from tests.colony.routing.tables import (
    codes,
    contract,
    delivered,
    edge,
    handled,
    message,
    notes,
    rows,
    table,
)

A = Emitter("/a")
OUT = {"header": {"finish_reason": "stop"}, "messages": []}
ROUTE = contract(route={"type": "string", "values": ["left", "right"]})
"""A contract whose emissions must carry ``hop.route``, ``left`` or ``right``."""


def test_an_emission_follows_every_out_edge_of_its_cell_with_reply_to_the_cell() -> None:
    parent = handled("/a", ttl=10, context={"turn_id": "t"}, correlation_id="c")
    routes = table(edge("/a", "/sink"), edge("/a", "/park"), cells=["/sink", "/park"])
    fx = route_emissions(routes, A, parent, [OUT])
    assert delivered(fx) == [("/sink", 9), ("/park", 9)]
    for delivery in fx.deliveries:
        follow = delivery.message
        assert (delivery.sender, follow.reply_to) == ("/a", "/a")
        assert (follow.trace_id, follow.parent_message_id) == (parent.trace_id, parent.id)
        assert follow.correlation_id == "c"
        assert follow.body == {"messages": []}
    assert rows(fx) == [("/a", "/sink", 9), ("/a", "/park", 9)]
    assert fx.decisions == 2


def test_an_emission_replaces_the_hop_and_carries_the_context() -> None:
    parent = handled("/a", context={"turn_id": "t"}, hop={"operation": "select"})
    fx = route_emissions(table(edge("/a", "/sink"), cells=["/sink"]), A, parent, [OUT])
    [delivery] = fx.deliveries
    assert delivery.message.headers.hop == {"finish_reason": "stop"}
    assert delivery.message.headers.context == {"turn_id": "t"}


def test_an_emission_with_a_non_object_header_gets_an_empty_hop() -> None:
    parent = handled("/a", hop={"operation": "select"})
    content = {"header": "not an object", "messages": []}
    fx = route_emissions(table(edge("/a", "/sink"), cells=["/sink"]), A, parent, [content])
    [delivery] = fx.deliveries
    assert delivery.message.headers.hop == {}
    assert delivery.message.body == {"messages": []}


def test_a_cells_emissions_are_routed_in_the_order_it_made_them() -> None:
    outputs = [{"header": {"n": n}, "messages": []} for n in range(3)]
    routes = table(edge("/a", "/sink"), cells=["/sink"])
    fx = route_emissions(routes, A, handled("/a"), outputs)
    assert [d.message.headers.hop["n"] for d in fx.deliveries] == [0, 1, 2]


def test_each_follow_up_is_routed_to_completion_before_the_next_edge_is_taken() -> None:
    routes = table(
        edge("/a", "/box"),
        edge("/a", "/y"),
        edge("/box", "/x"),
        cells=["/x", "/y"],
        hives=["/", "/box"],
    )
    fx = route_emissions(routes, A, handled("/a", ttl=10), [OUT])
    assert delivered(fx) == [("/x", 8), ("/y", 9)]


def test_no_outputs_route_nothing_and_leave_no_letter() -> None:
    fx = route_emissions(table(edge("/a", "/sink"), cells=["/sink"]), A, handled("/a"), [])
    assert (fx.deliveries, fx.letters, fx.notes, fx.decisions) == ([], [], [], 0)


def test_an_emission_edge_condition_reads_the_emitted_hop_and_the_carried_context() -> None:
    routes = table(
        edge("/a", "/sink", "hop.route == 'left'"),
        edge("/a", "/park", "context.turn_id == 't'"),
        edge("/a", "/never", "hop.route == 'right'"),
        cells=["/sink", "/park", "/never"],
    )
    content = {"header": {"route": "left"}, "messages": []}
    parent = handled("/a", context={"turn_id": "t"}, hop={"route": "right"})
    fx = route_emissions(routes, A, parent, [content])
    assert [d.cell for d in fx.deliveries] == ["/sink", "/park"]


def test_an_emission_edge_modifier_sets_and_deletes_context_and_hop_keys() -> None:
    modified = edge(
        "/a",
        "/sink",
        set_context={"iter": "int(context.iter) + 1"},
        delete_context=["secret"],
        set_hop={"seen": "hop.finish_reason"},
        delete_hop=["finish_reason"],
    )
    parent = handled("/a", context={"iter": 1, "secret": "s"})
    [delivery] = route_emissions(table(modified, cells=["/sink"]), A, parent, [OUT]).deliveries
    assert delivery.message.headers.context == {"iter": 2}
    assert delivery.message.headers.hop == {"seen": "stop"}
    assert parent.headers.context == {"iter": 1, "secret": "s"}


def test_a_skipped_emission_edge_is_noted_against_the_handled_messages_trace() -> None:
    routes = table(edge("/a", "/sink", "hop.missing == 1"), edge("/a", "/park"), cells=["/park"])
    parent = handled("/a")
    fx = route_emissions(routes, A, parent, [OUT])
    assert [d.cell for d in fx.deliveries] == ["/park"]
    [note] = fx.notes
    assert (note.level, note.event) == ("debug", "edge_condition_missing_key")
    assert note.fields["trace_id"] == parent.trace_id


# -- no_route ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "reply_to", "named"),
    [
        ("/elsewhere", "/anchor", "/elsewhere"),  # the target the cell named
        (None, "/anchor", "/anchor"),  # else the handled message's reply_to
        (None, None, "/a"),  # else the handled message's own target
    ],
)
def test_an_emission_matching_no_out_edge_is_one_no_route_letter_naming_its_target(
    target: str | None, reply_to: str | None, named: str
) -> None:
    parent = handled("/a", ttl=7, reply_to=reply_to, context={"turn_id": "t"})
    content = {"header": {"k": "v"}, "messages": []}
    routes = table(edge("/a", "/sink", "has(hop.never)"), cells=["/sink", "/anchor"])
    fx = route_emissions(routes, A, parent, [Emission(content, target)])
    [letter] = fx.letters
    assert (letter.error_code, letter.sender_path) == ("no_route", "/a")
    assert (letter.original_target, letter.resolved_target) == (named, named)
    dead = letter.message
    assert (dead.trace_id, dead.parent_message_id, dead.ttl) == (parent.trace_id, parent.id, 7)
    assert dead.headers.hop == {"k": "v"}
    assert dead.headers.context == {"turn_id": "t"}
    assert dead.body == {"messages": []}
    assert (fx.deliveries, fx.decisions) == ([], 0)
    assert notes(fx) == [("warning", "dead_lettered")]


def test_an_emission_from_a_cell_without_out_edges_is_no_route() -> None:
    fx = route_emissions(table(), A, handled("/a"), [OUT])
    assert codes(fx) == ["no_route"]


def test_an_unconditional_edge_delivers_what_would_otherwise_be_no_route() -> None:
    routes = table(edge("/a", "/sink", "has(hop.never)"), edge("/a", "/park"), cells=["/park"])
    fx = route_emissions(routes, A, handled("/a"), [OUT])
    assert fx.letters == []
    assert [d.cell for d in fx.deliveries] == ["/park"]


# -- UBF --------------------------------------------------------------------------------------


@pytest.mark.parametrize("content", [[1, 2], "text", None, 3])
def test_an_emission_that_is_not_an_object_is_invalid_ubf_body(content: Any) -> None:
    parent = handled("/a", reply_to="/anchor")
    routes = table(edge("/a", "/sink"), cells=["/sink", "/anchor"])
    fx = route_emissions(routes, A, parent, [cast(Any, content)])
    [letter] = fx.letters
    assert (letter.error_code, letter.sender_path) == ("invalid_ubf_body", "/a")
    assert letter.original_target == "/anchor"
    assert letter.message.body == content
    assert letter.message.headers.hop == {}
    assert (fx.deliveries, fx.decisions) == ([], 0)


def test_an_emission_whose_body_is_not_ubf_is_invalid_ubf_body_naming_the_problem() -> None:
    content = {"header": {"x": 1}, "text": "no slots"}
    routes = table(edge("/a", "/sink"), cells=["/sink"])
    fx = route_emissions(routes, A, handled("/a"), [content])
    [letter] = fx.letters
    assert letter.error_code == "invalid_ubf_body"
    assert letter.detail == body_problem({"text": "no slots"})
    assert letter.message.headers.hop == {"x": 1}
    assert fx.deliveries == []


def test_a_bad_emission_does_not_stop_the_next_one() -> None:
    routes = table(edge("/a", "/sink"), cells=["/sink"])
    fx = route_emissions(routes, A, handled("/a"), [{"text": "no slots"}, OUT])
    assert codes(fx) == ["invalid_ubf_body"]
    assert [d.cell for d in fx.deliveries] == ["/sink"]


# -- contract.emits ---------------------------------------------------------------------------


def test_a_contract_violation_with_reply_to_answers_reply_to_directly_bypassing_the_edges() -> None:
    parent = handled("/a", ttl=10, reply_to="/anchor", context={"turn_id": "t"})
    routes = table(edge("/a", "/sink"), cells=["/sink", "/anchor"])
    fx = route_emissions(routes, Emitter("/a", ROUTE), parent, [OUT])
    assert fx.letters == []
    [delivery] = fx.deliveries
    reply = delivery.message
    assert (delivery.cell, delivery.sender, reply.reply_to) == ("/anchor", "/a", None)
    assert reply.headers.hop == {"finish_reason": "error", "error_code": "contract_violation"}
    assert reply.headers.context == {"turn_id": "t"}
    assert "route" in reply.body["messages"][0]["text"]
    assert (reply.ttl, reply.parent_message_id) == (9, parent.id)


def test_a_contract_violation_without_reply_to_is_a_contract_violation_letter() -> None:
    routes = table(edge("/a", "/sink"), cells=["/sink"])
    fx = route_emissions(routes, Emitter("/a", ROUTE), handled("/a"), [OUT])
    [letter] = fx.letters
    assert (letter.error_code, letter.sender_path) == ("contract_violation", "/a")
    assert letter.detail is not None
    assert "route" in letter.detail
    assert fx.deliveries == []


def test_a_long_running_cells_own_emission_that_breaks_its_contract_is_a_letter() -> None:
    routes = table(edge("/a", "/sink"), cells=["/sink"])
    fx = route_emissions(routes, Emitter("/a", ROUTE), None, [OUT])
    assert codes(fx) == ["contract_violation"]
    assert fx.letters[0].message.parent_message_id is None


def test_an_emission_that_keeps_its_contract_takes_the_edges() -> None:
    content = {"header": {"route": "left"}, "messages": []}
    routes = table(edge("/a", "/sink"), cells=["/sink"])
    fx = route_emissions(routes, Emitter("/a", ROUTE), handled("/a"), [content])
    assert (codes(fx), [d.cell for d in fx.deliveries]) == ([], ["/sink"])


def test_an_emitter_without_a_contract_is_not_checked_here() -> None:
    routes = table(edge("/a", "/sink"), cells=["/sink"])
    fx = route_emissions(routes, Emitter("/a"), handled("/a", reply_to="/x"), [OUT])
    assert (codes(fx), [d.cell for d in fx.deliveries]) == ([], ["/sink"])


# -- /colony/* emissions ----------------------------------------------------------------------


def test_an_emission_to_a_colony_read_goes_direct_with_reply_to_the_emitter() -> None:
    parent = handled("/a", ttl=10, reply_to="/anchor", context={"turn_id": "t"})
    content = {"header": {"ask": 1}, "messages": [], "query": {}}
    fx = route_emissions(table(), A, parent, [Emission(content, "/colony/registry")])
    [read] = fx.reads
    asked = read.message
    assert (read.endpoint, asked.target, asked.reply_to) == (
        "/colony/registry",
        "/colony/registry",
        "/a",
    )
    assert (asked.ttl, asked.parent_message_id, asked.trace_id) == (9, parent.id, parent.trace_id)
    assert asked.headers.hop == {"ask": 1}
    assert asked.headers.context == {"turn_id": "t"}
    assert asked.body == {"messages": [], "query": {}}
    assert (fx.letters, fx.logs, fx.decisions) == ([], [], 1)


def test_an_emission_to_a_colony_path_ignores_the_cells_out_edges() -> None:
    routes = table(edge("/a", "/sink"), cells=["/sink"])
    fx = route_emissions(routes, A, handled("/a"), [Emission(OUT, "/colony/graph")])
    assert fx.deliveries == []
    assert len(fx.reads) == 1


@pytest.mark.parametrize(
    ("target", "code"),
    [
        ("/colony/dead_letters/x", "colony_endpoint_unimplemented"),
        ("/colony/events", "colony_endpoint_unimplemented"),
        ("/colony", "colony_endpoint_invalid"),
    ],
)
def test_an_emission_to_a_colony_path_that_answers_nothing_is_a_letter_sent_by_the_cell(
    target: str, code: str
) -> None:
    fx = route_emissions(table(), A, handled("/a"), [Emission(OUT, target)])
    [letter] = fx.letters
    assert (letter.error_code, letter.sender_path, letter.resolved_target) == (code, "/a", target)
    assert fx.reads == []


# -- a long-running cell's own emissions ------------------------------------------------------


def test_a_long_running_cells_own_emission_starts_a_new_trace_with_the_default_ttl() -> None:
    routes = table(edge("/t", "/sink"), cells=["/sink"], default_ttl=30)
    fx = route_emissions(routes, Emitter("/t"), None, [OUT, OUT])
    first, second = (d.message for d in fx.deliveries)
    assert (first.parent_message_id, first.ttl, first.reply_to) == (None, 29, "/t")
    assert first.headers.context == {}
    assert first.headers.hop == {"finish_reason": "stop"}
    assert first.trace_id != second.trace_id
    assert rows(fx) == [("@external", "/sink", 29), ("@external", "/sink", 29)]


def test_a_long_running_cells_emission_matching_no_edge_names_the_cell_as_its_target() -> None:
    fx = route_emissions(table(), Emitter("/t"), None, [OUT])
    [letter] = fx.letters
    assert (letter.error_code, letter.original_target, letter.sender_path) == (
        "no_route",
        "/t",
        "/t",
    )
    assert letter.message.parent_message_id is None


def test_a_long_running_cells_own_read_has_no_parent_and_the_default_budget() -> None:
    routes = table(default_ttl=30)
    fx = route_emissions(routes, Emitter("/t"), None, [Emission(OUT, "/colony/registry")])
    [read] = fx.reads
    assert (read.message.parent_message_id, read.message.ttl) == (None, 29)


# -- restore_ttl ------------------------------------------------------------------------------


def test_a_restoring_emission_edge_gives_back_the_default_budget_and_never_lowers_it() -> None:
    routes = table(
        edge("/a", "/sink", "true", restore_ttl=True),
        edge("/a", "/park"),
        cells=["/sink", "/park"],
        default_ttl=10,
    )
    assert delivered(route_emissions(routes, A, handled("/a", ttl=2), [OUT])) == [
        ("/sink", 9),
        ("/park", 1),
    ]
    assert delivered(route_emissions(routes, A, handled("/a", ttl=50), [OUT])) == [
        ("/sink", 49),
        ("/park", 49),
    ]


def test_a_restoring_emission_edge_rescues_an_emission_whose_input_had_no_budget_left() -> None:
    routes = table(edge("/a", "/sink", "true", restore_ttl=True), cells=["/sink"], default_ttl=10)
    fx = route_emissions(routes, A, handled("/a", ttl=0), [OUT])
    assert (codes(fx), delivered(fx)) == ([], [("/sink", 9)])


def test_a_handled_message_with_no_budget_left_has_its_emissions_die_ttl_expired() -> None:
    parent = handled("/a", ttl=0, reply_to="/anchor")
    routes = table(edge("/a", "/sink"), cells=["/sink", "/anchor"])
    fx = route_emissions(routes, A, parent, [OUT])
    assert codes(fx) == ["ttl_expired"]
    [letter] = fx.letters
    assert (letter.sender_path, letter.message.reply_to) == ("/a", "/a")


def test_message_fields_untouched_by_routing_stay_as_given() -> None:
    sent = message("/a")
    before = (sent.id, sent.trace_id, sent.headers.context, sent.body)
    route_emissions(table(edge("/a", "/sink"), cells=["/sink"]), A, sent, [OUT])
    assert (sent.id, sent.trace_id, sent.headers.context, sent.body) == before
