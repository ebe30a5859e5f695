"""However handling a message ended, over :func:`colony.routing.route_outcome`: outputs are
routed, a crash is a dead letter, a timeout or a ``consumes`` refusal answers ``reply_to`` (a dead
letter when there is none), and a refusal by a failed cell is always a dead letter."""

from __future__ import annotations

import pytest

from colony.dead_letters import DeadLetterCode
from colony.outcome import Crashed, Outputs, Refused, TimedOut
from colony.routing import Emitter, route_outcome
from tests.colony.routing.tables import codes, delivered, edge, handled, notes, rows, table

A = Emitter("/a")
OUT = {"header": {"finish_reason": "stop"}, "messages": []}
ROUTES = table(edge("/a", "/sink"), cells=["/sink", "/anchor"])
"""``/a`` sends everything to ``/sink``; ``/anchor`` is who awaits replies."""


def test_outputs_are_routed_as_the_cells_emissions() -> None:
    fx = route_outcome(ROUTES, A, handled("/a", ttl=10), Outputs([OUT]))
    assert delivered(fx) == [("/sink", 9)]
    assert rows(fx) == [("/a", "/sink", 9)]


def test_no_outputs_route_nothing() -> None:
    fx = route_outcome(ROUTES, A, handled("/a"), Outputs([]))
    assert (fx.deliveries, fx.letters, fx.notes, fx.decisions) == ([], [], [], 0)


def test_a_long_running_cells_own_outputs_are_routed_without_a_handled_message() -> None:
    fx = route_outcome(ROUTES, A, None, Outputs([OUT]))
    assert delivered(fx) == [("/sink", 63)]
    assert fx.deliveries[0].message.parent_message_id is None


@pytest.mark.parametrize("reply_to", [None, "/anchor"])
def test_a_crash_dead_letters_the_handled_message_cell_crashed_and_answers_nobody(
    reply_to: str | None,
) -> None:
    message = handled("/a", reply_to=reply_to)
    fx = route_outcome(ROUTES, A, message, Crashed("RuntimeError: boom"))
    [letter] = fx.letters
    assert (letter.error_code, letter.sender_path) == ("cell_crashed", "/a")
    assert (letter.original_target, letter.resolved_target) == ("/a", "/a")
    assert (letter.message, letter.detail) == (message, "RuntimeError: boom")
    assert (fx.deliveries, fx.decisions) == ([], 0)
    [note] = fx.notes
    assert (note.level, note.event) == ("warning", "dead_lettered")
    assert (note.fields["error_code"], note.fields["message_id"]) == ("cell_crashed", message.id)


def test_a_timeout_answers_reply_to_with_message_timeout_bypassing_the_edges() -> None:
    message = handled("/a", ttl=10, reply_to="/anchor", context={"turn_id": "t"})
    fx = route_outcome(ROUTES, A, message, TimedOut())
    assert fx.letters == []
    [delivery] = fx.deliveries
    reply = delivery.message
    assert (delivery.cell, delivery.sender, reply.reply_to) == ("/anchor", "/a", None)
    assert reply.headers.hop == {"finish_reason": "error", "error_code": "message_timeout"}
    assert reply.headers.context == {"turn_id": "t"}
    assert reply.body["messages"][0]["text"] == "message_timeout backstop elapsed"
    assert (reply.ttl, reply.trace_id, reply.parent_message_id) == (
        9,
        message.trace_id,
        message.id,
    )
    assert rows(fx) == [("/a", "/anchor", 9)]


def test_a_timeout_nobody_awaits_is_a_message_timeout_letter_sent_by_the_cell() -> None:
    message = handled("/a")
    fx = route_outcome(ROUTES, A, message, TimedOut())
    [letter] = fx.letters
    assert (letter.error_code, letter.sender_path, letter.resolved_target) == (
        "message_timeout",
        "/a",
        "/a",
    )
    assert letter.message is message
    assert fx.deliveries == []


def test_a_consumes_refusal_answers_reply_to_directly_bypassing_the_edges() -> None:
    message = handled("/a", reply_to="/anchor", context={"turn_id": "t"})
    refusal = Refused(DeadLetterCode.CONSUMES_VIOLATION, "required consumes.hop 'op' missing")
    fx = route_outcome(ROUTES, A, message, refusal)
    assert fx.letters == []
    [delivery] = fx.deliveries
    reply = delivery.message
    assert delivery.cell == "/anchor"
    assert reply.headers.hop == {"finish_reason": "error", "error_code": "consumes_violation"}
    assert reply.headers.context == {"turn_id": "t"}
    assert reply.body["messages"][0]["text"] == "required consumes.hop 'op' missing"


def test_a_consumes_refusal_nobody_awaits_is_a_consumes_violation_letter() -> None:
    message = handled("/a")
    refusal = Refused(DeadLetterCode.CONSUMES_VIOLATION, "required consumes.hop 'op' missing")
    fx = route_outcome(ROUTES, A, message, refusal)
    [letter] = fx.letters
    assert (letter.error_code, letter.sender_path) == ("consumes_violation", "/a")
    assert letter.detail == "required consumes.hop 'op' missing"
    assert fx.deliveries == []


@pytest.mark.parametrize(("reply_to", "sender"), [(None, "/a"), ("/anchor", "/anchor")])
def test_a_refusal_by_a_failed_cell_is_always_cell_inactive_sent_by_reply_to_or_the_cell(
    reply_to: str | None, sender: str
) -> None:
    message = handled("/a", reply_to=reply_to)
    fx = route_outcome(ROUTES, A, message, Refused(DeadLetterCode.CELL_INACTIVE, "failed"))
    [letter] = fx.letters
    assert (letter.error_code, letter.sender_path, letter.resolved_target) == (
        "cell_inactive",
        sender,
        "/a",
    )
    assert fx.deliveries == []
    assert notes(fx) == [("warning", "dead_lettered")]


def test_an_error_reply_whose_reply_to_is_gone_is_dead_lettered_unresolved_path() -> None:
    fx = route_outcome(ROUTES, A, handled("/a", reply_to="/gone"), TimedOut())
    [letter] = fx.letters
    assert (letter.error_code, letter.sender_path, letter.resolved_target) == (
        "unresolved_path",
        "/a",
        "/gone",
    )


def test_an_error_reply_to_a_handled_message_with_no_budget_left_dies_ttl_expired() -> None:
    fx = route_outcome(ROUTES, A, handled("/a", ttl=0, reply_to="/anchor"), TimedOut())
    assert codes(fx) == ["ttl_expired"]
    assert fx.deliveries == []
