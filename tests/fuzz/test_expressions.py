"""Fuzz the CEL adapter: any text compiles or is an ExpressionSyntaxError; evaluation of a
compiled program is a JSON value or an EvaluationError — on both engines."""

from __future__ import annotations

import json
import math
from functools import cache
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from colony.expressions import (
    ENGINE_NAMES,
    Engine,
    EvaluationError,
    ExpressionSyntaxError,
    Program,
    available_engines,
    make_engine,
)
from tests.fuzz.strategies import json_values, outcome

AVAILABLE = available_engines()
ENGINES = [
    pytest.param(
        name,
        id=name,
        marks=pytest.mark.skipif(name not in AVAILABLE, reason=f"{name} does not import here"),
    )
    for name in ENGINE_NAMES
]


@cache
def engine_for(name: str) -> Engine:
    return make_engine(name)


# Built before any Hypothesis test: cel-python raises the recursion limit on first use.
for _name in AVAILABLE:
    engine_for(_name)

TOKENS = [
    "context", "hop", ".", "x", "y", "has(", ")", "(", "[", "]", "{", "}", ":", ",", "?",
    "==", "!=", "<", "<=", ">", ">=", "&&", "||", "!", "-", "+", "*", "/", "%", " in ",
    "1", "0", "-9223372036854775808", "18446744073709551615u", "1.5", "1e999", "'s'", '"t"',
    "b'\\xff'", "true", "false", "null", "size(", "int(", "string(", "double(", "uint(",
    "duration('1s')", "timestamp('2020-01-01T00:00:00Z')", ".exists(v, ", ".all(v, ",
    ".map(v, ", ".filter(v, ", "v", "matches(", "'[a-'", "\\", "\n", "\t", "r'", '"""',
]  # fmt: skip

sources = st.text(max_size=40) | st.lists(st.sampled_from(TOKENS), max_size=14).map("".join)


def assert_json(value: Any) -> None:
    """A result is plain JSON-compatible Python (no NaN: those become None)."""
    if isinstance(value, float):
        assert math.isfinite(value)
    json.dumps(value, allow_nan=False)


@pytest.mark.parametrize("engine_name", ENGINES)
@settings(max_examples=300, deadline=None)
@given(source=sources, context=json_values, hop=json_values)
def test_any_expression_text_compiles_or_raises_the_adapters_error(
    engine_name: str, source: str, context: Any, hop: Any
) -> None:
    engine = engine_for(engine_name)
    program = outcome(lambda: engine.compile(source), ExpressionSyntaxError)
    if isinstance(program, ExpressionSyntaxError):
        event("syntax error")
        assert program.source == source
        assert program.line >= 1
        assert program.column >= 1
        assert program.reason
        assert program.caret().count("^") >= 1
        return
    assert isinstance(program, Program)
    activation = engine.activation(
        {
            "context": context if isinstance(context, dict) else {"v": context},
            "hop": hop if isinstance(hop, dict) else {"v": hop},
        }
    )
    value = outcome(lambda: program.evaluate(activation), EvaluationError)
    if isinstance(value, EvaluationError):
        event("evaluation error")
        assert isinstance(value.reason, str)
        return
    event("value")
    assert_json(value)
