"""UBF validation answers every JSON value with None or a problem, never an exception."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from colony.ubf import ORIGINS, TURN_TYPES, body_problem
from tests.fuzz.strategies import json_values, keyed

TURN_KEYS = ["origin", "type", "text", "id", "happened_at", "text_id", "messages_id"]
ATTACHMENT_KEYS = ["blob_id", "mime_type", "filename", "size_bytes", "sha256"]
fields = json_values | st.sampled_from([*sorted(ORIGINS), *sorted(TURN_TYPES)])
turns = keyed(TURN_KEYS, fields) | json_values
bodies = st.fixed_dictionaries(
    {},
    optional={
        "system": json_values,
        "messages": st.lists(turns, max_size=3) | json_values,
        "attachments": st.lists(keyed(ATTACHMENT_KEYS, fields) | json_values, max_size=2)
        | json_values,
        "x": json_values,
    },
)


@settings(max_examples=400, deadline=None)
@given(st.one_of(bodies, json_values))
def test_body_problem_answers_any_json_value_with_none_or_a_problem(value: Any) -> None:
    problem = body_problem(value)
    assert problem is None or (isinstance(problem, str) and problem)


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"messages": [{"origin": {"a": 1}, "type": "text"}]}, "messages[0].origin must be"),
        ({"messages": [{"origin": ["user"], "type": "text"}]}, "messages[0].origin must be"),
        ({"messages": [{"origin": "user", "type": {}}]}, "messages[0].type must be"),
        ({"messages": [{"origin": "user", "type": []}]}, "messages[0].type must be"),
        ({"messages": [{"text_id": {}}]}, "messages[0].text_id must be a UUID"),
        ({"attachments": [{"blob_id": []}]}, "attachments[0].blob_id must be a UUID"),
        (
            {"messages": [{"origin": "user", "type": "text", 1: 2}]},
            "messages[0] has unknown key(s) 1",
        ),
    ],
)
def test_a_field_of_the_wrong_type_is_a_problem_not_a_type_error(
    body: dict[Any, Any], problem: str
) -> None:
    found = body_problem(body)
    assert found is not None
    assert found.startswith(problem)


def test_a_uuid_with_a_trailing_newline_is_not_a_uuid() -> None:
    uuid = "01234567-89ab-7def-8123-456789abcdef"
    assert body_problem({"messages": [{"text_id": uuid}]}) is None
    assert body_problem({"messages": [{"text_id": uuid + "\n"}]}) is not None
