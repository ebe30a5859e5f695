"""The rules of one routing decision, over :func:`colony.routing.route` (no event loop).

runtime.md §2.3 and §4: an inactive cell takes nothing and nothing is spent; TTL 0 dies before
the target is resolved; otherwise every decision costs one unit, and the target is ``/colony``
(invalid), a ``/colony/*`` endpoint, a cell, or nothing at all. Hive transits are in
``tests/colony/routing/test_transit.py``, emissions and outcomes beside them. The same rules are
pinned end to end in ``tests/conformance``.
"""

from __future__ import annotations

import pytest

from colony.effects import Read
from colony.paths import ANSWERING
from colony.routing import route
from colony.ubf import body_problem
from tests.colony.routing.tables import (
    codes,
    delivered,
    edge,
    message,
    notes,
    rows,
    table,
)

# -- an inactive cell -------------------------------------------------------------------------


def test_a_message_to_an_inactive_cell_is_cell_inactive_and_spends_no_ttl() -> None:
    sent = message("/lonely", ttl=5)
    fx = route(table(inactive=["/lonely"]), "/", sent)
    [letter] = fx.letters
    assert (letter.error_code, letter.sender_path) == ("cell_inactive", "/")
    assert (letter.original_target, letter.resolved_target) == ("/lonely", "/lonely")
    assert letter.message is sent
    assert sent.ttl == 5
    assert (fx.deliveries, fx.logs, fx.decisions) == ([], [], 0)
    assert notes(fx) == [("warning", "dead_lettered")]


def test_an_inactive_cell_is_found_through_a_relative_target() -> None:
    fx = route(table(inactive=["/main/lonely"]), "/main/agent", message("../lonely", ttl=5))
    [letter] = fx.letters
    assert (letter.error_code, letter.sender_path) == ("cell_inactive", "/main/agent")
    assert (letter.original_target, letter.resolved_target) == ("../lonely", "/main/lonely")


def test_a_ttl_zero_message_to_an_inactive_cell_is_ttl_expired_not_cell_inactive() -> None:
    fx = route(table(inactive=["/lonely"]), "/", message("/lonely", ttl=0))
    assert codes(fx) == ["ttl_expired"]


# -- TTL --------------------------------------------------------------------------------------


def test_a_delivery_costs_one_ttl_unit_and_resolves_the_target() -> None:
    sent = message("sink", ttl=5)
    fx = route(table(cells=["/sink"]), "/", sent)
    [delivery] = fx.deliveries
    assert (delivery.cell, delivery.message, delivery.sender) == ("/sink", sent, "/")
    assert (sent.ttl, sent.target) == (4, "/sink")
    assert fx.decisions == 1
    assert (fx.letters, fx.notes) == ([], [])


def test_a_message_with_ttl_one_is_delivered_with_none_left() -> None:
    fx = route(table(cells=["/sink"]), "/", message("/sink", ttl=1))
    assert delivered(fx) == [("/sink", 0)]


def test_a_ttl_zero_message_dies_ttl_expired_and_reaches_nothing() -> None:
    sent = message("/sink", ttl=0)
    fx = route(table(cells=["/sink"]), "/", sent)
    [letter] = fx.letters
    assert (letter.error_code, letter.sender_path, letter.message) == ("ttl_expired", "/", sent)
    assert (fx.deliveries, fx.logs) == ([], [])
    assert sent.ttl == 0


def test_a_ttl_death_happens_before_resolution_so_the_letter_names_the_raw_target() -> None:
    fx = route(table(), "/main/a", message("../nowhere/x", ttl=0))
    [letter] = fx.letters
    assert (letter.original_target, letter.resolved_target) == ("../nowhere/x", "../nowhere/x")
    assert letter.sender_path == "/main/a"


def test_a_ttl_death_is_one_error_note_naming_the_resolved_target_and_the_default() -> None:
    sent = message("sink", ttl=0)
    fx = route(table(cells=["/main/sink"], default_ttl=17), "/main", sent)
    [note] = fx.notes
    assert (note.level, note.event) == ("error", "ttl_expired")
    assert note.fields["target"] == "/main/sink"
    assert note.fields["message_default_ttl"] == 17
    assert (note.fields["message_id"], note.fields["trace_id"]) == (sent.id, sent.trace_id)
    assert (note.fields["sender"], note.fields["reason"]) == ("/main", "ttl_expired")


def test_a_ttl_death_counts_as_a_decision_though_it_spends_nothing() -> None:
    fx = route(table(cells=["/sink"]), "/", message("/sink", ttl=0))
    assert fx.decisions == 1


def test_a_negative_ttl_dies_like_ttl_zero() -> None:
    fx = route(table(cells=["/sink"]), "/", message("/sink", ttl=-3))
    assert codes(fx) == ["ttl_expired"]
    assert fx.deliveries == []


# -- ttl_notice -------------------------------------------------------------------------------


