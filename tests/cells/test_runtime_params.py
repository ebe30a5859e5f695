"""cells.runtime_params: what a ``params`` body slot sent to a running cell may change."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cells.runtime_params import key_problem, update_problem

MUTABLE = ("query_timeout_ms", "send_timeout_ms")
FIXED = ("bot_token",)


@pytest.mark.parametrize("update", ["fast", 3, None, ["query_timeout_ms"]])
def test_a_slot_that_is_not_an_object_is_refused(update: Any) -> None:
    assert update_problem(update, mutable=MUTABLE) == "params must be an object"


def test_a_fixed_key_is_refused_with_the_keys_that_may_change() -> None:
    assert update_problem({"bot_token": "x"}, mutable=MUTABLE, fixed=FIXED, kind="proxy") == (
        "params.bot_token cannot be changed at runtime (mutable: query_timeout_ms, send_timeout_ms)"
    )


def test_a_key_the_type_does_not_have_is_named_as_such_when_the_type_lists_its_keys() -> None:
    assert key_problem({"colour": 1}, mutable=MUTABLE, fixed=FIXED, kind="proxy") == (
        "params.colour is not a proxy param (mutable: query_timeout_ms, send_timeout_ms)"
    )
    assert key_problem({"colour": 1}, mutable=MUTABLE) == (
        "params.colour cannot be changed at runtime (mutable: query_timeout_ms, send_timeout_ms)"
    )
    assert key_problem({"colour": 1}, mutable=MUTABLE, fixed=FIXED) == (
        "params.colour is not a param of this cell type (mutable: query_timeout_ms, "
        "send_timeout_ms)"
    )


def test_the_first_refused_key_is_the_one_named() -> None:
    update = {"query_timeout_ms": 5, "bot_token": "x", "colour": 1}
    assert key_problem(update, mutable=MUTABLE, fixed=FIXED, kind="proxy") == (
        "params.bot_token cannot be changed at runtime (mutable: query_timeout_ms, send_timeout_ms)"
    )


@pytest.mark.parametrize("value", [0, -1, True, "5", 1.5, None, [5]])
def test_a_timeout_must_be_an_integer_of_at_least_one(value: Any) -> None:
    assert update_problem({"send_timeout_ms": value}, mutable=MUTABLE) == (
        "params.send_timeout_ms must be an integer >= 1"
    )


def test_a_nullable_timeout_takes_null_and_says_so_when_refused() -> None:
    assert update_problem({"query_timeout_ms": None}, mutable=MUTABLE, nullable=True) is None
    assert update_problem({"query_timeout_ms": 0}, mutable=MUTABLE, nullable=True) == (
        "params.query_timeout_ms must be an integer >= 1 or null"
    )


def test_key_problem_leaves_the_values_to_the_cell() -> None:
    assert key_problem({"send_timeout_ms": "soon"}, mutable=MUTABLE) is None


@given(st.dictionaries(st.sampled_from(MUTABLE), st.integers(min_value=1)))
def test_any_positive_integers_for_mutable_keys_pass(update: dict[str, int]) -> None:
    assert update_problem(update, mutable=MUTABLE, fixed=FIXED, kind="proxy") is None


@given(st.dictionaries(st.text(min_size=1), st.integers(min_value=1), min_size=1))
def test_a_slot_with_any_key_outside_the_mutable_ones_is_refused_naming_one(
    update: dict[str, int],
) -> None:
    problem = update_problem(update, mutable=MUTABLE, fixed=FIXED, kind="proxy")
    outside = [k for k in update if k not in MUTABLE]
    if outside:
        assert problem is not None
        assert problem.startswith(f"params.{outside[0]} ")
    else:
        assert problem is None
