"""OpenAI Responses API (``POST <base>/responses``; also xAI Grok's ``/v1/responses``).

Stateless: ``store: false`` and the whole history resent as ``input`` each turn, with
``include: ["reasoning.encrypted_content"]`` so reasoning items come back whole and can be
replayed without server-side storage.

* the prompt is ``instructions`` (omitted when empty); user and system text turns are
  ``{"role", "content": "<text>"}`` items; assistant text is an output message item
  ``{"type": "message", "role": "assistant", "content": [{"type": "output_text", …}]}``;
* a run of consecutive assistant turns that made calls goes back as the turn's own ``output``
  items (reasoning with ``encrypted_content``, message, ``function_call``\\ s) **verbatim and in
  order** when the cell kept them as native; without a record it is rebuilt from UBF: one
  message item holding the run's text (when there is any), then one ``function_call`` per call
  in the order given (``arguments`` is the JSON string as recorded in UBF, untouched);
* a tool result is ``{"type": "function_call_output", "call_id", "output": "<text>"}`` in the
  order given; an error result has no flag on this wire and goes as its text,
  ``{"error": "…"}``;
* there is no ``finish_reason``: it is inferred, in priority order, from ``status`` +
  ``incomplete_details.reason`` (``max_output_tokens`` → ``length``, ``content_filter`` →
  ``content_filter``), then ``function_call`` items (``tool_calls``), then a ``refusal`` content
  part (``content_filter``, category ``refusal``), then ``completed`` (``stop``); anything else
  (``failed``, ``cancelled``, ``in_progress``, ``queued``, an unknown incomplete reason) is a
  :class:`ReplyError`. ``stop_reason`` is the status (``incomplete/<reason>`` when cut off);
* call ids are the items' ``call_id`` (the pairing key of ``function_call_output``), never the
  item ``id``;
* ``native`` is the whole ``output`` list, kept when the turn made calls.
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
    compact,
)
from colony.jsonwire import JsonRefused, loads

_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
"""OpenAI's function-name grammar (the API answers 400 to anything else)."""

_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}

_IN_BODY_CODES = {
    "rate_limit_exceeded": 429,
    "invalid_api_key": 401,
    "model_not_found": 404,
    "server_error": 500,
}


