"""A scripted OpenAI Responses API (``POST /v1/responses``; xAI serves the same shape).

Same contract as :class:`~scripted.core.ScriptedOpenAI`: served in order, the last item
repeats, ``requests``/``headers`` recorded, :class:`Status`/:class:`Delay`/:class:`Raw` items
work. Requests api.openai.com refuses are answered with its error body without consuming an
item:

* a ``function_call`` item with no later ``function_call_output`` of the same ``call_id`` (400);
* a ``function_call_output`` with no earlier ``function_call`` of its ``call_id`` (400);
* a ``reasoning`` item not immediately followed by another output item of the same turn (an
  assistant message or a ``*_call`` item) — e.g. followed by a user message, a tool output or
  nothing (400);
* with ``store: false``, a ``reasoning`` item without ``encrypted_content`` (404: nothing is
  persisted, so its id cannot be resolved).

Reply builders: :func:`responses_text`, :func:`responses_calls` (optionally with a reasoning
item carrying ``encrypted_content``), :func:`responses_empty`, :func:`responses_incomplete`,
:func:`responses_refusal`, :func:`responses_failed`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from scripted.core import ScriptedServer, Status

__all__ = [
    "ScriptedResponses",
    "responses_calls",
    "responses_empty",
    "responses_failed",
    "responses_incomplete",
    "responses_refusal",
    "responses_text",
]

Call = tuple[str, str, Mapping[str, Any] | str]
"""``(call_id, name, arguments)``; dict arguments become compact JSON, a string goes verbatim."""


class ScriptedResponses(ScriptedServer):
    """OpenAI Responses at ``<url>/responses`` (``url`` ends in ``/v1``), with its input checks."""

    base_path = "/v1"
    endpoint = "/responses"

    def error_body(self, code: int, message: str, type: str = "scripted") -> Any:
        return {"error": {"message": message, "type": type, "param": None, "code": code}}

    def validate(self, body: Any) -> Status | None:
        """Refuse what api.openai.com refuses: no ``input``, broken call/output/reasoning order."""
        if not isinstance(body, dict):
            return _invalid("The request body must be a JSON object.", None)
        items = body.get("input")
        if isinstance(items, str):
            return None
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            return _invalid("Invalid 'input': expected a string or a list of items.", "input")
        stateless = body.get("store") is False
        called: set[str] = set()
        for n, item in enumerate(items):
            kind = item.get("type")
            if kind == "function_call":
                call_id = item.get("call_id")
                answered = any(
                    later.get("type") == "function_call_output" and later.get("call_id") == call_id
                    for later in items[n + 1 :]
                )
                if not answered:
                    return _invalid(f"No tool output found for function call {call_id}.", "input")
                called.add(str(call_id))
            elif kind == "function_call_output":
                call_id = item.get("call_id")
                if call_id not in called:
                    return _invalid(
                        f"No tool call found for function call output with call_id {call_id}.",
                        "input",
                    )
            elif kind == "reasoning":
                item_id = item.get("id")
                if stateless and not item.get("encrypted_content"):
                    return _invalid(
                        f"Item with id '{item_id}' not found. Items are not persisted when "
                        "`store` is set to false. Try again with `store` set to true, or remove "
                        "this item from your input.",
                        "input",
                        status=404,
                    )
                following = items[n + 1] if n + 1 < len(items) else None
                if following is None or not _turn_output(following):
                    return _invalid(
                        f"Item '{item_id}' of type 'reasoning' was provided without its "
                        "required following item.",
                        "input",
                    )
        return None


def _turn_output(item: Mapping[str, Any]) -> bool:
    """Whether ``item`` can follow a reasoning item: model output of the same turn."""
    kind = item.get("type")
    if kind in (None, "message"):
        return item.get("role") == "assistant"
    return isinstance(kind, str) and kind.endswith("_call")


def _invalid(message: str, param: str | None, *, status: int = 400) -> Status:
    """OpenAI's error shape (``code`` is null for these)."""
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": None}
    return Status(status, {"error": error})


# -- Response objects ------------------------------------------------------------------------


def _response(
    output: list[dict[str, Any]],
    *,
    status: str = "completed",
    model: str,
    id: str,
    input_tokens: int,
    output_tokens: int,
    cached_tokens: int,
    reasoning_tokens: int,
    incomplete_reason: str | None = None,
) -> dict[str, Any]:
    return {
        "id": id,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": model,
        "output": output,
        "usage": {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": cached_tokens},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "total_tokens": input_tokens + output_tokens,
        },
        "incomplete_details": None if incomplete_reason is None else {"reason": incomplete_reason},
        "error": None,
    }


