"""Hive transit, fan-out, edge conditions and modifiers, ``restore_ttl`` and egress, over
:func:`colony.routing.route` (runtime.md §2.5–2.8, §4.3)."""

from __future__ import annotations

from typing import Any

import pytest

from colony.routing import route
from tests.colony.routing.tables import (
    codes,
    delivered,
    edge,
    message,
    notes,
    rows,
    table,
)

BOX = ["/", "/box"]


# -- transit ----------------------------------------------------------------------------------


def test_a_hive_transit_costs_one_unit_and_takes_its_out_edges_at_once() -> None:
    routes = table(edge("/box", "/sink"), cells=["/sink"], hives=BOX)
    fx = route(routes, "/", message("/box", ttl=10))
    assert delivered(fx) == [("/sink", 8)]
    assert rows(fx) == [("@external", "/box", 9), ("/box", "/sink", 8)]
    assert fx.decisions == 2
    assert fx.letters == []


def test_a_hive_is_never_delivered_to() -> None:
    routes = table(edge("/box", "/sink"), cells=["/sink"], hives=BOX)
    fx = route(routes, "/", message("/box"))
    assert "/box" not in [d.cell for d in fx.deliveries]


def test_a_transit_copy_keeps_reply_to_correlation_hop_and_body() -> None:
    sent = message(
        "/box", reply_to="/anchor", correlation_id="c", hop={"k": 1}, context={"turn_id": "t"}
    )
    routes = table(edge("/box", "/sink"), cells=["/sink", "/anchor"], hives=BOX)
    [delivery] = route(routes, "/", sent).deliveries
    copy = delivery.message
    assert copy.id != sent.id
    assert (copy.trace_id, copy.parent_message_id) == (sent.trace_id, sent.id)
    assert (copy.reply_to, copy.correlation_id) == ("/anchor", "c")
    assert copy.headers.hop == {"k": 1}
    assert copy.headers.context == {"turn_id": "t"}
    assert copy.body is sent.body


def test_a_transit_copy_is_routed_with_the_hive_as_its_sender() -> None:
    routes = table(edge("/box", "relay"), cells=["/box/relay"], hives=BOX)
    [delivery] = route(routes, "/", message("/box")).deliveries
    assert (delivery.cell, delivery.sender) == ("/box/relay", "/box")


def test_a_transit_leaves_the_incoming_message_addressed_as_it_was_sent() -> None:
    sent = message("box")
    route(table(edge("/box", "/sink"), cells=["/sink"], hives=BOX), "/", sent)
    assert sent.target == "box"


def test_every_matching_out_edge_fans_out_in_declaration_order() -> None:
    routes = table(edge("/", "/park"), edge("/", "/sink"), cells=["/sink", "/park"])
    fx = route(routes, "/", message("/", ttl=5))
    assert delivered(fx) == [("/park", 3), ("/sink", 3)]
    assert [to for _, to, _ in rows(fx)] == ["/", "/park", "/sink"]
    assert fx.decisions == 3


def test_a_hives_copies_are_routed_first_in_first_out() -> None:
    # / fans out to the hive /box (whose copy goes on to /x) and to the cell /y: the copy for
    # /y was queued before /box's own copy, so it is delivered first.
    routes = table(
        edge("/", "/box"),
        edge("/", "/y"),
        edge("/box", "/x"),
        cells=["/x", "/y"],
        hives=BOX,
    )
    fx = route(routes, "/", message("/", ttl=5))
    assert delivered(fx) == [("/y", 3), ("/x", 2)]


def test_a_chain_through_hives_logs_each_hive_as_its_own_hop() -> None:
    routes = table(
        edge("/", "/box"),
        edge("/box", "/out"),
        edge("/out", "/sink"),
        cells=["/sink"],
        hives=["/", "/box", "/out"],
    )
    fx = route(routes, "/", message("/", ttl=20))
    assert rows(fx) == [
        ("@external", "/", 19),
        ("/", "/box", 18),
        ("/box", "/out", 17),
        ("/out", "/sink", 16),
    ]
    ids = {row.message.id for row in fx.logs}
    roots = [row for row in fx.logs if row.message.parent_message_id is None]
    assert [row.from_path for row in roots] == ["@external"]
    assert all(row.message.parent_message_id in ids for row in fx.logs if row not in roots)


