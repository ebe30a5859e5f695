"""Google Gemini ``generateContent``, ``POST <base_url>/models/<model>:generateContent`` (base like
``https://generativelanguage.googleapis.com/v1beta``), key in ``x-goog-api-key``.

* the model is in the URL, not the body; the body is ``{systemInstruction?, contents, tools?,
  generationConfig: {maxOutputTokens, temperature}}`` plus ``extra`` (a ``generationConfig``
  object in ``extra`` is merged into ours key by key, so ``thinkingConfig`` can be added without
  losing the limits; any other key replaces ours);
* the prompt is ``systemInstruction: {"parts": [{"text"}]}`` (omitted when empty); a ``user``
  text turn is ``{"role": "user", "parts": [{"text"}]}`` and so is a ``system`` text turn
  inside the conversation — Gemini has no system role in ``contents``, so it reads as user text;
* a run of assistant turns is one ``{"role": "model", "parts": [...]}``: its texts (one part
  each, empty ones left out), then one ``{"functionCall": {"name", "args": <object>}}`` per call.
  With a native record for the run's calls, the recorded ``parts`` go back exactly as received
  (thought parts, texts, ``functionCall.id``s and every ``thoughtSignature`` where it came — a
  Part-level sibling of ``functionCall``, on the first call of a parallel set). Without one (a
  history made by another brain, or a record that is gone) the first ``functionCall`` part gets
  ``"thoughtSignature": "skip_thought_signature_validator"``, the value Gemini documents for
  histories it did not produce, and no call carries an ``id``;
* a run of results is ONE ``{"role": "user", "parts": [{"functionResponse": {"id"?, "name",
  "response"}}, ...]}``, put in the order of the calls they answer (paired by UBF id; Gemini
  pairs responses without ids by position); the name is the one of the call answered;
  ``response`` is ``{"output": <the text parsed as JSON, or the text>}``, or ``{"error":
  "<string>"}`` for a UBF error result (``{"error": …}`` alone). ``id`` is echoed only when the
  call went out with a real Gemini id (from the native record);
* tools are ONE ``{"functionDeclarations": [{"name", "description"?, "parametersJsonSchema"}]}``;
  a name outside ``^[a-zA-Z_][a-zA-Z0-9_.-]{0,63}$`` is a :class:`TranslateError`;
* ``candidates[0].finishReason``: ``STOP`` with ``functionCall`` parts is ``tool_calls``, ``STOP``
  is ``stop``, ``MAX_TOKENS`` is ``length``; ``SAFETY``, ``RECITATION``, ``BLOCKLIST``,
  ``PROHIBITED_CONTENT``, ``SPII``, ``IMAGE_SAFETY`` are ``content_filter`` with the reason as
  category; ``MALFORMED_FUNCTION_CALL``, ``UNEXPECTED_TOOL_CALL``, ``TOO_MANY_TOOL_CALLS`` are an
  empty round (no calls, no text, output 0; the cell asks again) reported as ``stop``; anything
  else (``LANGUAGE``, ``OTHER``, ``IMAGE_*`` …, or none) is a :class:`ReplyError`. A cut-off or
  refused turn emits no calls. No candidates with ``promptFeedback.blockReason`` is
  ``content_filter`` with that reason as category and stop reason;
* ``thought: true`` parts (thought summaries) are never text; text parts are joined with ``""``
  and an all-empty text is no text (Gemini 3 may end a turn with an empty text part that only
  carries a signature). The native record is the whole ``parts`` list, kept when the turn made
  calls;
* usage: ``promptTokenCount`` includes ``cachedContentTokenCount``, so input = prompt − cached,
  cache read = cached, output = ``candidatesTokenCount`` + ``thoughtsTokenCount`` (a count Gemini
  leaves out is 0), no cache creation figure. ``toolUsePromptTokenCount`` (built-in tools) is not
  counted;
* ``modelVersion`` is the model, ``responseId`` the response id; a 200 body with an ``error``
  object ``{code, message, status}`` is an in-body error.

Call ids. A ``functionCall.id`` that is a non-empty string is kept. Otherwise the id of the
n-th call of the response (from 0) is ``gemini_<responseId>_<n>``: stable for the response,
distinct across responses; a call without an id in a response without ``responseId`` is a
:class:`ReplyError`.
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
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
from colony.jsonwire import JsonRefused, loads

SKIP_SIGNATURE = "skip_thought_signature_validator"
"""The documented ``thoughtSignature`` for function calls Gemini did not produce."""

NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_.-]{0,63}")
"""A function name Gemini accepts (matched in full)."""

REFUSALS = frozenset(
    {"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY"}
)
NOTHING = frozenset({"MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS"})
"""Finish reasons of a round that produced nothing usable: an empty round, asked again."""

_STATUS_CODES = {
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 400,
    "OUT_OF_RANGE": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "RESOURCE_EXHAUSTED": 429,
    "CANCELLED": 499,
    "INTERNAL": 500,
    "UNKNOWN": 500,
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
}


def call_id(response_id: str, n: int) -> str:
    """The id of the ``n``-th call of a response whose ``functionCall`` has none."""
    return f"gemini_{response_id}_{n}"


@dataclass(frozen=True, slots=True)
class _SentCall:
    """A call as it went out: the name to answer with, the id to echo (None: no id) and its
    position among all the calls sent (results go back in call order)."""

    name: str
    wire_id: str | None
    order: int


class GeminiGenerate:
    name: ClassVar[str] = "gemini"

    def url(self, base_url: str, model: str) -> str:
        return f"{base_url}/models/{model}:generateContent"

    def headers(self, api_key: str) -> dict[str, str]:
        return {"x-goog-api-key": api_key} if api_key else {}

    def tool(self, tool: Tool) -> Any:
        if not NAME.fullmatch(tool.name):
            raise TranslateError(
                f"tool {tool.name!r}: gemini function names must match "
                "^[a-zA-Z_][a-zA-Z0-9_.-]{0,63}$"
            )
        declaration: JsonObject = {"name": tool.name}
        if tool.description is not None:
            declaration["description"] = tool.description
        declaration["parametersJsonSchema"] = tool.parameters
        return declaration

    # -- request ---------------------------------------------------------------------------

    def contents(self, turns: list[Any], native: NativeLookup) -> list[JsonObject]:
        out: list[JsonObject] = []
        sent: dict[str, _SentCall] = {}
        order = itertools.count()
        texts: list[str] = []
        calls: list[tuple[str, str, Any]] = []
        results: list[tuple[int, JsonObject]] = []
        in_run = False

        def close_run() -> None:
            nonlocal in_run
            if in_run:
                content = _model_content(texts, calls, native, sent, order)
                if content is not None:
                    out.append(content)
            texts.clear()
            calls.clear()
            in_run = False

        def close_results() -> None:
            if results:
                results.sort(key=lambda pair: pair[0])  # stable: the calls' order
                out.append({"role": "user", "parts": [part for _, part in results]})
            results.clear()

        for index, turn in enumerate(turns):
            if not isinstance(turn, dict) or "origin" not in turn:
                raise TranslateError(
                    f"messages[{index}] is not a turn (pointers are not resolved here)"
                )
            origin, kind = turn.get("origin"), turn.get("type")
            if origin == "assistant" and kind in ("text", "tool_call"):
                close_results()
                in_run = True
                if kind == "tool_call":
                    ident, name, arguments = parse_call(turn, index)
                    if not isinstance(arguments, dict):
                        raise TranslateError(
                            f"messages[{index}] tool_call arguments must be a JSON object on gemini"
                        )
                    calls.append((ident, name, arguments))
                else:
                    texts.append(_text(turn, index))
                continue
            close_run()
            if origin == "tool" and kind == "tool_result":
                results.append(_result(turn, index, sent))
                continue
            close_results()
            if kind == "text" and origin in ("user", "system"):
                out.append({"role": "user", "parts": [{"text": _text(turn, index)}]})
            else:
                raise TranslateError(
                    f"messages[{index}] is {origin}/{kind}, which gemini generateContent "
                    "cannot carry"
                )
        close_run()
        close_results()
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
        body: JsonObject = {}
        if prompt:
            body["systemInstruction"] = {"parts": [{"text": prompt}]}
        body["contents"] = self.contents(turns, native)
        if tools:
            body["tools"] = [{"functionDeclarations": [self.tool(t) for t in tools]}]
        config: JsonObject = {"maxOutputTokens": max_tokens, "temperature": temperature}
        body["generationConfig"] = config
        for key, value in extra.items():
            if key == "generationConfig" and isinstance(value, Mapping):
                body[key] = {**config, **value}
            else:
                body[key] = value
        return body

    # -- response --------------------------------------------------------------------------

    def parse(self, body: Any) -> Reply:
        if not isinstance(body, dict):
            raise ReplyError("the response body is not a JSON object")
        model = body.get("modelVersion")
        response_id = body.get("responseId")
        model = model if isinstance(model, str) else None
        response_id = response_id if isinstance(response_id, str) else None
        usage = _usage(body.get("usageMetadata"))
        candidates = body.get("candidates")
        if not candidates:
            feedback = body.get("promptFeedback")
            reason = feedback.get("blockReason") if isinstance(feedback, dict) else None
            if not isinstance(reason, str):
                raise ReplyError("the response has no candidates and no promptFeedback.blockReason")
            return Reply(
                turns=[],
                finish_reason="content_filter",
                stop_reason=reason,
                model=model,
                response_id=response_id,
                usage=usage,
                refusal_category=reason,
            )
        if not isinstance(candidates, list) or not isinstance(candidates[0], dict):
            raise ReplyError("the response has no candidates[0]")
        candidate = candidates[0]
        raw = candidate.get("finishReason")
        if not isinstance(raw, str):
            raise ReplyError("candidates[0] has no finishReason")
        content = candidate.get("content", {})
        if not isinstance(content, dict):
            raise ReplyError("candidates[0].content is not an object")
        parts = content.get("parts", [])
        if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts):
            raise ReplyError("candidates[0].content.parts is not an array of objects")
        texts: list[str] = []
        found: list[tuple[str, str, Any]] = []
        for part in parts:
            function = part.get("functionCall")
            if function is not None:
                if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                    raise ReplyError("a functionCall part has no name")
                arguments = function.get("args", {})
                if not isinstance(arguments, dict):
                    raise ReplyError("a functionCall's args is not an object")
                given = function.get("id")
                if isinstance(given, str) and given:
                    ident = given
                elif response_id is not None:
                    ident = call_id(response_id, len(found))
                else:
                    raise ReplyError("a functionCall has no id and the response no responseId")
                found.append((ident, function["name"], arguments))
            elif isinstance(part.get("text"), str) and part.get("thought") is not True:
                texts.append(part["text"])
        text: str | None = "".join(texts) or None
        category: str | None = None
        if raw == "STOP":
            finish = "tool_calls" if found else "stop"
        elif raw == "MAX_TOKENS":
            finish, found = "length", []
        elif raw in REFUSALS:
            finish, found, category = "content_filter", [], raw
        elif raw in NOTHING:
            finish, found, text = "stop", [], None
            usage.output = 0
        else:
            raise ReplyError(f"finishReason {raw!r} is not one this cell knows")
        turns: list[JsonObject] = [
            {"origin": "assistant", "type": "tool_call", "id": ident, "text": call_text(name, args)}
            for ident, name, args in found
        ]
        if text is not None:
            turns.append({"origin": "assistant", "type": "text", "text": text})
        return Reply(
            turns=turns,
            finish_reason=finish,
            stop_reason=raw,
            model=model,
            response_id=response_id,
            usage=usage,
            text=text,
            calls=[ident for ident, _, _ in found],
            refusal_category=category,
            native=parts if found else None,
        )

    def in_body_error(self, body: Any) -> tuple[int | None, str | None] | None:
        if not (
            isinstance(body, dict)
            and isinstance(body.get("error"), dict)
            and not body.get("candidates")
        ):
            return None
        error = body["error"]
        code = error.get("code")
        status = code if isinstance(code, int) else _STATUS_CODES.get(str(error.get("status")))
        message = error.get("message")
        return status, str(message) if message is not None else None


# -- helpers ---------------------------------------------------------------------------------


def _text(turn: JsonObject, index: int) -> str:
    text = turn.get("text", "")
    if not isinstance(text, str):
        raise TranslateError(f"messages[{index}] text is not a string")
    return text


def _model_content(
    texts: list[str],
    calls: list[tuple[str, str, Any]],
    native: NativeLookup,
    sent: dict[str, _SentCall],
    order: Iterator[int],
) -> JsonObject | None:
    """One run of assistant turns as a ``model`` content; records how each call went out."""
    if calls:
        kept = native(tuple(ident for ident, _, _ in calls))
        recorded = _recorded_calls(kept)
        if recorded is not None and len(recorded) == len(calls):
            for (ident, _, _), function in zip(calls, recorded, strict=True):
                wire_id = function.get("id")
                sent[ident] = _SentCall(
                    function["name"],
                    wire_id if isinstance(wire_id, str) and wire_id else None,
                    next(order),
                )
            return {"role": "model", "parts": copy.deepcopy(kept)}
    parts: list[JsonObject] = [{"text": t} for t in texts if t]
    for n, (ident, name, arguments) in enumerate(calls):
        part: JsonObject = {"functionCall": {"name": name, "args": arguments}}
        if n == 0:
            part["thoughtSignature"] = SKIP_SIGNATURE
        parts.append(part)
        sent[ident] = _SentCall(name, None, next(order))
    return {"role": "model", "parts": parts} if parts else None


def _recorded_calls(kept: Any) -> list[JsonObject] | None:
    """The ``functionCall`` objects of a native record, or None when it is not a parts list."""
    if not isinstance(kept, list) or not all(isinstance(p, dict) for p in kept):
        return None
    functions: list[JsonObject] = []
    for part in kept:
        function = part.get("functionCall")
        if function is None:
            continue
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            return None
        functions.append(function)
    return functions


def _result(turn: JsonObject, index: int, sent: dict[str, _SentCall]) -> tuple[int, JsonObject]:
    ident = str(turn.get("id", ""))
    call = sent.get(ident)
    if call is None:
        raise TranslateError(
            f"messages[{index}] is a tool_result for {ident!r}, which no earlier tool_call made"
        )
    text = _text(turn, index)
    value = _json_value(text)
    response: JsonObject
    failure = error_of(text)
    if failure is not None:
        response = {"error": failure}
    else:
        response = {"output": text if value is _NOT_JSON else value}
    answer: JsonObject = {}
    if call.wire_id is not None:
        answer["id"] = call.wire_id
    answer["name"] = call.name
    answer["response"] = response
    return call.order, {"functionResponse": answer}


_NOT_JSON: Any = object()


def _json_value(text: str) -> Any:
    """The text parsed as strict JSON (no NaN/Infinity), or :data:`_NOT_JSON`."""
    try:
        return loads(text)
    except JsonRefused:
        return _NOT_JSON


def _count(metadata: JsonObject, key: str) -> int | None:
    value = metadata.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _usage(metadata: Any) -> Usage:
    if not isinstance(metadata, dict):
        return Usage()
    prompt = _count(metadata, "promptTokenCount")
    cached = _count(metadata, "cachedContentTokenCount")
    candidates = _count(metadata, "candidatesTokenCount")
    thoughts = _count(metadata, "thoughtsTokenCount")
    return Usage(
        input=None if prompt is None else prompt - (cached or 0),
        output=(candidates or 0) + (thoughts or 0),
        cache_read=cached,
        cache_creation=None,
    )
