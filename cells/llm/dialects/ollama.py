"""Ollama's native chat API, ``POST <base_url>/api/chat`` (base like ``http://127.0.0.1:11434``).

* the body is ``{model, messages, tools?, stream: false, options: {num_predict, temperature}}``
  plus ``extra``; the prompt is a leading ``system`` message; tools have the OpenAI chat shape;
* consecutive assistant turns become one ``{"role": "assistant", "content", "tool_calls"}``
  message; ``content`` is ``""`` without text and each call is
  ``{"function": {"name", "arguments": <object>}}`` — Ollama carries no call ids;
* a tool result is ``{"role": "tool", "tool_name", "content"}``: the name is the one of the call
  the result answers (paired by UBF id), and a run of results is sent in the order of the calls
  it answers, which is how Ollama pairs them; an error result is its text as is;
* ``message.thinking`` (``think`` on) is kept as native ``{"thinking": …}`` when the turn made
  calls and goes back verbatim on that assistant message;
* ``done_reason``: ``stop`` with ``tool_calls`` is ``tool_calls``, ``stop`` is ``stop``, ``length``
  is ``length`` (its calls never run); ``load`` / ``unload`` generated nothing — no calls, no
  text, output 0, so the round is empty — whatever their ``content``; anything else, or no
  ``done: true``, is a :class:`ReplyError`;
* usage: ``prompt_eval_count`` → input (Ollama counts only the prompt tokens it evaluated, so
  there is no cache figure), ``eval_count`` → output.

Call ids. Ollama gives none, so the id of the n-th call of a response (from 0) is
``ollama_<n>_<digest>``: the first 12 hex digits of the SHA-256 of
``created_at + "\\n" + model + "\\n" + name + "\\n" + compact(arguments)`` (UTF-8; arguments as
compact JSON in the key order received, or the string verbatim). The same response always gives
the same ids; another round has another ``created_at``, so ids do not repeat across rounds. A
call that does carry a non-empty string ``id`` (newer servers, proxies) keeps it. The response
id is ``created_at``.
"""

from __future__ import annotations

import hashlib
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
    parse_call,
)

_DONE = {"stop": "stop", "length": "length", "load": "stop", "unload": "stop"}
_NOTHING = ("load", "unload")
"""``done_reason``s of a request that generated nothing (the model was (un)loaded)."""


def call_id(n: int, created_at: str, model: str, name: str, arguments: Any) -> str:
    """The deterministic id of the ``n``-th call of a response (see the module docstring)."""
    args = arguments if isinstance(arguments, str) else compact(arguments)
    seed = "\n".join((created_at, model, name, args)).encode("utf-8")
    return f"ollama_{n}_{hashlib.sha256(seed).hexdigest()[:12]}"


