"""A scripted Anthropic Messages server (``POST <url>/messages``, ``url`` ending in ``/v1``)::

    async with ScriptedAnthropic([
        anthropic_tool_use([("toolu_A", "get_weather", {"city": "Paris"})],
                           text="Checking.", thinking="…", signature="sig-1"),
        anthropic_text("15 °C in Paris."),
    ]) as provider:
        ...  # configure the llm cell with provider="anthropic", base_url=provider.url
        provider.requests[1]["messages"]    # what the client really sent
        provider.headers[1]["x-api-key"]

Same contract as :class:`~scripted.core.ScriptedOpenAI`. Requests api.anthropic.com
would refuse are answered 400 with Anthropic's error body, without consuming a script item:
a missing ``model``/``max_tokens``/``messages``, a first message not from the user, a
``system`` role inside ``messages``, empty content or blank text blocks, a tool name outside
``^[a-zA-Z0-9_-]{1,128}$``, a ``tool_use`` not answered by a ``tool_result`` in the next
message (results must lead that message, before any text), and a ``tool_result`` whose id has
no ``tool_use`` in the previous message. Headers are recorded, not enforced.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from scripted.core import ScriptedServer, Status

__all__ = [
    "ScriptedAnthropic",
    "anthropic_empty",
    "anthropic_error",
    "anthropic_in_body_error",
    "anthropic_max_tokens",
    "anthropic_refusal",
    "anthropic_text",
    "anthropic_tool_use",
]

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
"""HTTP status → Anthropic's error ``type``."""

_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,128}")

Call = tuple[str, str, Mapping[str, Any]]
"""``(id, name, input)`` of one ``tool_use`` block."""


class ScriptedAnthropic(ScriptedServer):
    """Anthropic Messages at ``<url>/messages``, with Anthropic's request checks."""

    base_path = "/v1"
    endpoint = "/messages"

    def error_body(self, code: int, message: str, type: str = "scripted") -> Any:
        """``{"type": "error", "error": {"type", "message"}}``; the type follows the status
        unless ``type`` already is one of Anthropic's."""
        kind = type if type in _ERROR_TYPES.values() else _ERROR_TYPES.get(code, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}

    def validate(self, body: Any) -> Status | None:
        """Refuse what api.anthropic.com refuses (see the module docstring)."""
        if not isinstance(body, dict):
            return _invalid("Input should be a valid dictionary")
        for field in ("model", "max_tokens", "messages"):
            if field not in body:
                return _invalid(f"{field}: Field required")
        messages = body["messages"]
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            return _invalid("messages: Input should be a valid list")
        if not messages:
            return _invalid("messages: at least one message is required")
        tools = body.get("tools") or []
        if isinstance(tools, list):
            for i, tool in enumerate(tools):
                tool_name = tool.get("name") if isinstance(tool, dict) else None
                if isinstance(tool, dict) and "type" not in tool and "input_schema" not in tool:
                    return _invalid(f"tools.{i}.custom.input_schema: Field required")
                if not isinstance(tool_name, str) or not _TOOL_NAME.fullmatch(tool_name):
                    return _invalid(
                        f"tools.{i}.custom.name: String should match pattern "
                        "'^[a-zA-Z0-9_-]{1,128}$'"
                    )
        for i, msg in enumerate(messages):
            refusal = _check_message(i, msg)
            if refusal is not None:
                return refusal
        if messages[0].get("role") != "user":
            return _invalid('messages: first message must use the "user" role')
        previous: list[str] = []  # tool_use ids of the previous message
        for i, msg in enumerate(messages):
            blocks = _blocks(msg)
            if msg.get("role") == "user":
                leading: set[Any] = set()
                seen_other = False
                for k, block in enumerate(blocks):
                    if block.get("type") != "tool_result":
                        seen_other = True
                        continue
                    answered = block.get("tool_use_id")
                    if answered not in previous:
                        return _invalid(
                            f"messages.{i}.content.{k}: unexpected `tool_use_id` found in "
                            f"`tool_result` blocks: {answered}. Each `tool_result` block must "
                            "have a corresponding `tool_use` block in the previous message."
                        )
                    if not seen_other:
                        leading.add(answered)
                missing = [p for p in previous if p not in leading]
                if missing:
                    return _unanswered(i - 1, missing)
                previous = []
            else:
                if previous:
                    return _unanswered(i - 1, previous)
                previous = [str(b.get("id")) for b in blocks if b.get("type") == "tool_use"]
        if previous:
            return _unanswered(len(messages) - 1, previous)
        return None