def test_ttl_notice_tells_reply_to_once_with_the_default_budget_and_still_dead_letters() -> None:
    dying = message("/sink", ttl=0, reply_to="/anchor", context={"turn_id": "t"}, parent="p")
    routes = table(cells=["/sink", "/anchor"], ttl_notice=True, default_ttl=30)
    fx = route(routes, "/a", dying)
    assert codes(fx) == ["ttl_expired"]
    [delivery] = fx.deliveries
    notice = delivery.message
    assert (delivery.cell, delivery.sender) == ("/anchor", "/colony")
    assert (notice.reply_to, notice.trace_id, notice.parent_message_id) == (
        None,
        dying.trace_id,
        dying.id,
    )
    assert notice.ttl == 29  # the default, less the decision that delivered it
    assert notice.headers.context == {"turn_id": "t"}
    assert notice.headers.hop == {
        "finish_reason": "error",
        "error_code": "ttl_expired",
        "dead_target": "/sink",
        "dead_message_id": dying.id,
    }
    assert body_problem(notice.body) is None
    assert "/sink" in notice.body["messages"][0]["text"]
    assert rows(fx) == [("/colony", "/anchor", 29)]


def test_without_ttl_notice_a_ttl_death_with_reply_to_is_only_a_dead_letter() -> None:
    fx = route(table(cells=["/sink", "/anchor"]), "/a", message("/sink", ttl=0, reply_to="/anchor"))
    assert codes(fx) == ["ttl_expired"]
    assert fx.deliveries == []


def test_ttl_notice_without_reply_to_is_only_a_dead_letter() -> None:
    fx = route(table(cells=["/sink"], ttl_notice=True), "/a", message("/sink", ttl=0))
    assert codes(fx) == ["ttl_expired"]
    assert fx.deliveries == []


def test_a_ttl_notice_nobody_can_receive_is_dead_lettered_and_begets_no_second_notice() -> None:
    routes = table(cells=["/sink"], ttl_notice=True)
    fx = route(routes, "/a", message("/sink", ttl=0, reply_to="/gone"))
    assert codes(fx) == ["ttl_expired", "unresolved_path"]
    assert fx.letters[1].sender_path == "/colony"
    assert fx.deliveries == []


# -- /colony ----------------------------------------------------------------------------------


def test_a_message_to_colony_itself_is_colony_endpoint_invalid_after_one_unit() -> None:
    sent = message("/colony", ttl=5, reply_to="/anchor")
    fx = route(table(cells=["/anchor"]), "/", sent)
    [letter] = fx.letters
    assert (letter.error_code, letter.resolved_target) == ("colony_endpoint_invalid", "/colony")
    assert (sent.ttl, fx.decisions) == (4, 1)
    assert (fx.deliveries, fx.logs, fx.reads) == ([], [], [])


@pytest.mark.parametrize("endpoint", ["/colony/mutations", "/colony/events", "/colony/x/y"])
def test_a_colony_path_that_answers_nothing_is_colony_endpoint_unimplemented(
    endpoint: str,
) -> None:
    sent = message(endpoint, ttl=5, reply_to="/anchor")
    fx = route(table(cells=["/anchor"]), "/a", sent)
    [letter] = fx.letters
    assert (letter.error_code, letter.sender_path) == ("colony_endpoint_unimplemented", "/a")
    assert letter.resolved_target == endpoint
    assert (sent.ttl, fx.decisions) == (4, 1)
    assert (fx.deliveries, fx.logs, fx.reads) == ([], [], [])


@pytest.mark.parametrize("endpoint", sorted(ANSWERING))
def test_a_read_with_reply_to_is_left_to_the_colony_as_a_read_after_one_unit(
    endpoint: str,
) -> None:
    sent = message(endpoint, ttl=5, reply_to="/anchor")
    fx = route(table(cells=["/anchor"]), "/a", sent)
    assert fx.reads == [Read(endpoint, sent)]
    assert (sent.ttl, fx.decisions) == (4, 1)
    assert (fx.letters, fx.deliveries, fx.logs, fx.notes) == ([], [], [], [])


def test_a_read_without_reply_to_is_an_unanswered_warning_and_no_read() -> None:
    sent = message("/colony/registry", ttl=5)
    fx = route(table(), "/a", sent)
    assert (fx.reads, fx.letters) == ([], [])
    [note] = fx.notes
    assert (note.level, note.event) == ("warning", "colony_read_unanswered")
    assert (note.fields["endpoint"], note.fields["sender"]) == ("/colony/registry", "/a")
    assert fx.decisions == 1


def test_a_relative_target_can_name_a_colony_endpoint() -> None:
    sent = message("../colony/registry", reply_to="/main/a")
    fx = route(table(), "/main", sent)
    assert [read.endpoint for read in fx.reads] == ["/colony/registry"]