def test_a_cycle_of_hives_ends_in_ttl_expired() -> None:
    routes = table(edge("/", "/b"), edge("/b", "/"), hives=["/", "/b"])
    fx = route(routes, "/", message("/", ttl=4))
    assert rows(fx) == [("@external", "/", 3), ("/", "/b", 2), ("/b", "/", 1), ("/", "/b", 0)]
    [letter] = fx.letters
    assert (letter.error_code, letter.sender_path, letter.message.ttl) == ("ttl_expired", "/b", 0)


# -- no out-edge: hive_no_route or egress -----------------------------------------------------


def test_a_hive_whose_out_edges_all_decline_is_hive_no_route_sent_by_the_hive() -> None:
    routes = table(edge("/box", "/sink", "has(hop.go)"), cells=["/sink"], hives=BOX)
    sent = message("box", ttl=5)
    fx = route(routes, "/", sent)
    [letter] = fx.letters
    assert (letter.error_code, letter.sender_path) == ("hive_no_route", "/box")
    assert (letter.original_target, letter.resolved_target) == ("box", "/box")
    assert (letter.message, sent.ttl) == (sent, 4)
    assert rows(fx) == [("@external", "/box", 4)]  # the transit itself was taken
    assert notes(fx) == [("warning", "dead_lettered")]


def test_a_hive_no_route_letter_is_sent_by_reply_to_when_there_is_one() -> None:
    fx = route(table(hives=BOX), "/", message("/box", reply_to="/anchor"))
    [letter] = fx.letters
    assert (letter.error_code, letter.sender_path) == ("hive_no_route", "/anchor")
    assert fx.deliveries == []  # no error reply: only unresolved targets answer reply_to


def test_the_root_hive_egresses_what_no_out_edge_takes_when_egress_is_on() -> None:
    sent = message("/", ttl=5)
    fx = route(table(edge("/", "/sink", "has(hop.go)"), egress=True), "/", sent)
    assert fx.egress == [sent]
    assert fx.letters == []
    assert rows(fx) == [("@external", "/", 4)]


def test_without_egress_the_root_hive_dead_letters_hive_no_route() -> None:
    fx = route(table(), "/", message("/"))
    assert codes(fx) == ["hive_no_route"]
    assert fx.egress == []


def test_only_the_root_hive_egresses() -> None:
    fx = route(table(hives=BOX, egress=True), "/", message("/box"))
    assert codes(fx) == ["hive_no_route"]
    assert fx.egress == []


def test_a_message_an_out_edge_takes_does_not_egress() -> None:
    fx = route(table(edge("/", "/sink"), cells=["/sink"], egress=True), "/", message("/"))
    assert fx.egress == []
    assert delivered(fx) == [("/sink", 62)]


# -- conditions -------------------------------------------------------------------------------


def test_a_condition_reads_the_incoming_context_and_hop() -> None:
    routes = table(
        edge("/", "/sink", "hop.route == 'a' && context.turn_id == 't'"),
        edge("/", "/park", "hop.route == 'b'"),
        cells=["/sink", "/park"],
    )
    fx = route(routes, "/", message("/", hop={"route": "a"}, context={"turn_id": "t"}))
    assert [d.cell for d in fx.deliveries] == ["/sink"]
    assert fx.notes == []