class OllamaChat:
    name: ClassVar[str] = "ollama"

    def url(self, base_url: str, model: str) -> str:
        return base_url + "/api/chat"

    def headers(self, api_key: str) -> dict[str, str]:
        """Ollama itself needs no key; one is sent only for proxies in front of it."""
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def tool(self, tool: Tool) -> Any:
        function: JsonObject = {"name": tool.name}
        if tool.description is not None:
            function["description"] = tool.description
        function["parameters"] = tool.parameters
        return {"type": "function", "function": function}

    def messages(self, turns: list[Any], native: NativeLookup) -> list[JsonObject]:
        out: list[JsonObject] = []
        names: dict[str, str] = {}  # call id → tool name, for every call so far
        order: dict[str, int] = {}  # call id → its place in the latest assistant message
        index = 0
        while index < len(turns):
            turn = turns[index]
            if not isinstance(turn, dict) or "origin" not in turn:
                raise TranslateError(
                    f"messages[{index}] is not a turn (pointers are not resolved here)"
                )
            origin, kind = turn.get("origin"), turn.get("type")
            if origin == "assistant" and kind in ("text", "tool_call"):
                end = index
                while end < len(turns) and _is_assistant(turns[end]):
                    end += 1
                message, ids = self._assistant(turns, index, end, native)
                out.append(message)
                names.update(ids)
                order = {call: position for position, (call, _) in enumerate(ids)}
                index = end
                continue
            if origin == "tool" and kind == "tool_result":
                end = index
                while end < len(turns) and _is_result(turns[end]):
                    end += 1
                results: list[tuple[int, int, JsonObject]] = []
                for at in range(index, end):
                    result = turns[at]
                    answered = str(result.get("id", ""))
                    name = names.get(answered)
                    if name is None:
                        raise TranslateError(
                            f"messages[{at}] is a tool_result for {answered!r}, which answers "
                            "no earlier tool_call (Ollama needs the tool's name)"
                        )
                    text = result.get("text", "")
                    content = text if isinstance(text, str) else compact(text)
                    results.append(
                        (
                            order.get(answered, len(order)),
                            at,
                            {"role": "tool", "tool_name": name, "content": content},
                        )
                    )
                out.extend(m for _, _, m in sorted(results, key=lambda r: r[:2]))
                index = end
                continue
            if kind == "text" and origin in ("user", "system"):
                text = turn.get("text", "")
                out.append(
                    {"role": origin, "content": text if isinstance(text, str) else compact(text)}
                )
                index += 1
                continue
            raise TranslateError(f"messages[{index}] is {origin}/{kind}, which Ollama cannot carry")
        return out

    def _assistant(
        self, turns: list[Any], start: int, end: int, native: NativeLookup
    ) -> tuple[JsonObject, list[tuple[str, str]]]:
        """One assistant message from ``turns[start:end]``; also ``[(call id, name)]``."""
        texts: list[str] = []
        calls: list[JsonObject] = []
        ids: list[tuple[str, str]] = []
        for at in range(start, end):
            turn = turns[at]
            if turn.get("type") == "text":
                text = turn.get("text", "")
                texts.append(text if isinstance(text, str) else compact(text))
                continue
            id_, name, arguments = parse_call(turn, at)
            if not isinstance(arguments, dict):
                raise TranslateError(
                    f"messages[{at}] tool_call arguments must be a JSON object for Ollama"
                )
            calls.append({"function": {"name": name, "arguments": arguments}})
            ids.append((id_, name))
        message: JsonObject = {"role": "assistant", "content": "".join(texts)}
        if calls:
            kept = native(tuple(i for i, _ in ids))
            if isinstance(kept, dict) and isinstance(kept.get("thinking"), str):
                message["thinking"] = kept["thinking"]
            message["tool_calls"] = calls
        return message, ids

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
        body: JsonObject = {"model": model, "messages": messages}
        if tools:
            body["tools"] = [self.tool(t) for t in tools]
        body["stream"] = False
        body["options"] = {"num_predict": max_tokens, "temperature": temperature}
        body.update(extra)
        return body

    def parse(self, body: Any) -> Reply:
        if not isinstance(body, dict):
            raise ReplyError("the response body is not a JSON object")
        if body.get("done") is not True:
            raise ReplyError("the response is not done (done: true is missing)")
        message = body.get("message")
        if not isinstance(message, dict):
            raise ReplyError("the response has no message")
        model, created_at = body.get("model"), body.get("created_at")
        if not isinstance(model, str):
            raise ReplyError("the response has no model")
        if not isinstance(created_at, str):
            raise ReplyError("the response has no created_at")
        raw = body.get("done_reason")
        finish = _DONE.get(raw) if isinstance(raw, str) else None
        if finish is None:
            raise ReplyError(f"done_reason {raw!r} is not one this cell knows")
        assert isinstance(raw, str)
        raw_calls = message.get("tool_calls") or []
        if not isinstance(raw_calls, list):
            raise ReplyError("message.tool_calls is not an array")
        nothing = raw in _NOTHING
        turns: list[JsonObject] = []
        ids: list[str] = []
        if finish == "stop" and not nothing:  # a cut-off call never runs
            for n, call in enumerate(raw_calls):
                function = call.get("function") if isinstance(call, dict) else None
                if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                    raise ReplyError("a tool call has no function name")
                name = function["name"]
                arguments = function.get("arguments", {})
                if arguments is None:
                    arguments = {}
                given = call.get("id")
                ids.append(
                    given
                    if isinstance(given, str) and given
                    else call_id(n, created_at, model, name, arguments)
                )
                turns.append(
                    {
                        "origin": "assistant",
                        "type": "tool_call",
                        "id": ids[-1],
                        "text": call_text(name, arguments),
                    }
                )
            if ids:
                finish = "tool_calls"
        content = message.get("content")
        text = content if isinstance(content, str) and content and not nothing else None
        if text is not None:
            turns.append({"origin": "assistant", "type": "text", "text": text})
        prompt_tokens, generated = body.get("prompt_eval_count"), body.get("eval_count")
        output = generated if isinstance(generated, int) else None
        if nothing:
            output = 0
        thinking = message.get("thinking")
        return Reply(
            turns=turns,
            finish_reason=finish,
            stop_reason=raw,
            model=model,
            response_id=created_at,
            usage=Usage(
                input=prompt_tokens if isinstance(prompt_tokens, int) else None,
                output=output,
            ),
            text=text,
            calls=ids,
            native={"thinking": thinking} if isinstance(thinking, str) and ids else None,
        )

    def in_body_error(self, body: Any) -> tuple[int | None, str | None] | None:
        """Ollama's error body is ``{"error": "<message>"}``; a missing model reads 404."""
        if not (isinstance(body, dict) and isinstance(body.get("error"), str)):
            return None
        message: str = body["error"]
        return (404 if "not found" in message.lower() else None), message


def _is_assistant(turn: Any) -> bool:
    return (
        isinstance(turn, dict)
        and turn.get("origin") == "assistant"
        and turn.get("type") in ("text", "tool_call")
    )


def _is_result(turn: Any) -> bool:
    return (
        isinstance(turn, dict)
        and turn.get("origin") == "tool"
        and turn.get("type") == "tool_result"
    )
