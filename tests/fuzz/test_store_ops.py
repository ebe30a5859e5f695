"""Fuzz the store's operation parser: any call is a plan or a typed error, and every plan
runs on a real SQLite database without an exception."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cells.store.ops import KNOWN_ARGS, ArgsError, Plan, UnknownNameError, parse_call, plan
from colony.testing import ColonyHarness
from tests.conftest import CONTRACT, TreeFactory, hive
from tests.fuzz.strategies import json_values, keyed, mostly, outcome, scalars

ERROR_CODES = {
    "invalid_input",
    "unknown_table",
    "unknown_column",
    "sql_error",
    "type_mismatch",
    "constraint_violation",
    "query_timeout",
    "write_denied",
}

SCHEMA = {"notes": {"id": "int", "text": "text", "meta": "json"}, "t": {"c": "text"}}
NAMES = mostly(
    st.sampled_from(["id", "text", "meta", "c"]),
    st.sampled_from(["notes", "t", "x", "", "a b", '"', "1a", "sqlite_master"]),
)
VALUES = NAMES | scalars | json_values
OPS = ["in", "is_null", "or_null", "eq", "neq", "lt", "lte", "gt", "gte", "like"]

where = st.dictionaries(
    NAMES, VALUES | st.dictionaries(st.sampled_from(OPS), VALUES, max_size=2), max_size=3
)
ARG_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "table": mostly(st.sampled_from(list(SCHEMA)), NAMES | VALUES),
    "row": mostly(st.dictionaries(NAMES, VALUES, min_size=1, max_size=3), VALUES),
    "set": mostly(st.dictionaries(NAMES, VALUES, min_size=1, max_size=3), VALUES),
    "where": mostly(where, VALUES),
    "columns": mostly(
        st.lists(NAMES, min_size=1, max_size=3)
        | st.dictionaries(NAMES, st.sampled_from(["text", "int", "json", "blob"]), max_size=3),
        VALUES,
    ),
    "order_by": mostly(
        st.lists(keyed(["col", "dir"], NAMES | st.sampled_from(["asc", "desc"])), max_size=2),
        VALUES,
    ),
    "limit": mostly(st.integers(-3, 2**70), VALUES),
    "distinct": mostly(st.booleans(), VALUES),
}


@st.composite
def store_args(draw: st.DrawFn) -> dict[str, Any]:
    """One call: mostly a known operation with (some of) its own arguments, sometimes any
    operation value, a stranger argument or none of the required ones."""
    operation = draw(
        mostly(st.sampled_from(list(KNOWN_ARGS)), st.sampled_from(["drop", ""]) | VALUES)
    )
    known = KNOWN_ARGS.get(operation, ()) if isinstance(operation, str) else ()
    call: dict[str, Any] = {"operation": operation}
    for key in ("table", *known):
        if draw(mostly(st.just(True), st.just(False))):
            call[key] = draw(ARG_VALUES[key])
    if draw(mostly(st.just(False), st.just(True))):
        call[draw(st.sampled_from([*ARG_VALUES, "x"]))] = draw(VALUES)
    return call


args = store_args()


def database() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    for table, columns in SCHEMA.items():
        cols = ", ".join(f'"{c}"' for c in columns)
        conn.execute(f'CREATE TABLE "{table}" ({cols})')
    return conn


DB = database()


@settings(max_examples=500, deadline=None)
@given(call=args)
def test_any_store_operation_is_a_plan_or_a_typed_error(call: dict[str, Any]) -> None:
    planned = outcome(lambda: plan(call, SCHEMA), ArgsError, UnknownNameError)
    if isinstance(planned, ArgsError):
        assert planned.text
        assert isinstance(planned.operation, str)
        return
    if isinstance(planned, UnknownNameError):
        assert planned.code in ("unknown_table", "unknown_column")
        return
    assert isinstance(planned, Plan)
    if planned.sql:
        try:
            DB.execute(planned.sql, planned.values).fetchall()
        except OverflowError:
            # Python ints beyond 64 bits cannot be bound; the cell answers sql_error for them.
            assert any(isinstance(v, int) and abs(v) >= 2**63 for v in planned.values)
        finally:
            DB.rollback()


turns = st.lists(
    keyed(["type", "id", "text", "origin"], st.sampled_from(["tool_call", "text"]) | VALUES)
    | VALUES,
    max_size=2,
)


@settings(max_examples=300, deadline=None)
@given(messages=turns | VALUES, text=st.none() | args.map(json.dumps) | st.text(max_size=20))
def test_any_store_message_is_a_call_or_a_typed_error(messages: Any, text: str | None) -> None:
    if isinstance(messages, list) and messages and isinstance(messages[0], dict) and text:
        messages[0]["text"] = text
    parsed = outcome(lambda: parse_call(messages), ArgsError)
    if isinstance(parsed, ArgsError):
        assert parsed.operation == "error"
        assert parsed.text
        return
    assert isinstance(parsed, tuple)
    call_id, call = parsed
    assert isinstance(call_id, str)
    assert isinstance(call, dict)


@pytest.fixture
async def store(make_tree: TreeFactory) -> AsyncIterator[ColonyHarness]:
    tree = make_tree(
        {
            "main/config.json": hive({"from": ".", "to": "./db"}, {"from": "./db", "to": "/sink"}),
            "main/db/config.json": {
                "cell": {"type": "store"},
                "params": {"schema": SCHEMA},
                "contract": CONTRACT,
            },
        }
    )
    async with ColonyHarness(tree, capture=["/sink"]) as colony:
        yield colony


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(call=args, call_id=st.text(max_size=5))
async def test_any_store_operation_is_a_reply_or_a_typed_error(
    store: ColonyHarness, call: dict[str, Any], call_id: str
) -> None:
    before = len(store.captured("/sink"))
    text = json.dumps(call)
    turn = {"origin": "assistant", "type": "tool_call", "id": call_id, "text": text}
    await store.send("/db", {"messages": [turn]})
    await store.settle()
    [reply] = store.captured("/sink")[before:]  # exactly one answer: nothing lost, no crash
    assert isinstance(reply.body, dict)
    header = reply.headers.context | reply.headers.hop
    [result] = reply.body["messages"]
    assert result["type"] == "tool_result"
    assert isinstance(result["text"], str)
    code = header.get("error_code")
    event(f"reply {code or 'ok'}")
    assert code is None or code in ERROR_CODES, code
    assert await store.dead_letters() == []


UNKNOWN_TABLE = "no_such_table"


@settings(max_examples=400, deadline=None)
@given(call=args)
def test_a_malformed_call_is_invalid_input_before_any_name_is_looked_up(
    call: dict[str, Any],
) -> None:
    """Issue 15 item 6: whether a call is well formed never depends on the schema. A call
    that is malformed against a table that exists is malformed against one that does not,
    with the same sentence: the shape is checked before the table and columns are looked up."""
    if call.get("operation") == "create_table":
        return  # it names a new table: there is nothing to look up
    known = outcome(lambda: plan({**call, "table": "notes"}, SCHEMA), ArgsError, UnknownNameError)
    unknown = outcome(
        lambda: plan({**call, "table": UNKNOWN_TABLE}, SCHEMA), ArgsError, UnknownNameError
    )
    if isinstance(known, ArgsError):
        assert isinstance(unknown, ArgsError), (call, unknown)
        assert unknown.text == known.text
    else:
        assert not isinstance(unknown, Plan)


@pytest.mark.parametrize(
    "call",
    [
        {"operation": "select", "table": UNKNOWN_TABLE, "columns": []},
        {"operation": "select", "table": UNKNOWN_TABLE},
        {"operation": "insert", "table": UNKNOWN_TABLE, "row": {}},
        {"operation": "update", "table": UNKNOWN_TABLE, "set": {}},
        {"operation": "update", "table": "notes", "set": {"nope": 1}, "where": {"id": {"in": []}}},
        {"operation": "delete", "table": UNKNOWN_TABLE, "where": {"id": {"in": []}}},
        {"operation": "select", "table": "notes", "columns": ["nope"], "order_by": [{}]},
        {"operation": "select", "table": "notes", "columns": ["nope"], "limit": 0},
    ],
)
def test_an_empty_list_or_map_is_invalid_input_even_on_an_unknown_table(
    call: dict[str, Any],
) -> None:
    with pytest.raises(ArgsError):
        plan(call, SCHEMA)
