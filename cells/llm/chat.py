"""OpenAI chat completions: UBF turns to a request body, a response body to UBF turns.

Pure functions (no I/O), so every mapping rule is testable in isolation:

* ``user|assistant|system`` text turns become messages with ``content``;
* a run of consecutive ``assistant/tool_call`` turns becomes **one** assistant message whose
  ``tool_calls`` lists them in order, with ``content: null`` (not ``""``: some compatible
  servers refuse an empty string beside tool calls); a tool_call turn's text is the function
  object ``{"name", "arguments"}`` as JSON;
* ``tool/tool_result`` turns become ``{"role": "tool", "tool_call_id", "content"}``;
* anything else (images, audio, pointers, odd origin/type pairs) is refused.

A reply becomes one tool_call turn per call, then a text turn if the message has content (even
empty). ``finish_reason`` passes through (``function_call`` reads as ``tool_calls``); a null or
unknown one is an error, never coerced to ``stop``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from cells.llm.params import LlmParams

JsonObject = dict[str, Any]

FINISH_REASONS = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "content_filter": "content_filter",
    "function_call": "tool_calls",
}


class TranslateError(Exception):
    """The conversation cannot be put on this wire (``provider_error``, source translate)."""


class ReplyError(Exception):
    """The provider's answer is unusable (``provider_error``, source parse)."""


def _function(turn: JsonObject, index: int) -> Any:
    text = turn.get("text")
    if not isinstance(text, str):
        raise TranslateError(f"messages[{index}] is a tool_call without text")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise TranslateError(
            f'messages[{index}] tool_call text is not JSON (expected {{"name", "arguments"}})'
        ) from None


def wire_messages(turns: list[Any]) -> list[JsonObject]:
    """The chat ``messages`` for a list of UBF turns."""
    out: list[JsonObject] = []
    calls: list[JsonObject] | None = None
    for index, turn in enumerate(turns):
        if not isinstance(turn, dict) or "origin" not in turn:
            raise TranslateError(
                f"messages[{index}] is not a turn (pointers are not resolved here)"
            )
        origin, kind = turn.get("origin"), turn.get("type")
        if origin == "assistant" and kind == "tool_call":
            call = {
                "id": turn.get("id", ""),
                "type": "function",
                "function": _function(turn, index),
            }
            if calls is None:
                calls = []
                out.append({"role": "assistant", "content": None, "tool_calls": calls})
            calls.append(call)
            continue
        calls = None
        text = turn.get("text", "")
        if kind == "text" and origin in ("user", "assistant", "system"):
            out.append({"role": origin, "content": text})
        elif origin == "tool" and kind == "tool_result":
            out.append({"role": "tool", "tool_call_id": turn.get("id", ""), "content": text})
        else:
            raise TranslateError(
                f"messages[{index}] is {origin}/{kind}, which chat completions cannot carry"
            )
    return out


def request_body(params: LlmParams, prompt: str, tools: list[Any], turns: list[Any]) -> JsonObject:
    messages = wire_messages(turns)
    if prompt:
        messages.insert(0, {"role": "system", "content": prompt})
    body: JsonObject = {
        "model": params.model,
        "messages": messages,
        "temperature": params.temperature,
        "max_tokens": params.max_tokens,
    }
    if tools:
        body["tools"] = tools
    if params.reasoning is not None:
        body["reasoning"] = params.reasoning
    elif params.reasoning_effort is not None:
        body["reasoning"] = {"effort": params.reasoning_effort}
    body.update(params.provider_extra)
    return body


def encode(body: JsonObject) -> bytes:
    """The request bytes: sorted keys, compact, UTF-8 (what meclaw's serializer writes)."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(slots=True)
class Reply:
    turns: list[JsonObject]
    finish_reason: str
    model: str
    response_id: str
    tokens_prompt: int | None = None
    tokens_completion: int | None = None
    text: str | None = None
    calls: int = 0
    extra: JsonObject = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        """Nothing said, nothing called, (almost) nothing generated: ask once more."""
        silent = self.text is None or not self.text.strip()
        return silent and self.calls == 0 and (self.tokens_completion or 0) <= 3


def parse_reply(body: Any) -> Reply:
    """The UBF answer in a chat.completion body, or :class:`ReplyError`."""
    if not isinstance(body, dict):
        raise ReplyError("the response body is not a JSON object")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ReplyError("the response has no choices[0]")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise ReplyError("choices[0] has no message")
    model, response_id = body.get("model"), body.get("id")
    if not isinstance(model, str):
        raise ReplyError("the response has no model")
    if not isinstance(response_id, str):
        raise ReplyError("the response has no id")
    raw_finish = choice.get("finish_reason")
    finish = FINISH_REASONS.get(raw_finish) if isinstance(raw_finish, str) else None
    if finish is None:
        raise ReplyError(f"finish_reason {raw_finish!r} is not one this cell knows")
    turns: list[JsonObject] = []
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise ReplyError("message.tool_calls is not an array")
    for call in calls:
        if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
            raise ReplyError("a tool call has no function object")
        turns.append(
            {
                "origin": "assistant",
                "type": "tool_call",
                "id": str(call.get("id", "")),
                "text": json.dumps(
                    call["function"], sort_keys=True, separators=(",", ":"), ensure_ascii=False
                ),
            }
        )
    content = message.get("content")
    text = content if isinstance(content, str) else None
    if text is not None:
        turns.append({"origin": "assistant", "type": "text", "text": text})
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    assert isinstance(usage, dict)
    prompt_tokens = usage.get("prompt_tokens")
    completion_tokens = usage.get("completion_tokens")
    return Reply(
        turns=turns,
        finish_reason=finish,
        model=model,
        response_id=response_id,
        tokens_prompt=prompt_tokens if isinstance(prompt_tokens, int) else None,
        tokens_completion=completion_tokens if isinstance(completion_tokens, int) else None,
        text=text,
        calls=len(calls),
    )


def in_body_error(body: Any) -> JsonObject | None:
    """The ``error`` object of an HTTP-200 answer that carries one instead of ``choices``."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict) and not body.get("choices"):
        error: JsonObject = body["error"]
        return error
    return None
