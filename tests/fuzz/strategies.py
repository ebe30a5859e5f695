"""Small Hypothesis strategies shared by the fuzz tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from hypothesis import strategies as st

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10)
)

json_values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)
"""Any JSON document (no NaN or infinities: those are not JSON)."""


def keyed(
    keys: list[str], values: st.SearchStrategy[Any] = json_values
) -> st.SearchStrategy[dict[str, Any]]:
    """Objects whose keys are mostly ones the unit knows, sometimes others."""
    return st.dictionaries(
        st.sampled_from(keys) | st.text(max_size=6), values, max_size=len(keys) + 1
    )


T = TypeVar("T")


def outcome(call: Callable[[], T], *errors: type[Exception]) -> T | Exception:
    """What ``call`` returns, or the exception it raised if it is one of ``errors`` (any
    other exception propagates and fails the test)."""
    try:
        return call()
    except errors as exc:
        return exc


def mostly(valid: st.SearchStrategy[Any], other: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``valid`` four times in five, else ``other``: enough well-formed input to get past the
    first check and exercise what lies behind it."""
    return st.integers(0, 4).flatmap(lambda n: other if n == 0 else valid)
