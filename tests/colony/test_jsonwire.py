"""colony.jsonwire, and every cell that reads a JSON text from outside through it: a text
Python's json module would take but that is not standard JSON (or that it cannot parse without
a RecursionError) is a typed error, never a crash (issue 15 item 17)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cells.llm.dialects.base import TranslateError
from cells.llm.dialects.base import parse_call as llm_call
from cells.store.ops import ArgsError
from cells.store.ops import parse_call as store_call
from cells.toolcall import ToolCallError, parse_tool_call
from colony.jsonwire import JsonRefused, loads

NOT_STANDARD = [
    ("[" * 100_000, "nested deeper than 128 levels"),
    ('{"a": NaN}', "NaN is not a JSON value"),
    ('{"a": -Infinity}', "-Infinity is not a JSON value"),
    ('{"a": "\\ud800"}', "lone surrogate \\ud800"),
    ('{"a": 1', "Expecting ',' delimiter (line 1, column 8)"),
]


@pytest.mark.parametrize(("text", "problem"), NOT_STANDARD)
def test_text_that_is_not_standard_json_is_refused_naming_the_problem(
    text: str, problem: str
) -> None:
    with pytest.raises(JsonRefused) as caught:
        loads(text)
    assert problem in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_standard_json_parses_as_json_loads_does() -> None:
    for text in ['{"a": [1, 2.5, "é", null, true]}', "[" * 128 + "]" * 128, '"\\ud83d\\ude00"']:
        assert loads(text) == json.loads(text)
    assert loads(b'{"a": "\\\\ud800"}') == {"a": "\\ud800"}  # an escaped backslash, not a surrogate


_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)


@given(_JSON_VALUES, st.booleans(), st.booleans())
def test_the_quick_reading_and_the_careful_one_agree_on_every_standard_text(
    value: Any, ascii_only: bool, as_bytes: bool
) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    expected = json.loads(text)
    got = loads(text.encode() if as_bytes else text)
    assert got == expected
    assert json.dumps(got) == json.dumps(expected)  # ints stay ints, -0.0 stays -0.0


def _tool_call(text: str) -> dict[str, Any]:
    return {"messages": [{"origin": "assistant", "type": "tool_call", "id": "c", "text": text}]}


READERS: list[tuple[str, Callable[[str], Any], type[Exception]]] = [
    ("bash, file, timer and web", lambda text: parse_tool_call(_tool_call(text)), ToolCallError),
    ("store", lambda text: store_call(_tool_call(text)["messages"]), ArgsError),
    (
        "llm (a replayed tool call's arguments)",
        lambda text: llm_call({"text": json.dumps({"name": "f", "arguments": text})}, 0),
        TranslateError,
    ),
]


@pytest.mark.parametrize(("text", "problem"), NOT_STANDARD[:4])
@pytest.mark.parametrize(("cells", "read", "error"), READERS, ids=[r[0] for r in READERS])
def test_a_tool_call_whose_text_is_not_standard_json_is_the_cells_typed_error(
    cells: str, read: Callable[[str], Any], error: type[Exception], text: str, problem: str
) -> None:
    with pytest.raises(error):
        read(text)
