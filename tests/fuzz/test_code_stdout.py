"""Fuzz the code cell's stdout parser: any bytes are emissions or a WireError."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cells.code.wire import WireError, parse_stdout
from colony.testing import ColonyHarness
from tests.conftest import CONTRACT, TreeFactory, cell, hive
from tests.fuzz.strategies import json_values, keyed, mostly, outcome

emission_like = keyed(["header", "messages", "body", "target"])
documents = json_values | emission_like | st.lists(emission_like | json_values, max_size=4)


def check(stdout: bytes) -> None:
    emissions = outcome(lambda: parse_stdout(stdout), WireError)
    if isinstance(emissions, WireError):
        assert str(emissions).startswith("invalid_json: ")
        return
    assert isinstance(emissions, list)
    for item in emissions:
        assert isinstance(item, dict)
        assert isinstance(item.get("header", {}), dict)


@settings(max_examples=400, deadline=None)
@given(stdout=st.binary(max_size=200))
def test_any_stdout_bytes_are_emissions_or_a_typed_error(stdout: bytes) -> None:
    check(stdout)


@settings(max_examples=400, deadline=None)
@given(doc=documents, pad=st.sampled_from(["", "\n", "  \n", "\r\n", "\x00", "\ufeff"]))
def test_any_stdout_is_emissions_or_a_typed_error(doc: Any, pad: str) -> None:
    check((json.dumps(doc) + pad).encode())
    check((pad + json.dumps(doc, ensure_ascii=False)).encode("utf-8", "surrogatepass"))


SCRIPT = (
    "import sys, json; d = json.load(sys.stdin); "
    "sys.stdout.buffer.write(bytes.fromhex(d['body']['messages'][0]['text']))"
)


@pytest.fixture
async def colony(make_tree: TreeFactory) -> AsyncIterator[ColonyHarness]:
    script_cell = cell("code", {"script_inline": SCRIPT})
    script_cell["contract"] = {**CONTRACT, "multi_send_capable": True}
    tree = make_tree(
        {
            "main/config.json": hive({"from": ".", "to": "./s"}, {"from": "./s", "to": "/sink"}),
            "main/s/config.json": script_cell,
        }
    )
    async with ColonyHarness(tree, capture=["/sink"]) as harness:
        yield harness


turn = st.fixed_dictionaries(
    {"origin": st.just("assistant"), "type": st.just("text"), "text": st.text(max_size=8)}
)
printed = keyed(["header", "messages"], st.lists(turn, max_size=2) | json_values)
stdouts = mostly(printed | st.lists(printed, max_size=3), json_values).map(
    lambda v: json.dumps(v).encode()
) | st.binary(max_size=40)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(stdout=stdouts)
async def test_any_stdout_of_a_running_script_is_routed_or_dead_lettered_never_lost(
    colony: ColonyHarness, stdout: bytes
) -> None:
    parsed = outcome(lambda: parse_stdout(stdout), WireError)
    expected = len(parsed) if isinstance(parsed, list) else 1
    before = len(colony.captured("/sink")), len(await colony.dead_letters())
    body = {"messages": [{"origin": "user", "type": "text", "text": stdout.hex()}]}
    await colony.send("/s", body)
    await colony.settle()
    routed = colony.captured("/sink")[before[0] :]
    dead = (await colony.dead_letters())[before[1] :]
    event(f"{len(routed)} routed, {len(dead)} dead-lettered")
    assert len(routed) + len(dead) == expected, (routed, dead)
    if isinstance(parsed, WireError):
        [error] = routed
        assert error.headers.hop["error_code"] == "invalid_json"


# Issue 15 item 17: stdout that Python's json module parses but that is not standard JSON (or
# that it cannot parse without a RecursionError) is a typed invalid_json error naming the
# problem: never a crash, never NaN or a lone surrogate let into the colony.
MALFORMED = [
    (b"[" * 100_000, "nested deeper than 128 levels"),
    (b"{" + b'"a":{' * 200 + b"}" * 201, "nested deeper than 128 levels"),
    (b'{"messages": [], "header": {"score": NaN}}', "NaN is not a JSON value"),
    (b'[{"x": Infinity}]', "Infinity is not a JSON value"),
    (b'{"messages": [{"origin": "tool", "type": "text", "text": "\\ud800"}]}', "lone surrogate"),
    (b'{"\\udfff": 1}', "lone surrogate \\udfff"),
]


@pytest.mark.parametrize(("stdout", "problem"), MALFORMED)
def test_stdout_that_is_not_standard_json_is_invalid_json_naming_the_problem(
    stdout: bytes, problem: str
) -> None:
    with pytest.raises(WireError) as caught:
        parse_stdout(stdout)
    assert str(caught.value).startswith("invalid_json: ")
    assert problem in str(caught.value)


def test_nesting_up_to_the_limit_and_paired_surrogates_are_accepted() -> None:
    deep = {"messages": [], "header": {"k": json.loads("[" * 120 + "]" * 120)}}
    assert parse_stdout(json.dumps(deep).encode()) == [deep]
    emoji = b'{"messages": [{"origin": "tool", "type": "text", "text": "\\ud83d\\ude00"}]}'
    [item] = parse_stdout(emoji)
    assert item["messages"][0]["text"] == "\U0001f600"


@pytest.mark.parametrize(("stdout", "problem"), MALFORMED[::2])
async def test_a_running_script_printing_malformed_json_gets_a_typed_error_not_a_crash(
    colony: ColonyHarness, stdout: bytes, problem: str
) -> None:
    body = {"messages": [{"origin": "user", "type": "text", "text": stdout.hex()}]}
    await colony.send("/s", body)
    await colony.settle()
    [reply] = colony.captured("/sink")
    assert reply.headers.hop["error_code"] == "invalid_json"
    assert problem in reply.body["messages"][0]["text"]
    assert await colony.dead_letters() == []
