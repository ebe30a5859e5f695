"""The one check of a message entering from outside (:mod:`colony.ingress`)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from colony.config.models import ColonyConfig
from colony.ingress import MAX_TTL, MIN_TTL, IngressRefused, source_message_of, ttl_of

CONFIG = ColonyConfig.model_validate({"message_default_ttl": 17})
BODY = {"messages": [{"origin": "user", "type": "text", "text": "hi"}]}

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=5)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)


def refusal(**fields: Any) -> IngressRefused:
    with pytest.raises(IngressRefused) as caught:
        source_message_of("/", BODY, CONFIG, **fields)
    return caught.value


def test_an_absent_or_null_ttl_is_the_colony_default() -> None:
    assert source_message_of("/", BODY, CONFIG).ttl == 17
    assert source_message_of("/", BODY, CONFIG, ttl=None).ttl == 17


@given(st.integers(min_value=MIN_TTL, max_value=MAX_TTL))
def test_a_whole_ttl_in_range_is_taken_as_given(ttl: int) -> None:
    assert source_message_of("/", BODY, CONFIG, ttl=ttl).ttl == ttl


@given(st.one_of(st.integers(max_value=MIN_TTL - 1), st.integers(min_value=MAX_TTL + 1)))
def test_a_ttl_outside_one_to_two_to_the_32_minus_one_is_invalid_ttl(ttl: int) -> None:
    refused = refusal(ttl=ttl)
    assert (refused.field, refused.code) == ("ttl", "invalid_ttl")
    assert refused.detail == f"ttl must be a whole number in 1..{MAX_TTL}"


@given(
    json_values.filter(lambda v: v is not None and (isinstance(v, bool) or not isinstance(v, int)))
)
def test_a_ttl_that_is_no_whole_number_is_invalid_ttl_booleans_included(ttl: Any) -> None:
    assert refusal(ttl=ttl).code == "invalid_ttl"


def test_a_spent_ttl_is_taken_only_where_a_test_door_allows_it() -> None:
    assert refusal(ttl=0).code == "invalid_ttl"
    assert source_message_of("/", BODY, CONFIG, ttl=0, allow_spent=True).ttl == 0
    with pytest.raises(IngressRefused, match=rf"^ttl must be a whole number in 0\.\.{MAX_TTL}$"):
        ttl_of(-1, 17, allow_spent=True)


@given(json_values.filter(lambda v: v is not None and not isinstance(v, dict)))
def test_context_and_hop_that_are_not_objects_are_refused_each_with_its_code(value: Any) -> None:
    context = refusal(context=value)
    assert (context.field, context.code) == ("context", "invalid_headers")
    assert context.detail == "context must be an object or null"
    hop = refusal(hop=value)
    assert (hop.field, hop.code, hop.detail) == (
        "hop",
        "invalid_hop",
        "hop must be an object or null",
    )


@given(st.dictionaries(st.text(max_size=4), json_values, max_size=4))
def test_an_object_context_and_hop_are_copied_in_unchanged(value: dict[str, Any]) -> None:
    message = source_message_of("/", BODY, CONFIG, context=value, hop=value)
    assert message.headers.context == value
    assert message.headers.hop == value
    assert message.headers.context is not value  # the sender's object is never shared


def test_null_context_and_hop_are_empty() -> None:
    message = source_message_of("/", BODY, CONFIG, context=None, hop=None)
    assert (message.headers.context, message.headers.hop) == ({}, {})


def test_a_refusal_names_context_as_the_door_reads_it() -> None:
    refused = refusal(context=[1], context_key="headers")
    assert refused.detail == "headers must be an object (it becomes context) or null"


def test_context_is_checked_before_hop_and_hop_before_ttl_as_meclaws_api_does() -> None:
    assert refusal(context=1, hop=1, ttl=0).field == "context"
    assert refusal(hop=1, ttl=0).field == "hop"


def test_a_trace_id_that_is_no_string_is_refused_and_a_string_one_is_kept() -> None:
    refused = refusal(trace_id=5)
    assert (refused.code, refused.detail) == ("invalid_trace_id", "trace_id must be a string")
    message = source_message_of("/", BODY, CONFIG, trace_id="t-1")
    assert message.trace_id == "t-1"
    assert message.id != "t-1"


def test_the_door_defaults_of_context_fill_only_keys_the_sender_left_out() -> None:
    message = source_message_of(
        "/", BODY, CONFIG, context={"turn_id": "mine"}, context_defaults={"turn_id": "x", "u": 1}
    )
    assert message.headers.context == {"turn_id": "mine", "u": 1}


def test_a_source_message_has_no_parent_no_reply_to_and_its_own_trace() -> None:
    message = source_message_of("/a", BODY, CONFIG)
    assert (message.target, message.body) == ("/a", BODY)
    assert (message.parent_message_id, message.reply_to, message.correlation_id) == (
        None,
        None,
        None,
    )
    assert message.trace_id == message.id


@pytest.mark.parametrize(
    ("ttl", "taken"), [(0, False), (1, True), (MAX_TTL, True), (MAX_TTL + 1, False)]
)
def test_the_colony_default_ttl_has_the_range_of_an_ingress_ttl(ttl: int, taken: bool) -> None:
    if taken:
        assert ColonyConfig.model_validate({"message_default_ttl": ttl}).message_default_ttl == ttl
    else:
        with pytest.raises(ValidationError):
            ColonyConfig.model_validate({"message_default_ttl": ttl})
