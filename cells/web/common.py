"""What the web tool cells share (cells.md §0.7): reading the call and the two reply shapes
(the visible cut and the JSON they write live in :mod:`cells.text`).

A tool cell answers one ``tool_call`` turn with one ``tool_result`` turn on the same id::

    {"header": {"operation": "web_fetch", ...},
     "messages": [{"origin": "tool", "type": "tool_result", "text": "...", "id": "call-1"}]}

A failure has the same shape, with the error sentence as ``text`` and ``finish_reason:
"error"`` plus ``error_code`` in the header. Nothing here knows HTTP; ``bash``, ``file`` and
other tool cells can import it as it is.
"""

from __future__ import annotations

import codecs
from collections.abc import AsyncIterable
from dataclasses import dataclass
from typing import Any

from colony.envelope import JsonObject
from colony.jsonwire import JsonRefused, loads

NO_ID = ""
"""The ``id`` of a reply whose call carried none, or could not be read. meclaw leaves ``id``
out there, but a ``tool_result`` without one is not UBF and the colony dead-letters it; an empty
id (what the ``code`` and ``store`` cells send) lets the error reach the caller."""


class WebToolError(Exception):
    """A call that ends in an error reply: ``code`` is the ``error_code``, ``text`` the
    sentence the caller reads, ``header`` extra hop keys (e.g. ``http_status``)."""

    def __init__(self, code: str, text: str, **header: Any) -> None:
        super().__init__(text)
        self.code = code
        self.text = text
        self.header = header


@dataclass(frozen=True, slots=True)
class ToolCall:
    """The one ``tool_call`` of a message."""

    args: dict[str, Any]
    """Its ``text``, parsed: always a JSON object."""
    id: str | None
    """Its ``id``, when it has a string one."""


def parse_tool_call(body: Any) -> ToolCall:
    """The call in ``body``: exactly one turn of ``body.messages`` has ``type: "tool_call"``
    (other turns are ignored) and its ``text`` is a JSON object. Raises :class:`WebToolError`
    (``invalid_input``) with meclaw's sentences otherwise."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list):
        raise WebToolError("invalid_input", "body.messages[] missing or not an array")
    calls = [t for t in messages if isinstance(t, dict) and t.get("type") == "tool_call"]
    if not calls:
        raise WebToolError("invalid_input", "no tool_call turn in messages[]")
    if len(calls) > 1:
        raise WebToolError(
            "invalid_input", f"expected exactly one tool_call turn, found {len(calls)}"
        )
    (call,) = calls
    text = call.get("text")
    if not isinstance(text, str):
        raise WebToolError("invalid_input", "tool_call.text missing or not a string")
    try:
        args = loads(text)
    except JsonRefused as exc:
        raise WebToolError(
            "invalid_input", f"tool_call.text is not valid JSON: {exc.problem}"
        ) from None
    if not isinstance(args, dict):
        raise WebToolError("invalid_input", "tool_call.text JSON must be an object")
    call_id = call.get("id")
    return ToolCall(args, call_id if isinstance(call_id, str) else None)


def string_arg(args: dict[str, Any], key: str) -> str:
    """A required, non-empty string argument (``invalid_input`` otherwise)."""
    value = args.get(key)
    if not isinstance(value, str):
        raise WebToolError("invalid_input", f"args.{key} missing or not a string")
    if not value:
        raise WebToolError("invalid_input", f"args.{key} is empty")
    return value


# -- text -----------------------------------------------------------------------------------


def lossy_utf8(data: bytes) -> str:
    """``data`` as text, each invalid sequence replaced by U+FFFD (Rust's
    ``String::from_utf8_lossy`` makes the same replacements)."""
    return data.decode("utf-8", "replace")


def lossy_utf8_prefix(data: bytes) -> str:
    """Like :func:`lossy_utf8` for the start of a longer stream: a character the end of
    ``data`` cuts through is left out rather than replaced."""
    return codecs.getincrementaldecoder("utf-8")("replace").decode(data, final=False)


def human_duration(ms: int) -> str:
    """A duration the way meclaw's error texts print one (Rust's ``Duration`` debug form):
    ``15s``, ``1.5s``, ``250ms``."""
    if ms < 1000:
        return f"{ms}ms"
    seconds = f"{ms / 1000:.3f}".rstrip("0").rstrip(".")
    return f"{seconds}s"


# -- reading a stream -----------------------------------------------------------------------


async def read_capped(chunks: AsyncIterable[bytes], limit: int) -> tuple[bytes, bool]:
    """``(data, complete)``: the stream's bytes, read until it ends (``complete``) or until
    more than ``limit`` bytes have arrived — then reading stops, the rest is never fetched
    and ``data`` holds at most ``limit`` plus one chunk. The iterator is closed either way."""
    data = bytearray()
    iterator = aiter(chunks)
    complete = True
    try:
        async for chunk in iterator:
            data += chunk
            if len(data) > limit:
                complete = False
                break
    finally:
        close = getattr(iterator, "aclose", None)
        if close is not None:
            await close()
    return bytes(data), complete


# -- replies --------------------------------------------------------------------------------


def tool_result(text: str, call_id: str | None, header: JsonObject) -> JsonObject:
    """A successful reply: ``header`` becomes the next hop, one ``tool_result`` turn."""
    turn = {
        "origin": "tool",
        "type": "tool_result",
        "text": text,
        "id": NO_ID if call_id is None else call_id,
    }
    return {"header": header, "messages": [turn]}


def tool_error(code: str, text: str, call_id: str | None, header: JsonObject) -> JsonObject:
    """An error reply: ``header`` plus ``finish_reason: "error"`` and ``error_code``."""
    return tool_result(text, call_id, {**header, "finish_reason": "error", "error_code": code})
