"""OpenAI chat completions (also OpenRouter, vLLM, LiteLLM, Ollama's ``/v1``, Kimi, DeepSeek).

* a run of assistant tool_call turns becomes one assistant message, and an assistant text
  right after the run becomes its ``content`` (a reply's text comes after its calls in UBF);
  with no text ``content`` is ``null`` (never ``""``, which some compatible servers refuse).
  Text *before* calls stays a message of its own (meclaw pins that in its windows);
* a tool result is ``{"role": "tool", "tool_call_id", "content"}``, in the order given;
* ``reasoning_content`` (Kimi, DeepSeek thinking models) is kept as native and sent back on
  the assistant message that made the calls — those servers refuse the replay without it;
* ``finish_reason`` passes through (``function_call`` reads ``tool_calls``); ``message.refusal``
  is ``content_filter``; a cut-off turn (``length``) emits no tool calls.
"""

from __future__ import annotations

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
    compact,
)
from colony.jsonwire import JsonRefused, loads

_FINISH = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "content_filter": "content_filter",
    "function_call": "tool_calls",
}


class OpenAIChat:
    name: ClassVar[str] = "openai"

    def url(self, base_url: str, model: str) -> str:
        return base_url + "/chat/completions"

    def headers(self, api_key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def tool(self, tool: Tool) -> Any:
        function: JsonObject = {"name": tool.name}
        if tool.description is not None:
            function["description"] = tool.description
        function["parameters"] = tool.parameters
        if tool.strict is not None:
            function["strict"] = tool.strict
        return {"type": "function", "function": function}

    def messages(self, turns: list[Any], native: NativeLookup) -> list[JsonObject]:
        out: list[JsonObject] = []
        calls: list[JsonObject] | None = None
        current: JsonObject | None = None
        for index, turn in enumerate(turns):
            if not isinstance(turn, dict) or "origin" not in turn:
                raise TranslateError(
                    f"messages[{index}] is not a turn (pointers are not resolved here)"
                )
            origin, kind = turn.get("origin"), turn.get("type")
            if origin == "assistant" and kind == "tool_call":
                text = turn.get("text")
                if not isinstance(text, str):
                    raise TranslateError(f"messages[{index}] is a tool_call without text")
                try:
                    function = loads(text)
                except JsonRefused as exc:
                    raise TranslateError(
                        f"messages[{index}] tool_call text is not JSON: {exc.problem}"
                    ) from None
                if calls is None or current is None:
                    calls = []
                    current = {"role": "assistant", "content": None, "tool_calls": calls}
                    out.append(current)
                calls.append({"id": turn.get("id", ""), "type": "function", "function": function})
                continue
            text = turn.get("text", "")
            if (
                origin == "assistant"
                and kind == "text"
                and current is not None
                and current["content"] is None
            ):
                # Text right after calls is where the provider put it: in the same message.
                # (Text *before* calls stays its own message, as meclaw's windows expect.)
                current["content"] = text
                continue
            if calls is not None and current is not None:
                _attach_native(current, native)
            calls = None
            current = None
            if kind == "text" and origin in ("user", "assistant", "system"):
                out.append({"role": origin, "content": text})
            elif origin == "tool" and kind == "tool_result":
                out.append({"role": "tool", "tool_call_id": turn.get("id", ""), "content": text})
            else:
                raise TranslateError(
                    f"messages[{index}] is {origin}/{kind}, which chat completions cannot carry"
                )
        if calls is not None and current is not None:
            _attach_native(current, native)
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
        messages = self.messages(turns, native)
        if prompt:
            messages.insert(0, {"role": "system", "content": prompt})
        body: JsonObject = {
            "model": model,
            "messages": messages,
            "temperature": temperature,
            "max_tokens": max_tokens,
        }
        if tools:
            body["tools"] = [self.tool(t) for t in tools]
        body.update(extra)
        return body

    def parse(self, body: Any) -> Reply:
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
        raw = choice.get("finish_reason")
        finish = _FINISH.get(raw) if isinstance(raw, str) else None
        if finish is None:
            raise ReplyError(f"finish_reason {raw!r} is not one this cell knows")
        raw_calls = message.get("tool_calls") or []
        if not isinstance(raw_calls, list):
            raise ReplyError("message.tool_calls is not an array")
        refusal = message.get("refusal")
        category = None
        if isinstance(refusal, str) and refusal:
            finish, category = "content_filter", "refusal"
        elif finish == "content_filter":
            category = "content_filter"
        turns: list[JsonObject] = []
        ids: list[str] = []
        if finish not in ("length", "content_filter"):  # a cut-off call never runs
            for call in raw_calls:
                if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
                    raise ReplyError("a tool call has no function object")
                function = call["function"]
                ids.append(str(call.get("id", "")))
                call_json = compact(function, sort_keys=True)
                turns.append(
                    {"origin": "assistant", "type": "tool_call", "id": ids[-1], "text": call_json}
                )
        content = message.get("content")
        text: str | None = content if isinstance(content, str) else None
        if text is None and isinstance(refusal, str) and refusal:
            text = refusal
        if text is not None:
            turns.append({"origin": "assistant", "type": "text", "text": text})
        usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
        assert isinstance(usage, dict)
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        written = details.get("cache_write_tokens") if isinstance(details, dict) else None
        prompt_tokens = usage.get("prompt_tokens")
        cache_read = cached if isinstance(cached, int) else None
        cache_creation = written if isinstance(written, int) else None
        uncached = None
        if isinstance(prompt_tokens, int):
            uncached = prompt_tokens - (cache_read or 0) - (cache_creation or 0)
        completion = usage.get("completion_tokens")
        reasoning = message.get("reasoning_content")
        return Reply(
            turns=turns,
            finish_reason=finish,
            stop_reason=raw if isinstance(raw, str) else None,
            model=model,
            response_id=response_id,
            usage=Usage(
                input=uncached,
                output=completion if isinstance(completion, int) else None,
                cache_read=cache_read,
                cache_creation=cache_creation,
            ),
            text=text,
            calls=ids,
            refusal_category=category,
            native={"reasoning_content": reasoning} if isinstance(reasoning, str) and ids else None,
        )

    def in_body_error(self, body: Any) -> tuple[int | None, str | None] | None:
        if not (
            isinstance(body, dict)
            and isinstance(body.get("error"), dict)
            and not body.get("choices")
        ):
            return None
        error = body["error"]
        code = error.get("code")
        status = (
            code if isinstance(code, int) else _IN_BODY_TYPES.get(str(code or error.get("type")))
        )
        message = error.get("message")
        return status, str(message) if message is not None else None


_IN_BODY_TYPES = {
    "rate_limit_exceeded": 429,
    "rate_limit_error": 429,
    "insufficient_quota": 429,
    "invalid_api_key": 401,
    "authentication_error": 401,
    "model_not_found": 404,
    "not_found_error": 404,
}


def _attach_native(message: JsonObject, native: NativeLookup) -> None:
    ids = tuple(str(c.get("id", "")) for c in message.get("tool_calls", []))
    kept = native(ids)
    if isinstance(kept, dict) and isinstance(kept.get("reasoning_content"), str):
        message["reasoning_content"] = kept["reasoning_content"]