class OpenAIResponses:
    name: ClassVar[str] = "openai-responses"

    def url(self, base_url: str, model: str) -> str:
        return base_url + "/responses"

    def headers(self, api_key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def tool(self, tool: Tool) -> Any:
        if not _TOOL_NAME.fullmatch(tool.name):
            raise TranslateError(
                f"tool {tool.name!r}: openai-responses function names must match "
                "^[a-zA-Z0-9_-]{1,64}$"
            )
        spec: JsonObject = {"type": "function", "name": tool.name}
        if tool.description is not None:
            spec["description"] = tool.description
        spec["parameters"] = tool.parameters
        if tool.strict is not None:
            spec["strict"] = tool.strict
        return spec

    def items(self, turns: list[Any], native: NativeLookup) -> list[JsonObject]:
        """The ``input`` items of a conversation."""
        out: list[JsonObject] = []
        run: list[tuple[int, JsonObject]] = []  # consecutive assistant turns
        for index, turn in enumerate(turns):
            if not isinstance(turn, dict) or "origin" not in turn:
                raise TranslateError(
                    f"messages[{index}] is not a turn (pointers are not resolved here)"
                )
            origin, kind = turn.get("origin"), turn.get("type")
            if origin == "assistant" and kind in ("text", "tool_call"):
                run.append((index, turn))
                continue
            if run:
                out.extend(_assistant_run(run, native))
                run = []
            if kind == "text" and origin in ("user", "system"):
                out.append({"role": origin, "content": _text(turn, index)})
            elif origin == "tool" and kind == "tool_result":
                out.append(
                    {
                        "type": "function_call_output",
                        "call_id": str(turn.get("id", "")),
                        "output": _text(turn, index),
                    }
                )
            else:
                raise TranslateError(
                    f"messages[{index}] is {origin}/{kind}, which openai-responses cannot carry"
                )
        if run:
            out.extend(_assistant_run(run, native))
        return out

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
        body: JsonObject = {"model": model}
        if prompt:
            body["instructions"] = prompt
        body["input"] = self.items(turns, native)
        if tools:
            body["tools"] = [self.tool(t) for t in tools]
        body["max_output_tokens"] = max_tokens
        body["temperature"] = temperature
        body["store"] = False
        body["include"] = ["reasoning.encrypted_content"]
        for key, value in extra.items():
            if value is None:  # an explicit null removes a default the model refuses
                body.pop(key, None)
            else:
                body[key] = value
        return body

    def parse(self, body: Any) -> Reply:
        if not isinstance(body, dict):
            raise ReplyError("the response body is not a JSON object")
        response_id, model = body.get("id"), body.get("model")
        if not isinstance(response_id, str):
            raise ReplyError("the response has no id")
        if not isinstance(model, str):
            raise ReplyError("the response has no model")
        status = body.get("status")
        if not isinstance(status, str):
            raise ReplyError("the response has no status")
        output = body.get("output")
        if not isinstance(output, list) or not all(isinstance(i, dict) for i in output):
            raise ReplyError("the response has no output list")

        calls: list[tuple[str, str]] = []  # (call_id, UBF text)
        parts: list[str] = []
        refused = False
        for n, item in enumerate(output):
            kind = item.get("type")
            if kind == "function_call":
                call_id, name = item.get("call_id"), item.get("name")
                arguments = item.get("arguments")
                if not isinstance(call_id, str) or not call_id:
                    raise ReplyError(f"output[{n}] is a function_call without a call_id")
                if not isinstance(name, str):
                    raise ReplyError(f"output[{n}] is a function_call without a name")
                if not isinstance(arguments, str | dict):
                    raise ReplyError(f"output[{n}] is a function_call without arguments")
                calls.append((call_id, call_text(name, arguments)))
            elif kind == "message":
                content = item.get("content")
                if isinstance(content, str):
                    parts.append(content)
                    continue
                if not isinstance(content, list):
                    raise ReplyError(f"output[{n}] is a message without content")
                for part in content:
                    if not isinstance(part, dict):
                        continue
                    if part.get("type") == "output_text" and isinstance(part.get("text"), str):
                        parts.append(part["text"])
                    elif part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
                        parts.append(part["refusal"])
                        refused = True
            # reasoning and any other item: not UBF, kept in native when the turn made calls

        stop_reason = status
        category: str | None = None
        if status == "incomplete":
            details = body.get("incomplete_details")
            reason = details.get("reason") if isinstance(details, dict) else None
            finish = _INCOMPLETE.get(reason) if isinstance(reason, str) else None
            if finish is None:
                raise ReplyError(f"incomplete reason {reason!r} is not one this cell knows")
            stop_reason = f"incomplete/{reason}"
            if finish == "content_filter":
                category = "content_filter"
            calls = []  # a cut-off or filtered call never runs
        elif calls:
            finish = "tool_calls"
        elif refused:
            finish, category = "content_filter", "refusal"
        elif status == "completed":
            finish = "stop"
        else:
            raise ReplyError(f"response status {status!r} has no usable answer")

        turns: list[JsonObject] = [
            {"origin": "assistant", "type": "tool_call", "id": call_id, "text": text}
            for call_id, text in calls
        ]
        text = "".join(parts) if parts else None
        if text:
            turns.append({"origin": "assistant", "type": "text", "text": text})
        ids = [call_id for call_id, _ in calls]
        return Reply(
            turns=turns,
            finish_reason=finish,
            stop_reason=stop_reason,
            model=model,
            response_id=response_id,
            usage=_usage(body.get("usage")),
            text=text or None,
            calls=ids,
            refusal_category=category,
            native=output if ids else None,
        )

    def in_body_error(self, body: Any) -> tuple[int | None, str | None] | None:
        if not isinstance(body, dict) or not isinstance(body.get("error"), dict):
            return None
        if body.get("status") != "failed" and body.get("output"):
            return None
        error = body["error"]
        code = error.get("code")
        status = code if isinstance(code, int) else _IN_BODY_CODES.get(str(code))
        message = error.get("message")
        return status, str(message) if message is not None else None


def _text(turn: JsonObject, index: int) -> str:
    text = turn.get("text", "")
    if isinstance(text, str):
        return text
    if isinstance(text, dict | list):
        return compact(text)
    raise TranslateError(f"messages[{index}] has no text")


def _assistant_run(run: list[tuple[int, JsonObject]], native: NativeLookup) -> list[JsonObject]:
    """One assistant turn's items: the native record when there is one, else rebuilt."""
    texts: list[str] = []
    calls: list[JsonObject] = []
    for index, turn in run:
        if turn.get("type") == "text":
            texts.append(_text(turn, index))
            continue
        raw = turn.get("text")
        if not isinstance(raw, str):
            raise TranslateError(f"messages[{index}] is a tool_call without text")
        try:
            function = loads(raw)
        except JsonRefused as exc:
            raise TranslateError(
                f"messages[{index}] tool_call text is not JSON: {exc.problem}"
            ) from None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise TranslateError(f"messages[{index}] tool_call text needs a name")
        arguments = function.get("arguments", "{}")
        calls.append(
            {
                "type": "function_call",
                "call_id": str(turn.get("id", "")),
                "name": function["name"],
                "arguments": arguments if isinstance(arguments, str) else compact(arguments),
            }
        )
    if calls:
        ids = tuple(c["call_id"] for c in calls)
        kept = native(ids)
        if _matches(kept, ids):
            return list(kept)
    items: list[JsonObject] = []
    if texts:
        items.append(
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": t} for t in texts],
            }
        )
    items.extend(calls)
    return items


def _matches(kept: Any, ids: tuple[str, ...]) -> bool:
    """Whether a native record is a list of output items whose calls are exactly ``ids``."""
    if not isinstance(kept, list) or not all(isinstance(i, dict) for i in kept):
        return False
    recorded = tuple(i.get("call_id") for i in kept if i.get("type") == "function_call")
    return recorded == ids


def _usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    details = raw.get("input_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    written = details.get("cache_write_tokens") if isinstance(details, dict) else None
    cache_read = cached if isinstance(cached, int) else None
    cache_creation = written if isinstance(written, int) else None
    prompt = raw.get("input_tokens")
    uncached = None
    if isinstance(prompt, int):
        uncached = prompt - (cache_read or 0) - (cache_creation or 0)
    output = raw.get("output_tokens")
    return Usage(
        input=uncached,
        output=output if isinstance(output, int) else None,
        cache_read=cache_read,
        cache_creation=cache_creation,
    )
