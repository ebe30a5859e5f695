"""Anthropic Messages (``POST {base_url}/messages``; also GLM's Anthropic-compatible endpoint).

Request, from UBF:

* the body is ``{model, max_tokens, system?, messages, tools?, temperature}`` then ``extra``;
* ``system`` is the prompt. UBF ``system`` text turns inside the conversation have no place in
  ``messages`` (the role does not exist there on most models), so their texts are appended to
  the top-level ``system`` in conversation order, joined by a blank line; the turns around them
  then meet and merge;
* every message's ``content`` is a list of blocks; consecutive messages of one role are merged
  into one message (Anthropic wants user/assistant alternation and the first message from the
  user — otherwise :class:`TranslateError`, no call);
* consecutive assistant turns are one assistant message: the non-blank text blocks first, then
  one ``tool_use`` block ``{type, id, name, input}`` per call in call order. When the turn's call
  ids have a native record (the ``content`` list as received), that list is sent instead, byte
  for byte — thinking and redacted_thinking blocks with their signatures included — provided its
  ``tool_use`` ids are exactly the run's (a stale record is ignored and the run rebuilt);
* tool results are ``tool_result`` blocks ``{type, tool_use_id, content}`` in the order given,
  all in the next user message and before any text of it (user text right after results joins
  that message after them). The UBF error convention (text ``{"error": …}``, one key) becomes
  ``is_error: true`` with the error string as content;
* blank text blocks are dropped (the API refuses them); tools are ``{name, description?,
  input_schema}``, a name outside ``^[a-zA-Z0-9_-]{1,128}$`` is a :class:`TranslateError`.

Reply, to UBF: tool_use blocks become tool_call turns (ids kept, ``toolu_…``), text blocks one
text turn; ``end_turn``/``stop_sequence`` → ``stop`` (``tool_calls`` if calls are present),
``tool_use`` → ``tool_calls``, ``max_tokens``/``model_context_window_exceeded`` → ``length`` and
``refusal`` → ``content_filter`` (``stop_details.category``, else ``"refusal"``), both without
calls; ``pause_turn`` or anything else is a :class:`ReplyError`. When calls are emitted the
whole ``content`` list is :attr:`Reply.native`. Usage needs no arithmetic: Anthropic's
``input_tokens`` already excludes cache reads and writes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

from cells.llm.dialects.base import (
    JsonObject,
    NativeLookup,
    Reply,
    ReplyError,
    Tool,
    TranslateError,
    Usage,
    call_text,
    error_of,
    parse_call,
)

VERSION = "2023-06-01"
"""The ``anthropic-version`` header every request carries."""

TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,128}")
"""Anthropic's tool-name grammar (matched in full)."""

_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}

_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
"""Anthropic's error ``type`` → the HTTP status it is documented with."""


