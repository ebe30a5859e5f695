"""cells.toolcall: the one reading of a tool call and the one reply shape every tool cell uses."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from cells.bash import BashCell
from cells.file import FileCell
from cells.timer import TimerCell
from cells.toolcall import (
    NO_ID,
    ToolCall,
    ToolCallError,
    parse_tool_call,
    result_turn,
    string_arg,
    tool_error,
    tool_result,
)
from cells.web.fetch import WebFetchCell
from cells.web.search import WebSearchCell
from colony.envelope import source_message
from colony.testing import spec_for


def turn(text: Any, call_id: str | None = "c1") -> dict[str, Any]:
    found: dict[str, Any] = {"origin": "assistant", "type": "tool_call"}
    if text is not None:
        found["text"] = text
    if call_id is not None:
        found["id"] = call_id
    return found


def failure_of(body: Any) -> ToolCallError:
    with pytest.raises(ToolCallError) as caught:
        parse_tool_call(body)
    return caught.value


# -- reading the call --------------------------------------------------------------------------


def test_the_one_tool_call_is_read_among_other_turns_as_args_and_id() -> None:
    body = {"messages": [{"origin": "user", "type": "text", "text": "hi"}, turn('{"a": 1}', "x")]}
    call = parse_tool_call(body)
    assert call == ToolCall({"a": 1}, "x")
    args, call_id = call  # unpacks as (args, call_id)
    assert (args, call_id) == ({"a": 1}, "x")


def test_a_call_without_a_string_id_has_no_id() -> None:
    assert parse_tool_call({"messages": [turn("{}", None)]}).id is None
    assert parse_tool_call({"messages": [{**turn("{}"), "id": 7}]}).id is None


@pytest.mark.parametrize(
    ("body", "text"),
    [
        ({}, "body.messages[] missing or not an array"),
        ([], "body.messages[] missing or not an array"),
        ({"messages": {"type": "tool_call"}}, "body.messages[] missing or not an array"),
        ({"messages": [{"type": "text", "text": "{}"}]}, "no tool_call turn in messages[]"),
        ({"messages": [turn("{}"), turn("{}")]}, "expected exactly one tool_call turn, found 2"),
    ],
)
def test_a_body_without_exactly_one_tool_call_is_invalid_input_on_no_id(
    body: Any, text: str
) -> None:
    failure = failure_of(body)
    assert (failure.code, failure.text, failure.call_id) == ("invalid_input", text, None)


@pytest.mark.parametrize(
    ("text", "sentence"),
    [
        (None, "tool_call.text missing or not a string"),
        ({"command": "ls"}, "tool_call.text missing or not a string"),
        ("[1]", "tool_call.text JSON must be an object"),
        ('"ls"', "tool_call.text JSON must be an object"),
    ],
)
def test_unusable_arguments_are_invalid_input_on_the_calls_id(text: Any, sentence: str) -> None:
    failure = failure_of({"messages": [turn(text)]})
    assert (failure.code, failure.text, failure.call_id) == ("invalid_input", sentence, "c1")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"a": NaN}', "NaN is not a JSON value"),
        ('{"a": Infinity}', "Infinity is not a JSON value"),
        ('{"a": -Infinity}', "-Infinity is not a JSON value"),
        ('{"a": 1e400}', "1e400"),
        ('{"a": "\\ud800"}', "lone surrogate"),
        ("[" * 200 + "]" * 200, "nested deeper than 128 levels"),
        ("{", "line 1"),
    ],
)
def test_arguments_that_are_not_standard_json_are_refused_not_parsed(
    text: str, problem: str
) -> None:
    failure = failure_of({"messages": [turn(text)]})
    assert failure.code == "invalid_input"
    assert failure.text.startswith("tool_call.text is not valid JSON: ")
    assert problem in failure.text
    assert failure.call_id == "c1"


def test_a_nan_the_json_module_would_take_never_becomes_an_argument() -> None:
    text = '{"n": NaN}'
    assert json.loads(text)["n"] != json.loads(text)["n"]  # Python's reader takes it: NaN != NaN
    assert "NaN" in failure_of({"messages": [turn(text)]}).text


def test_a_string_argument_must_be_present_a_string_and_not_empty() -> None:
    assert string_arg({"url": "x"}, "url") == "x"
    cases: list[tuple[dict[str, Any], str]] = [
        ({}, "args.url missing or not a string"),
        ({"url": 3}, "args.url missing or not a string"),
        ({"url": ""}, "args.url is empty"),
    ]
    for args, text in cases:
        with pytest.raises(ToolCallError) as caught:
            string_arg(args, "url")
        assert (caught.value.code, caught.value.text) == ("invalid_input", text)


# -- the reply ---------------------------------------------------------------------------------


def test_a_result_is_one_tool_result_turn_on_the_calls_id_under_the_header() -> None:
    assert tool_result("ok", "c1", {"operation": "x"}) == {
        "header": {"operation": "x"},
        "messages": [{"origin": "tool", "type": "tool_result", "text": "ok", "id": "c1"}],
    }


def test_a_call_without_an_id_is_answered_on_the_empty_id_so_the_reply_stays_ubf() -> None:
    assert NO_ID == ""
    assert result_turn("ok", None)["id"] == ""


def test_an_error_adds_finish_reason_and_error_code_after_the_cells_own_header() -> None:
    reply = tool_error("timeout", "too slow", "c1", {"operation": "x", "duration_ms": 3})
    assert reply["header"] == {
        "operation": "x",
        "duration_ms": 3,
        "finish_reason": "error",
        "error_code": "timeout",
    }
    assert list(reply["header"])[-2:] == ["finish_reason", "error_code"]
    assert reply["messages"] == [result_turn("too slow", "c1")]


# -- every tool cell answers the same way -------------------------------------------------------


Ask = Callable[[Any], Awaitable[dict[str, Any]]]


@asynccontextmanager
async def tool_cell(kind: str, folder: Path) -> AsyncIterator[Ask]:
    """One tool cell built directly; what it answers to a body sent to it."""
    cell: Any
    if kind == "bash":
        cell = BashCell(spec_for("/bash", {}))
    elif kind == "file":
        cell = FileCell(spec_for("/file", {"base_path": str(folder)}))
    elif kind == "web_fetch":
        cell = WebFetchCell(spec_for("/fetch", {}))
    elif kind == "web_search":
        cell = WebSearchCell(spec_for("/search", {"endpoint": "http://127.0.0.1:9/"}))
    else:
        cell = TimerCell(spec_for("/timer", {}))

    async def ask(body: Any) -> dict[str, Any]:
        [emission] = await cell.handle(source_message(cell.path, body))
        content: dict[str, Any] = emission.content
        return content

    try:
        yield ask
    finally:
        close = getattr(cell, "close", None)  # the file cell holds nothing to close
        if close is not None:
            await close()


ERROR_HEADERS = {
    "bash": {"operation", "had_stderr", "duration_ms", "finish_reason", "error_code"},
    "file": {"operation", "duration_ms", "finish_reason", "error_code"},
    "web_fetch": {"operation", "duration_ms", "finish_reason", "error_code"},
    "web_search": {"operation", "duration_ms", "finish_reason", "error_code"},
    "timer": {"msg_type", "finish_reason", "error_code"},
}


@pytest.mark.parametrize("kind", sorted(ERROR_HEADERS))
async def test_every_tool_cell_refuses_nan_arguments_in_the_same_words_on_the_calls_id(
    kind: str, tmp_path: Path
) -> None:
    async with tool_cell(kind, tmp_path) as ask:
        reply = await ask({"messages": [turn('{"a": NaN}')]})
    assert set(reply["header"]) == ERROR_HEADERS[kind]
    assert reply["header"]["finish_reason"] == "error"
    [answer] = reply["messages"]
    assert set(answer) == {"origin", "type", "text", "id"}
    assert (answer["origin"], answer["type"], answer["id"]) == ("tool", "tool_result", "c1")
    assert answer["text"].startswith("tool_call.text is not valid JSON: NaN is not a JSON value")


@pytest.mark.parametrize("kind", sorted(ERROR_HEADERS))
async def test_every_tool_cell_answers_a_body_without_a_call_on_the_empty_id(
    kind: str, tmp_path: Path
) -> None:
    async with tool_cell(kind, tmp_path) as ask:
        reply = await ask({"messages": [turn("{}"), turn("{}")]})
    assert set(reply["header"]) == ERROR_HEADERS[kind]
    assert reply["messages"] == [result_turn("expected exactly one tool_call turn, found 2", NO_ID)]