def _invalid(message: str) -> Status:
    """Anthropic's 400 shape."""
    return Status(
        400, {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    )


def _unanswered(index: int, ids: Sequence[str]) -> Status:
    return _invalid(
        f"messages.{index}: `tool_use` ids were found without `tool_result` blocks immediately "
        f"after: {', '.join(ids)}. Each `tool_use` block must have a corresponding "
        "`tool_result` block in the next message."
    )


def _blocks(msg: Mapping[str, Any]) -> list[dict[str, Any]]:
    content = msg.get("content")
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def _check_message(i: int, msg: Mapping[str, Any]) -> Status | None:
    role = msg.get("role")
    if role == "system":
        return _invalid(
            'messages: Unexpected role "system". The Messages API accepts a top-level `system` '
            'parameter, not "system" as an input message role.'
        )
    if role not in ("user", "assistant"):
        return _invalid(f"messages.{i}.role: Input should be 'user' or 'assistant'")
    content = msg.get("content")
    if isinstance(content, str):
        blocks: list[Any] = [{"type": "text", "text": content}] if content else []
    elif isinstance(content, list):
        blocks = content
    else:
        return _invalid(f"messages.{i}.content: Input should be a valid list")
    if not blocks:
        return _invalid(
            f"messages.{i}: all messages must have non-empty content except for the optional "
            "final assistant message"
        )
    for k, block in enumerate(blocks):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            return _invalid(f"messages.{i}.content.{k}: Input should be a valid dictionary")
        if block["type"] == "text":
            text = block.get("text")
            if not isinstance(text, str):
                return _invalid(f"messages.{i}.content.{k}.text.text: Field required")
            if not text:
                return _invalid("messages: text content blocks must be non-empty")
            if not text.strip():
                return _invalid("messages: text content blocks must contain non-whitespace text")
    return None


# -- Messages API bodies ---------------------------------------------------------------------


def _message(
    content: list[dict[str, Any]],
    stop_reason: str,
    *,
    model: str,
    id: str,
    input_tokens: int,
    output_tokens: int,
    cache_read: int = 0,
    cache_creation: int = 0,
    stop_sequence: str | None = None,
    stop_details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
    }
    if stop_details is not None:
        body["stop_details"] = stop_details
    body["usage"] = {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": cache_creation,
        "cache_read_input_tokens": cache_read,
        "output_tokens": output_tokens,
    }
    return body


def _thinking(
    thinking: str | None, signature: str | None, redacted: str | None
) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if thinking is not None:
        blocks.append(
            {"type": "thinking", "thinking": thinking, "signature": signature or "sig-scripted"}
        )
    if redacted is not None:
        blocks.append({"type": "redacted_thinking", "data": redacted})
    return blocks


def _tool_use(call: Call) -> dict[str, Any]:
    call_id, name, arguments = call
    return {"type": "tool_use", "id": call_id, "name": name, "input": dict(arguments)}


def anthropic_text(
    text: str,
    stop_reason: str = "end_turn",
    *,
    thinking: str | None = None,
    signature: str | None = None,
    model: str = "claude-mock",
    id: str = "msg_scripted",
    input_tokens: int = 10,
    output_tokens: int = 5,
    cache_read: int = 0,
    cache_creation: int = 0,
    stop_sequence: str | None = None,
) -> dict[str, Any]:
    """A text answer (``thinking`` puts a signed thinking block before it)."""
    content = [*_thinking(thinking, signature, None), {"type": "text", "text": text}]
    return _message(
        content,
        stop_reason,
        model=model,
        id=id,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read=cache_read,
        cache_creation=cache_creation,
        stop_sequence=stop_sequence,
    )


def anthropic_tool_use(
    calls: Sequence[Call],
    text: str | None = None,
    thinking: str | None = None,
    signature: str | None = None,
    *,
    redacted: str | None = None,
    model: str = "claude-mock",
    id: str = "msg_scripted",
    input_tokens: int = 10,
    output_tokens: int = 5,
    cache_read: int = 0,
    cache_creation: int = 0,
) -> dict[str, Any]:
    """A ``tool_use`` answer: [thinking (signature defaults to ``"sig-scripted"``)],
    [redacted_thinking ``data``], [text], then one ``tool_use`` per ``(id, name, input)``."""
    content = _thinking(thinking, signature, redacted)
    if text is not None:
        content.append({"type": "text", "text": text})
    content.extend(_tool_use(call) for call in calls)
    return _message(
        content,
        "tool_use",
        model=model,
        id=id,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read=cache_read,
        cache_creation=cache_creation,
    )


def anthropic_empty(
    *, output_tokens: int = 2, model: str = "claude-mock", id: str = "msg_scripted"
) -> dict[str, Any]:
    """The documented empty ``end_turn``: no content, two output tokens."""
    return _message(
        [], "end_turn", model=model, id=id, input_tokens=10, output_tokens=output_tokens
    )


def anthropic_refusal(
    category: str | None,
    text: str | None = None,
    *,
    explanation: str | None = None,
    model: str = "claude-mock",
    id: str = "msg_scripted",
    input_tokens: int = 10,
    output_tokens: int = 5,
) -> dict[str, Any]:
    """``stop_reason: refusal`` with ``stop_details {type, category, explanation}``."""
    content = [] if text is None else [{"type": "text", "text": text}]
    return _message(
        content,
        "refusal",
        model=model,
        id=id,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        stop_details={"type": "refusal", "category": category, "explanation": explanation},
    )


def anthropic_max_tokens(
    text: str | None = "The answer was cut",
    partial_call: Call | None = None,
    *,
    stop_reason: str = "max_tokens",
    model: str = "claude-mock",
    id: str = "msg_scripted",
    input_tokens: int = 10,
    output_tokens: int = 16,
) -> dict[str, Any]:
    """A cut-off answer: text, then optionally a truncated ``tool_use``; ``stop_reason`` may be
    ``model_context_window_exceeded`` instead."""
    content = [] if text is None else [{"type": "text", "text": text}]
    if partial_call is not None:
        content.append(_tool_use(partial_call))
    return _message(
        content,
        stop_reason,
        model=model,
        id=id,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
    )


def anthropic_error(
    code: int,
    *,
    type: str | None = None,
    message: str | None = None,
    retry_after: float | None = None,
) -> Status:
    """An Anthropic-shaped HTTP error, optionally with ``retry-after`` (seconds)."""
    headers = {} if retry_after is None else {"retry-after": f"{retry_after:g}"}
    error = {
        "type": type or _ERROR_TYPES.get(code, "api_error"),
        "message": message if message is not None else f"scripted {code} error",
    }
    return Status(code, {"type": "error", "error": error}, headers)


def anthropic_in_body_error(
    type: str = "overloaded_error", message: str = "Overloaded"
) -> dict[str, Any]:
    """An HTTP-200 body that is really an error (as a proxy or a stream's error event carries)."""
    return {"type": "error", "error": {"type": type, "message": message}}