class AnthropicMessages:
    name: ClassVar[str] = "anthropic"

    def url(self, base_url: str, model: str) -> str:
        return base_url + "/messages"

    def headers(self, api_key: str) -> dict[str, str]:
        headers = {"x-api-key": api_key} if api_key else {}
        headers["anthropic-version"] = VERSION
        return headers

    def tool(self, tool: Tool) -> Any:
        if not TOOL_NAME.fullmatch(tool.name):
            raise TranslateError(
                f"tool {tool.name!r} cannot be sent to anthropic: "
                f"tool names must match ^[a-zA-Z0-9_-]{{1,128}}$"
            )
        out: JsonObject = {"name": tool.name}
        if tool.description is not None:
            out["description"] = tool.description
        out["input_schema"] = tool.parameters
        if tool.strict is not None:
            out["strict"] = tool.strict
        return out

    def messages(
        self, turns: list[Any], native: NativeLookup
    ) -> tuple[list[JsonObject], list[str]]:
        """``(messages, system texts found among the turns)``."""
        parts: list[tuple[str, list[JsonObject]]] = []  # (role, blocks), merged below
        system: list[str] = []
        run: list[tuple[int, JsonObject]] = []  # the pending assistant turns

        def close_run() -> None:
            if run:
                blocks = _assistant_blocks(run, native)
                if blocks:
                    parts.append(("assistant", blocks))
                run.clear()

        for index, turn in enumerate(turns):
            if not isinstance(turn, dict) or "origin" not in turn:
                raise TranslateError(
                    f"messages[{index}] is not a turn (pointers are not resolved here)"
                )
            origin, kind = turn.get("origin"), turn.get("type")
            if origin == "assistant" and kind in ("text", "tool_call"):
                run.append((index, turn))
                continue
            close_run()
            if origin == "system" and kind == "text":
                text = _text(turn, index)
                if text.strip():
                    system.append(text)
                continue
            if origin == "user" and kind == "text":
                text = _text(turn, index)
                if text.strip():
                    parts.append(("user", [{"type": "text", "text": text}]))
            elif origin == "tool" and kind == "tool_result":
                parts.append(("user", [_result(turn, index)]))
            else:
                raise TranslateError(
                    f"messages[{index}] is {origin}/{kind}, which anthropic messages cannot carry"
                )
        close_run()

        messages: list[JsonObject] = []
        for role, blocks in parts:
            if messages and messages[-1]["role"] == role:
                messages[-1]["content"].extend(blocks)
            else:
                messages.append({"role": role, "content": list(blocks)})
        for message in messages:
            if message["role"] == "user":  # every tool_result before any text (stable)
                content = message["content"]
                message["content"] = [b for b in content if b.get("type") == "tool_result"] + [
                    b for b in content if b.get("type") != "tool_result"
                ]
        if not messages or messages[0]["role"] != "user":
            raise TranslateError(
                "anthropic needs the conversation to start with a user message "
                "(after system turns are moved to the top-level system)"
            )
        return messages, system

    def request(
        self,
        *,
        model: str,
        prompt: str,
        tools: list[Tool],
        turns: list[Any],
        max_tokens: int,
        temperature: float,
        native: NativeLookup,
        extra: Mapping[str, Any],
    ) -> JsonObject:
        messages, system_turns = self.messages(turns, native)
        system = "\n\n".join([prompt, *system_turns] if prompt else system_turns)
        body: JsonObject = {"model": model, "max_tokens": max_tokens}
        if system:
            body["system"] = system
        body["messages"] = messages
        if tools:
            body["tools"] = [self.tool(t) for t in tools]
        body["temperature"] = temperature
        body.update(extra)
        return body

    def parse(self, body: Any) -> Reply:
        if not isinstance(body, dict):
            raise ReplyError("the response body is not a JSON object")
        content = body.get("content")
        if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
            raise ReplyError("the response has no content list")
        model, response_id = body.get("model"), body.get("id")
        if not isinstance(model, str):
            raise ReplyError("the response has no model")
        if not isinstance(response_id, str):
            raise ReplyError("the response has no id")
        raw = body.get("stop_reason")
        finish = _FINISH.get(raw) if isinstance(raw, str) else None
        if finish is None:
            if raw == "pause_turn":
                raise ReplyError(
                    "stop_reason 'pause_turn' (a paused server-tool loop) is not supported"
                )
            raise ReplyError(f"stop_reason {raw!r} is not one this cell knows")
        texts = [b.get("text") for b in content if b.get("type") == "text"]
        if not all(isinstance(t, str) for t in texts):
            raise ReplyError("a text block has no text")
        uses = [b for b in content if b.get("type") == "tool_use"]
        if finish == "stop" and uses:
            finish = "tool_calls"
        if finish == "tool_calls" and not uses:
            raise ReplyError("stop_reason 'tool_use' without a tool_use block")
        turns: list[JsonObject] = []
        ids: list[str] = []
        if finish == "tool_calls":  # a cut-off or refused turn's calls never run
            for block in uses:
                call_id, name, arguments = block.get("id"), block.get("name"), block.get("input")
                if not isinstance(call_id, str) or not call_id:
                    raise ReplyError("a tool_use block has no id")
                if not isinstance(name, str) or not name:
                    raise ReplyError(f"tool_use {call_id} has no name")
                if not isinstance(arguments, dict):
                    raise ReplyError(f"tool_use {call_id} input is not an object")
                ids.append(call_id)
                turns.append(
                    {
                        "origin": "assistant",
                        "type": "tool_call",
                        "id": call_id,
                        "text": call_text(name, arguments),
                    }
                )
        joined = "".join(t for t in texts if isinstance(t, str))
        text = joined or None
        if text is not None:
            turns.append({"origin": "assistant", "type": "text", "text": text})
        category = None
        if finish == "content_filter":
            details = body.get("stop_details")
            found = details.get("category") if isinstance(details, dict) else None
            category = found if isinstance(found, str) and found else "refusal"
        raw_usage = body.get("usage")
        usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
        return Reply(
            turns=turns,
            finish_reason=finish,
            stop_reason=raw,
            model=model,
            response_id=response_id,
            usage=Usage(
                input=_int(usage.get("input_tokens")),
                output=_int(usage.get("output_tokens")),
                cache_read=_int(usage.get("cache_read_input_tokens")),
                cache_creation=_int(usage.get("cache_creation_input_tokens")),
            ),
            text=text,
            calls=ids,
            refusal_category=category,
            native=content if ids else None,
        )

    def in_body_error(self, body: Any) -> tuple[int | None, str | None] | None:
        if not isinstance(body, dict) or not isinstance(body.get("error"), dict):
            return None
        if body.get("type") != "error" and "content" in body:
            return None
        error = body["error"]
        kind, code = error.get("type"), error.get("code")
        status = _ERROR_STATUS.get(kind) if isinstance(kind, str) else None
        if status is None and isinstance(code, int) and not isinstance(code, bool):
            status = code
        message = error.get("message")
        return status, str(message) if message is not None else None


def _text(turn: JsonObject, index: int) -> str:
    text = turn.get("text", "")
    if not isinstance(text, str):
        raise TranslateError(f"messages[{index}] has no text")
    return text


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _result(turn: JsonObject, index: int) -> JsonObject:
    """A ``tool_result`` block; ``{"error": …}`` alone is the error convention."""
    text = _text(turn, index)
    block: JsonObject = {"type": "tool_result", "tool_use_id": str(turn.get("id", ""))}
    error = _error_of(text)
    if error is None:
        block["content"] = text
    else:
        block["content"] = error
        block["is_error"] = True
    return block


def _error_of(text: str) -> str | None:
    return error_of(text)


def _assistant_blocks(run: list[tuple[int, JsonObject]], native: NativeLookup) -> list[JsonObject]:
    """One assistant message's content: the native record when it fits, else rebuilt."""
    texts: list[JsonObject] = []
    uses: list[JsonObject] = []
    for index, turn in run:
        if turn.get("type") == "text":
            text = _text(turn, index)
            if text.strip():
                texts.append({"type": "text", "text": text})
            continue
        call_id, name, arguments = parse_call(turn, index)
        if not isinstance(arguments, dict):
            raise TranslateError(
                f"messages[{index}] tool_call arguments must be a JSON object for anthropic"
            )
        uses.append({"type": "tool_use", "id": call_id, "name": name, "input": arguments})
    if uses:
        ids = tuple(str(u["id"]) for u in uses)
        kept = native(ids)
        if (
            isinstance(kept, list)
            and all(isinstance(b, dict) for b in kept)
            and tuple(b.get("id") for b in kept if b.get("type") == "tool_use") == ids
        ):
            return list(kept)
    return texts + uses
