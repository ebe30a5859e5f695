"""The tool-call convention every tool cell speaks (cells.md §0.7), written once.

A tool cell reads the one ``tool_call`` turn of a body and answers with one ``tool_result``
turn on the same id::

    {"header": {"operation": "web_fetch", ...},
     "messages": [{"origin": "tool", "type": "tool_result", "text": "...", "id": "call-1"}]}

A failure has the same shape, with the error sentence as ``text`` and ``finish_reason:
"error"`` plus ``error_code`` added to the header.

Two copies of this once lived in the ``bash`` and web cells and drifted apart (at one point one
of them parsed ``NaN``). Where they disagreed, this module keeps the stricter reading:

* The arguments are standard JSON, read by :func:`colony.jsonwire.loads`: ``NaN``,
  ``Infinity``, a lone surrogate escape or nesting past 128 levels is ``invalid_input``, never
  a float that would later be written back as non-standard JSON.
* The sentences are meclaw's (``body.messages[] missing or not an array``,
  ``tool_call.text is not valid JSON: …``), so one malformed call reads the same at every
  tool cell.
* A call whose turn was found but whose arguments are unusable is answered on that call's
  id: the caller can pair the error with its call, as it pairs a result.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

from colony.envelope import JsonObject
from colony.jsonwire import JsonRefused, loads

__all__ = [
    "NO_ID",
    "ToolCall",
    "ToolCallError",
    "elapsed_ms",
    "parse_tool_call",
    "result_turn",
    "string_arg",
    "tool_error",
    "tool_result",
]

NO_ID = ""
"""The ``id`` of a reply whose call carried none, or whose turn could not be found. meclaw
leaves ``id`` out there, but a ``tool_result`` without one is not UBF and the colony
dead-letters it; an empty id lets the error reach the caller."""


class ToolCallError(Exception):
    """A call that ends in an error reply: ``code`` is the ``error_code``, ``text`` the
    sentence the caller reads, ``call_id`` the id to answer on when known, ``header`` extra hop
    keys (e.g. ``http_status``)."""

    def __init__(self, code: str, text: str, *, call_id: str | None = None, **header: Any) -> None:
        super().__init__(text)
        self.code = code
        self.text = text
        self.call_id = call_id
        self.header = header


class ToolCall(NamedTuple):
    """The one ``tool_call`` of a body; unpacks as ``args, call_id``."""

    args: JsonObject
    """Its ``text``, parsed: always a JSON object."""
    id: str | None
    """Its ``id``, when it has a string one."""


def parse_tool_call(body: Any) -> ToolCall:
    """The call in ``body``: exactly one turn of ``body.messages`` has ``type: "tool_call"``
    (other turns are ignored) and its ``text`` is a JSON object. Raises :class:`ToolCallError`
    (``invalid_input``) otherwise, carrying the call's id once its turn was found."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list):
        raise ToolCallError("invalid_input", "body.messages[] missing or not an array")
    calls = [t for t in messages if isinstance(t, dict) and t.get("type") == "tool_call"]
    if not calls:
        raise ToolCallError("invalid_input", "no tool_call turn in messages[]")
    if len(calls) > 1:
        raise ToolCallError(
            "invalid_input", f"expected exactly one tool_call turn, found {len(calls)}"
        )
    (turn,) = calls
    raw_id = turn.get("id")
    call_id = raw_id if isinstance(raw_id, str) else None
    text = turn.get("text")
    if not isinstance(text, str):
        raise ToolCallError(
            "invalid_input", "tool_call.text missing or not a string", call_id=call_id
        )
    try:
        args = loads(text)
    except JsonRefused as exc:
        raise ToolCallError(
            "invalid_input", f"tool_call.text is not valid JSON: {exc.problem}", call_id=call_id
        ) from None
    if not isinstance(args, dict):
        raise ToolCallError(
            "invalid_input", "tool_call.text JSON must be an object", call_id=call_id
        )
    return ToolCall(args, call_id)


def string_arg(args: JsonObject, key: str) -> str:
    """A required, non-empty string argument (``invalid_input`` otherwise)."""
    value = args.get(key)
    if not isinstance(value, str):
        raise ToolCallError("invalid_input", f"args.{key} missing or not a string")
    if not value:
        raise ToolCallError("invalid_input", f"args.{key} is empty")
    return value


def result_turn(text: str, call_id: str | None) -> JsonObject:
    """One ``tool_result`` turn, on :data:`NO_ID` when the call had no id."""
    return {
        "origin": "tool",
        "type": "tool_result",
        "text": text,
        "id": NO_ID if call_id is None else call_id,
    }


def tool_result(text: str, call_id: str | None, header: JsonObject) -> JsonObject:
    """A reply: ``header`` becomes the next hop, one ``tool_result`` turn."""
    return {"header": header, "messages": [result_turn(text, call_id)]}


def tool_error(code: str, text: str, call_id: str | None, header: JsonObject) -> JsonObject:
    """An error reply: ``header`` plus ``finish_reason: "error"`` and ``error_code``."""
    return tool_result(text, call_id, {**header, "finish_reason": "error", "error_code": code})


def elapsed_ms(started: float) -> int:
    """Milliseconds since ``started`` (a ``time.perf_counter()``): a tool reply's
    ``duration_ms``."""
    return int((time.perf_counter() - started) * 1000)