# -- cells and path resolution ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("sender", "target", "resolved"),
    [
        ("/main/agent", "./tool", "/main/agent/tool"),
        ("/main/agent", "tool", "/main/agent/tool"),
        ("/main/agent", "../collector", "/main/collector"),
        ("/main/agent", "../../../x", "/x"),
        ("/main/agent", "", "/main/agent"),
        ("/main/agent", ".", "/main/agent"),
        ("/", "/x//y/./", "/x/y"),
    ],
)
def test_a_target_resolves_against_its_sender(sender: str, target: str, resolved: str) -> None:
    sent = message(target)
    fx = route(table(cells=[resolved]), sender, sent)
    [delivery] = fx.deliveries
    assert (delivery.cell, delivery.sender, sent.target) == (resolved, sender, resolved)


def test_a_path_that_is_both_a_cell_and_a_hive_is_delivered_to_the_cell() -> None:
    routes = table(edge("/both", "/sink"), cells=["/both", "/sink"], hives=["/", "/both"])
    fx = route(routes, "/", message("/both", ttl=5))
    assert delivered(fx) == [("/both", 4)]


# -- unresolved paths -------------------------------------------------------------------------


def test_an_unresolved_target_without_reply_to_is_one_unresolved_path_letter_after_one_unit() -> (
    None
):
    sent = message("nowhere/deeper", ttl=5)
    fx = route(table(), "/", sent)
    [letter] = fx.letters
    assert (letter.error_code, letter.sender_path) == ("unresolved_path", "/")
    assert (letter.original_target, letter.resolved_target) == ("nowhere/deeper", "/nowhere/deeper")
    assert (letter.message.ttl, fx.decisions) == (4, 1)
    assert fx.logs == []
    assert notes(fx) == [("warning", "dead_lettered")]


def test_an_unresolved_target_with_reply_to_gets_one_terminal_error_reply_and_no_letter() -> None:
    sent = message(
        "/nowhere", ttl=5, reply_to="/anchor", context={"turn_id": "t1"}, correlation_id="c"
    )
    fx = route(table(cells=["/anchor"]), "/", sent)
    assert fx.letters == []
    [delivery] = fx.deliveries
    reply = delivery.message
    assert (delivery.cell, delivery.sender) == ("/anchor", "/colony")
    assert (reply.reply_to, reply.trace_id, reply.parent_message_id) == (None, sent.id, sent.id)
    assert reply.correlation_id == "c"
    assert reply.headers.hop == {
        "finish_reason": "error",
        "error_code": "unresolved_path",
        "dead_target": "/nowhere",
    }
    assert reply.headers.context == {"turn_id": "t1"}
    assert body_problem(reply.body) is None
    assert reply.ttl == 3  # one unit for the miss, one for the reply
    assert fx.decisions == 2
    assert rows(fx) == [("/colony", "/anchor", 3)]
    assert notes(fx) == [("warning", "unresolved_path_reply")]


def test_an_error_reply_that_is_itself_unroutable_is_one_unresolved_path_letter() -> None:
    fx = route(table(), "/", message("/nowhere", reply_to="/gone"))
    [letter] = fx.letters
    assert (letter.error_code, letter.sender_path, letter.resolved_target) == (
        "unresolved_path",
        "/colony",
        "/gone",
    )
    assert fx.decisions == 2


def test_an_error_reply_with_no_budget_left_dies_ttl_expired() -> None:
    fx = route(table(cells=["/anchor"]), "/", message("/nowhere", ttl=1, reply_to="/anchor"))
    assert codes(fx) == ["ttl_expired"]
    assert fx.deliveries == []


# -- the message log --------------------------------------------------------------------------


def test_a_message_without_a_parent_is_logged_from_external() -> None:
    fx = route(table(cells=["/sink"]), "/", message("/sink", ttl=5))
    assert rows(fx) == [("@external", "/sink", 4)]


def test_a_message_with_a_parent_is_logged_from_its_sender() -> None:
    fx = route(table(cells=["/sink"]), "/a", message("/sink", ttl=5, parent="p"))
    assert rows(fx) == [("/a", "/sink", 4)]


def test_a_log_row_holds_the_message_it_logs() -> None:
    sent = message("/sink")
    fx = route(table(cells=["/sink"]), "/", sent)
    assert [row.message for row in fx.logs] == [sent]


def test_without_record_routing_writes_no_message_log_rows_but_still_delivers() -> None:
    routes = table(edge("/", "/sink"), cells=["/sink"], record=False)
    fx = route(routes, "/", message("/", ttl=5))
    assert fx.logs == []
    assert delivered(fx) == [("/sink", 3)]
    assert fx.decisions == 2


def test_effects_with_only_notes_have_nothing_to_write() -> None:
    fx = route(table(), "/a", message("/colony/registry"))
    assert fx.notes
    assert not fx
    assert route(table(cells=["/sink"]), "/", message("/sink"))
