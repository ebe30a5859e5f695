from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conformance.cells import CALLS


@pytest.fixture(autouse=True)
def calls() -> Iterator[dict[str, list[object]]]:
    CALLS.clear()
    yield CALLS  # type: ignore[misc]
    CALLS.clear()
