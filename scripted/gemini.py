"""A scripted Gemini ``generateContent`` server, and builders for its answers.

::

    async with ScriptedGemini([gemini_calls([("fc_1", "search", {"q": "x"})], signature="c2ln"),
                               gemini_text("done")]) as provider:
        ...  # llm cell: provider "gemini", base_url=provider.url (…/v1beta)
        provider.requests[0]["contents"]   # what the client really sent
        provider.models[0]                 # the model named in the URL

Any model name is served at ``POST /v1beta/models/<model>:generateContent``. Requests the real
API refuses are answered 400 in Google's shape ``{"error": {"code", "message", "status"}}``
without consuming a script item: an unknown top-level field, no ``contents``, a conversation
that does not start with a user turn, a ``model`` turn with function calls not answered by the
next ``user`` turn with as many ``functionResponse`` parts (same names), a ``functionResponse``
turn that follows no function-call turn, and — as Gemini 3 does — a function-call turn whose
first ``functionCall`` part has no ``thoughtSignature`` (``skip_thought_signature_validator``
is accepted; ``require_signatures=False`` behaves like Gemini 2.x).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from scripted.core import ScriptedServer, ScriptItem, Status

__all__ = [
    "ScriptedGemini",
    "gemini_blocked",
    "gemini_calls",
    "gemini_empty",
    "gemini_max_tokens",
    "gemini_safety",
    "gemini_text",
]

_ROLES = ("user", "model")
_PATH = re.compile(r"/v1beta/models/([^/]+):generateContent")

_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "NOT_IMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}

_FIELDS = frozenset(
    {
        "model",
        "contents",
        "tools",
        "toolConfig",
        "tool_config",
        "safetySettings",
        "safety_settings",
        "systemInstruction",
        "system_instruction",
        "generationConfig",
        "generation_config",
        "cachedContent",
        "cached_content",
    }
)
"""``GenerateContentRequest`` fields (proto JSON accepts both spellings)."""

MISSING_SIGNATURE = (
    "Function call is missing a thought_signature in functionCall parts. This is required for "
    "tools to work correctly, and missing thought_signature may lead to degraded model "
    "performance. Additional data, function call `default_api:{name}` , position {position}. "
    "Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details."
)
COUNT_MISMATCH = (
    "Please ensure that the number of function response parts is equal to the number of "
    "function call parts of the function call turn."
)
CALL_AFTER_USER = (
    "Please ensure that function call turn comes immediately after a user turn or after a "
    "function response turn."
)
RESPONSE_AFTER_CALL = (
    "Please ensure that function response turn comes immediately after a function call turn."
)


def _bad(message: str) -> Status:
    return Status(400, {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}})


def _parts(content: Mapping[str, Any], key: str) -> list[Any]:
    return [p[key] for p in content.get("parts", []) if isinstance(p, dict) and key in p]


class ScriptedGemini(ScriptedServer):
    """Gemini at ``<url>/models/<model>:generateContent`` (``url`` ends in ``/v1beta``)."""

    base_path = "/v1beta"
    endpoint = "/models/{model}:generateContent"

    def __init__(
        self,
        script: Sequence[ScriptItem],
        *,
        host: str = "127.0.0.1",
        require_signatures: bool = True,
    ) -> None:
        super().__init__(script, host=host)
        self.require_signatures = require_signatures
        """Refuse a function-call turn without a ``thoughtSignature`` (Gemini 3)."""
        self.models: list[str] = []
        """The model named in the URL of each entry of :attr:`requests`."""

    def accepts(self, method: str, path: str) -> bool:
        match = _PATH.fullmatch(path)
        if method != "POST" or match is None:
            return False
        self.models.append(match.group(1))  # every accepted request is recorded in order
        return True

    def error_body(self, code: int, message: str, type: str = "scripted") -> Any:
        return {"error": {"code": code, "message": message, "status": _STATUS.get(code, "UNKNOWN")}}

    def validate(self, body: Any) -> Status | None:
        """Refuse what generativelanguage.googleapis.com refuses (see the module docstring)."""
        if not isinstance(body, dict):
            return _bad("Invalid JSON payload received. Expected an object.")
        for key in body:
            if key not in _FIELDS:
                return _bad(
                    f'Invalid JSON payload received. Unknown name "{key}": Cannot find field.'
                )
        contents = body.get("contents")
        if not isinstance(contents, list) or not contents:
            return _bad("* GenerateContentRequest.contents: contents is not specified\n")
        for n, content in enumerate(contents):
            if not isinstance(content, dict) or content.get("role", "user") not in _ROLES:
                return _bad(
                    f"* GenerateContentRequest.contents[{n}].role: must be 'user' or 'model'\n"
                )
            parts = content.get("parts")
            if not isinstance(parts, list) or not parts:
                return _bad(
                    f"* GenerateContentRequest.contents[{n}].parts: contents.parts must not "
                    "be empty.\n"
                )
        if contents[0].get("role", "user") != "user":
            if _parts(contents[0], "functionCall"):
                return _bad(CALL_AFTER_USER)
            return _bad("Please ensure that multiturn requests alternate between user and model.")
        for n, content in enumerate(contents):
            role = content.get("role", "user")
            calls = _parts(content, "functionCall") if role == "model" else []
            if role == "user" and _parts(content, "functionResponse"):
                before = contents[n - 1] if n else {}
                if before.get("role") != "model" or not _parts(before, "functionCall"):
                    return _bad(RESPONSE_AFTER_CALL)
            if not calls:
                continue
            if self.require_signatures:
                first = next(
                    p for p in content["parts"] if isinstance(p, dict) and "functionCall" in p
                )
                signature = first.get("thoughtSignature")
                if not isinstance(signature, str) or not signature:
                    name = (
                        first["functionCall"].get("name")
                        if isinstance(first["functionCall"], dict)
                        else None
                    )
                    return _bad(MISSING_SIGNATURE.format(name=name, position=n + 1))
            after = contents[n + 1] if n + 1 < len(contents) else None
            answers = (
                _parts(after, "functionResponse")
                if after and after.get("role", "user") == "user"
                else []
            )
            if len(answers) != len(calls):
                return _bad(COUNT_MISMATCH)
            names = sorted(str(c.get("name")) if isinstance(c, dict) else "" for c in calls)
            answered = sorted(str(a.get("name")) if isinstance(a, dict) else "" for a in answers)
            if names != answered:
                return _bad(
                    "Please ensure that the names of the function response parts match the "
                    f"function call parts of the function call turn: calls {names}, responses "
                    f"{answered}."
                )
        return None


# -- generateContent bodies -------------------------------------------------------------------


def _response(
    parts: list[dict[str, Any]] | None,
    finish_reason: str,
    *,
    model: str,
    response_id: str,
    prompt_tokens: int,
    candidates_tokens: int,
    thoughts_tokens: int | None = None,
    cached_tokens: int | None = None,
) -> dict[str, Any]:
    content: dict[str, Any] = {"role": "model"}
    if parts is not None:
        content["parts"] = parts
    usage: dict[str, Any] = {"promptTokenCount": prompt_tokens}
    if candidates_tokens:  # Gemini leaves zero counts out
        usage["candidatesTokenCount"] = candidates_tokens
    usage["totalTokenCount"] = prompt_tokens + candidates_tokens + (thoughts_tokens or 0)
    if cached_tokens is not None:
        usage["cachedContentTokenCount"] = cached_tokens
    if thoughts_tokens is not None:
        usage["thoughtsTokenCount"] = thoughts_tokens
    return {
        "candidates": [{"content": content, "finishReason": finish_reason, "index": 0}],
        "usageMetadata": usage,
        "modelVersion": model,
        "responseId": response_id,
    }


def _call_parts(
    calls: Sequence[tuple[str | None, str, Mapping[str, Any]] | tuple[str, Mapping[str, Any]]],
    signature: str | None,
) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for n, call in enumerate(calls):
        if len(call) == 3:
            ident, name, args = call
        else:
            ident, (name, args) = None, call
        function: dict[str, Any] = {}
        if ident is not None:
            function["id"] = ident
        function["name"] = name
        function["args"] = dict(args)
        part: dict[str, Any] = {"functionCall": function}
        if n == 0 and signature is not None:
            part["thoughtSignature"] = signature
        parts.append(part)
    return parts


def gemini_text(
    text: str,
    *,
    signature: str | None = None,
    thought: str | None = None,
    finish_reason: str = "STOP",
    model: str = "gemini-mock",
    response_id: str = "scripted-response",
    prompt_tokens: int = 10,
    candidates_tokens: int = 5,
    thoughts_tokens: int | None = None,
    cached_tokens: int | None = None,
) -> dict[str, Any]:
    """A text answer; ``thought`` adds a thought-summary part first, ``signature`` puts a
    ``thoughtSignature`` on the text part (Gemini 3 signs the last part of a turn)."""
    parts: list[dict[str, Any]] = []
    if thought is not None:
        parts.append({"text": thought, "thought": True})
    part: dict[str, Any] = {"text": text}
    if signature is not None:
        part["thoughtSignature"] = signature
    parts.append(part)
    return _response(
        parts,
        finish_reason,
        model=model,
        response_id=response_id,
        prompt_tokens=prompt_tokens,
        candidates_tokens=candidates_tokens,
        thoughts_tokens=thoughts_tokens,
        cached_tokens=cached_tokens,
    )


def gemini_calls(
    calls: Sequence[tuple[str | None, str, Mapping[str, Any]] | tuple[str, Mapping[str, Any]]],
    text: str | None = None,
    signature: str | None = None,
    *,
    thought: str | None = None,
    model: str = "gemini-mock",
    response_id: str = "scripted-response",
    prompt_tokens: int = 10,
    candidates_tokens: int = 5,
    thoughts_tokens: int | None = None,
    cached_tokens: int | None = None,
) -> dict[str, Any]:
    """An answer asking for tools: ``(id, name, args)`` or ``(name, args)`` per call (no id, as
    Gemini often sends). ``text`` goes first; ``signature`` is put on the first ``functionCall``
    part, at Part level, as Gemini does for a parallel set; ``thought`` adds a thought-summary
    part at the very start. Finish reason ``STOP``, as Gemini ends a call turn."""
    parts: list[dict[str, Any]] = []
    if thought is not None:
        parts.append({"text": thought, "thought": True})
    if text is not None:
        parts.append({"text": text})
    parts.extend(_call_parts(calls, signature))
    return _response(
        parts,
        "STOP",
        model=model,
        response_id=response_id,
        prompt_tokens=prompt_tokens,
        candidates_tokens=candidates_tokens,
        thoughts_tokens=thoughts_tokens,
        cached_tokens=cached_tokens,
    )


def gemini_empty(
    finish_reason: str = "STOP", *, model: str = "gemini-mock", response_id: str = "scripted-empty"
) -> dict[str, Any]:
    """A 200 with nothing in it: a ``model`` content without parts and no candidate tokens.
    ``finish_reason="MALFORMED_FUNCTION_CALL"`` (or ``UNEXPECTED_TOOL_CALL``) gives the other
    kind of empty round Gemini produces."""
    return _response(
        None,
        finish_reason,
        model=model,
        response_id=response_id,
        prompt_tokens=10,
        candidates_tokens=0,
    )


def gemini_blocked(
    reason: str = "SAFETY", *, model: str = "gemini-mock", response_id: str = "scripted-blocked"
) -> dict[str, Any]:
    """A blocked prompt: no candidates, ``promptFeedback.blockReason``."""
    return {
        "promptFeedback": {"blockReason": reason},
        "usageMetadata": {"promptTokenCount": 10, "totalTokenCount": 10},
        "modelVersion": model,
        "responseId": response_id,
    }


def gemini_safety(
    reason: str = "SAFETY",
    *,
    model: str = "gemini-mock",
    response_id: str = "scripted-safety",
) -> dict[str, Any]:
    """A refused answer: finish reason ``SAFETY`` (or ``reason``), no content, a blocking
    safety rating."""
    body = _response(
        None,
        reason,
        model=model,
        response_id=response_id,
        prompt_tokens=10,
        candidates_tokens=0,
    )
    candidate = body["candidates"][0]
    del candidate["content"]
    candidate["safetyRatings"] = [
        {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True}
    ]
    return body


def gemini_max_tokens(
    text: str = "The answer is",
    calls: Sequence[tuple[str | None, str, Mapping[str, Any]] | tuple[str, Mapping[str, Any]]] = (),
    *,
    model: str = "gemini-mock",
    response_id: str = "scripted-cut",
    prompt_tokens: int = 10,
    candidates_tokens: int = 512,
) -> dict[str, Any]:
    """A cut-off answer (``MAX_TOKENS``): partial text and, optionally, calls that must never
    run."""
    parts: list[dict[str, Any]] = [{"text": text}] if text else []
    parts.extend(_call_parts(calls, None))
    return _response(
        parts,
        "MAX_TOKENS",
        model=model,
        response_id=response_id,
        prompt_tokens=prompt_tokens,
        candidates_tokens=candidates_tokens,
    )