def _message(text: str, *, id: str, status: str = "completed") -> dict[str, Any]:
    return {
        "type": "message",
        "id": id,
        "status": status,
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _function_call(call: Call, status: str = "completed") -> dict[str, Any]:
    call_id, name, arguments = call
    return {
        "type": "function_call",
        "id": "fc_" + call_id.removeprefix("call_"),
        "call_id": call_id,
        "name": name,
        "arguments": arguments
        if isinstance(arguments, str)
        else json.dumps(dict(arguments), separators=(",", ":")),
        "status": status,
    }


def _reasoning(reasoning: tuple[str, str]) -> dict[str, Any]:
    item_id, encrypted = reasoning
    return {"type": "reasoning", "id": item_id, "summary": [], "encrypted_content": encrypted}


def responses_text(
    text: str,
    *,
    reasoning: tuple[str, str] | None = None,
    model: str = "gpt-5-mock",
    id: str = "resp_scripted",
    input_tokens: int = 10,
    output_tokens: int = 5,
    cached_tokens: int = 0,
    reasoning_tokens: int = 0,
) -> dict[str, Any]:
    """A completed answer with one assistant message (after a reasoning item if given)."""
    output = [] if reasoning is None else [_reasoning(reasoning)]
    output.append(_message(text, id="msg_" + id.removeprefix("resp_")))
    return _response(
        output,
        model=model,
        id=id,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cached_tokens=cached_tokens,
        reasoning_tokens=reasoning_tokens,
    )


def responses_calls(
    calls: Sequence[Call],
    text: str | None = None,
    reasoning: tuple[str, str] | None = None,
    *,
    model: str = "gpt-5-mock",
    id: str = "resp_scripted",
    input_tokens: int = 10,
    output_tokens: int = 5,
    cached_tokens: int = 0,
    reasoning_tokens: int = 0,
) -> dict[str, Any]:
    """A completed answer calling tools: ``[reasoning (id, encrypted_content)], [message],
    function_call…`` — the order OpenAI emits them in. Call item ids are ``fc_<call id>``."""
    output = [] if reasoning is None else [_reasoning(reasoning)]
    if text is not None:
        output.append(_message(text, id="msg_" + id.removeprefix("resp_")))
    output.extend(_function_call(call) for call in calls)
    return _response(
        output,
        model=model,
        id=id,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cached_tokens=cached_tokens,
        reasoning_tokens=reasoning_tokens,
    )


def responses_empty(*, model: str = "gpt-5-mock", id: str = "resp_scripted") -> dict[str, Any]:
    """A completed answer with nothing in it (no message, no call, no output token)."""
    return _response(
        [],
        model=model,
        id=id,
        input_tokens=10,
        output_tokens=0,
        cached_tokens=0,
        reasoning_tokens=0,
    )


def responses_incomplete(
    reason: str = "max_output_tokens",
    text: str | None = None,
    calls: Sequence[Call] = (),
    *,
    model: str = "gpt-5-mock",
    id: str = "resp_scripted",
    input_tokens: int = 10,
    output_tokens: int = 16,
) -> dict[str, Any]:
    """A cut-off answer (``status: incomplete``, ``incomplete_details.reason``: usually
    ``max_output_tokens`` or ``content_filter``), with the partial text and calls it got to."""
    output: list[dict[str, Any]] = []
    if text is not None:
        output.append(_message(text, id="msg_" + id.removeprefix("resp_"), status="incomplete"))
    output.extend(_function_call(call, status="incomplete") for call in calls)
    return _response(
        output,
        status="incomplete",
        model=model,
        id=id,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cached_tokens=0,
        reasoning_tokens=0,
        incomplete_reason=reason,
    )


def responses_refusal(
    text: str, *, model: str = "gpt-5-mock", id: str = "resp_scripted"
) -> dict[str, Any]:
    """A declined ask: a completed message whose only content part is a ``refusal``."""
    message = {
        "type": "message",
        "id": "msg_" + id.removeprefix("resp_"),
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "refusal", "refusal": text}],
    }
    return _response(
        [message],
        model=model,
        id=id,
        input_tokens=10,
        output_tokens=8,
        cached_tokens=0,
        reasoning_tokens=0,
    )


def responses_failed(
    code: str = "server_error",
    message: str = "The server had an error while processing your request.",
    *,
    model: str = "gpt-5-mock",
    id: str = "resp_scripted",
) -> dict[str, Any]:
    """An HTTP-200 response that failed: ``status: failed`` with an ``error`` object."""
    body = _response(
        [],
        status="failed",
        model=model,
        id=id,
        input_tokens=0,
        output_tokens=0,
        cached_tokens=0,
        reasoning_tokens=0,
    )
    body["error"] = {"code": code, "message": message}
    body["usage"] = None
    return body
