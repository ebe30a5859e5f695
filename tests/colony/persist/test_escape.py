"""colony.persist.escape: what colony.db stores reads back as what was stored."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from colony.persist.escape import storable_json

_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
    | st.text(alphabet=st.sampled_from(["a", "é", "\ud800", "\udfff", "\U0001f600"])),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text() | st.integers(-5, 5), inner, max_size=4)
    ),
    max_leaves=30,
)


@given(_VALUES)
def test_stored_json_is_utf8_and_reads_back_as_json_wrote_it(value: Any) -> None:
    text = storable_json(value)
    text.encode("utf-8")  # never raises: SQLite takes it
    expected = json.loads(json.dumps(value))
    assert json.dumps(json.loads(text)) == json.dumps(expected)


def test_a_value_json_cannot_hold_is_stored_as_its_repr_and_a_cycle_still_refused() -> None:
    class Opaque:
        def __repr__(self) -> str:
            return "<opaque>"

    assert json.loads(storable_json({"x": Opaque()})) == {"x": "<opaque>"}
    assert json.loads(storable_json({"n": math.nan})) == {"n": None}
    looped: dict[str, Any] = {}
    looped["self"] = looped
    with pytest.raises(ValueError, match="Circular"):
        storable_json(looped)