@pytest.mark.parametrize(
    ("condition", "hop", "expected"),
    [
        ("hop.tool_name == 'web_search'", {}, [("debug", "edge_condition_missing_key")]),
        ("has(hop.tool_name) && hop.tool_name == 'web_search'", {}, []),
        ("hop.n > 'x'", {"n": 7}, [("warning", "edge_condition_failed")]),
        ("hopp.x == 1", {}, [("warning", "edge_condition_failed")]),
        ("hop.n", {"n": 7}, [("warning", "edge_condition_failed")]),
        ("false", {}, []),
    ],
)
def test_an_edge_whose_condition_does_not_hold_is_skipped_errors_noted_missing_keys_at_debug(
    condition: str, hop: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    routes = table(edge("/", "/sink", condition), edge("/", "/park"), cells=["/sink", "/park"])
    fx = route(routes, "/", message("/", hop=hop))
    assert [d.cell for d in fx.deliveries] == ["/park"]
    assert notes(fx) == expected


def test_a_condition_note_names_the_edge_its_condition_and_the_trace() -> None:
    routes = table(edge("/", "/sink", "hop.n > 'x'"))
    sent = message("/", hop={"n": 7})
    fx = route(routes, "/", sent)
    note = next(n for n in fx.notes if n.event == "edge_condition_failed")
    [compiled] = routes.edges.all()
    assert note.fields["edge_id"] == compiled.id
    assert (note.fields["from"], note.fields["to"]) == ("/", "/sink")
    assert (note.fields["condition"], note.fields["trace_id"]) == ("hop.n > 'x'", sent.trace_id)
    assert note.fields["error"]


def test_a_chain_of_hives_converts_the_headers_for_cel_once_per_set_of_headers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    routes = table(
        edge("/", "/a", "hop.route == 'go'"),
        edge("/a", "/a/b", "int(context.iter) < 3", set_context={"iter": "int(context.iter) + 1"}),
        edge("/a/b", "/a/b/c", "int(context.iter) < 3"),
        edge("/a/b/c", "/sink", "int(context.iter) == 1"),
        cells=["/sink"],
        hives=["/", "/a", "/a/b", "/a/b/c"],
    )
    engine = routes.edges._engine
    built: list[dict[str, Any]] = []
    convert = engine.activation

    def counting(values: Any) -> Any:
        built.append(dict(values))
        return convert(values)

    monkeypatch.setattr(engine, "activation", counting)
    for _ in range(2):
        fx = route(routes, "/", message("/", hop={"route": "go"}, context={"iter": 0}))
        assert delivered(fx) == [("/sink", 59)]
    # Per message: the headers it came with (read at / and /a) and those /a's modifier made
    # (read at /a/b and /a/b/c); a second message with equal headers is converted afresh.
    assert [b["context"] for b in built] == [{"iter": 0}, {"iter": 1}] * 2


# -- modifiers --------------------------------------------------------------------------------


def test_modifier_sets_read_the_incoming_headers_and_run_before_deletes() -> None:
    modified = edge(
        "/",
        "/sink",
        set_context={"a": "context.b", "b": "'new-b'", "gone": "'set-then-deleted'"},
        delete_context=["gone", "absent"],
        set_hop={"route": "'overwritten'", "copy": "hop.route"},
        delete_hop=["drop"],
    )
    sent = message("/", context={"b": "old-b"}, hop={"route": "in", "drop": 1})
    [delivery] = route(table(modified, cells=["/sink"]), "/", sent).deliveries
    assert delivery.message.headers.context == {"a": "old-b", "b": "new-b"}
    assert delivery.message.headers.hop == {"route": "overwritten", "copy": "in"}
    assert sent.headers.context == {"b": "old-b"}  # the incoming headers are left as they were


def test_a_loop_counter_modifier_turns_iter_1_into_2() -> None:
    counter = edge("/", "/sink", set_context={"iter": "int(context.iter) + 1"})
    routes = table(counter, cells=["/sink"])
    for start in (1, "1"):
        [delivery] = route(routes, "/", message("/", context={"iter": start})).deliveries
        assert delivery.message.headers.context["iter"] == 2


def test_modifiers_compose_along_the_path_later_edges_win() -> None:
    routes = table(
        edge("/", "/box", set_hop={"k": "'first'", "a": "'kept'"}),
        edge("/box", "/sink", set_hop={"k": "'second'"}),
        cells=["/sink"],
        hives=BOX,
    )
    [delivery] = route(routes, "/", message("/")).deliveries
    assert delivery.message.headers.hop == {"k": "second", "a": "kept"}


def test_a_failing_modifier_skips_its_edge_with_a_warning_naming_the_key() -> None:
    routes = table(
        edge("/", "/sink", set_hop={"ok": "'fine'", "x": "hop.absent"}),
        edge("/", "/park"),
        cells=["/sink", "/park"],
    )
    fx = route(routes, "/", message("/"))
    assert [d.cell for d in fx.deliveries] == ["/park"]
    [note] = fx.notes
    assert (note.level, note.event, note.fields["key"]) == ("warning", "edge_modifier_failed", "x")


# -- restore_ttl ------------------------------------------------------------------------------


def test_a_restoring_transit_edge_resets_the_budget_never_accumulating_never_lowering() -> None:
    routes = table(
        edge("/", "/box", "true", restore_ttl=True),
        edge("/box", "/sink", "true", restore_ttl=True),
        cells=["/sink"],
        hives=BOX,
        default_ttl=10,
    )
    assert delivered(route(routes, "/", message("/", ttl=3))) == [("/sink", 9)]
    assert delivered(route(routes, "/", message("/", ttl=50))) == [("/sink", 47)]


def test_a_restoring_edge_restores_only_its_own_copy() -> None:
    routes = table(
        edge("/", "/sink", "true", restore_ttl=True),
        edge("/", "/park"),
        cells=["/sink", "/park"],
        default_ttl=10,
    )
    assert delivered(route(routes, "/", message("/", ttl=3))) == [("/sink", 9), ("/park", 1)]
