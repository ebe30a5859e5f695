"""A scripted Ollama: ``POST <url>/api/chat`` answered from a script, Ollama's way.

::

    async with ScriptedOllama([ollama_calls([("get_weather", {"city": "Paris"})]),
                               ollama_text("15 degrees")]) as ollama:
        ...  # configure the llm cell with provider "ollama", base_url=ollama.url
        ollama.requests[1]["messages"][-1]   # {"role": "tool", "tool_name": "get_weather", …}

:attr:`ScriptedOllama.url` is the server root (``http://127.0.0.1:PORT``), like Ollama's own
``http://127.0.0.1:11434``. Errors are Ollama's ``{"error": "<message>"}``. A request the server
cannot answer is refused with a 400 without consuming a script item: no ``model``, no
``messages`` list, ``stream`` not ``false`` (this server does not stream, and Ollama streams
unless told not to), and an assistant message with N ``tool_calls`` not followed by N ``tool``
messages each naming (``tool_name``) one of those calls.

The reply helpers build ``/api/chat`` bodies. Each gets a fresh ``created_at`` unless one is
given, so call ids derived from it differ from round to round as they do against a real server.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from scripted.core import ScriptedServer, Status

__all__ = [
    "ScriptedOllama",
    "ollama_calls",
    "ollama_empty",
    "ollama_error",
    "ollama_length",
    "ollama_text",
]

DEFAULT_MODEL = "llama3.2-mock"


class ScriptedOllama(ScriptedServer):
    """Ollama's native chat at ``<url>/api/chat``, with the checks listed in the module doc."""

    base_path = ""
    endpoint = "/api/chat"

    def error_body(self, code: int, message: str, type: str = "scripted") -> Any:
        return {"error": message}

    def validate(self, body: Any) -> Status | None:
        if not isinstance(body, dict):
            return _bad("json: cannot unmarshal the request into api.ChatRequest")
        if not isinstance(body.get("model"), str) or not body["model"]:
            return _bad("model is required")
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            return _bad("messages must be a list of message objects")
        if body.get("stream") is not False:
            return _bad("stream must be false: this scripted server does not stream")
        i = 0
        while i < len(messages):
            msg = messages[i]
            i += 1
            calls = msg.get("tool_calls") if msg.get("role") == "assistant" else None
            if not calls:
                continue
            if not isinstance(calls, list):
                return _bad(f"messages[{i - 1}].tool_calls must be an array")
            pending = [_call_name(c) for c in calls]
            for _ in range(len(calls)):
                if i >= len(messages) or messages[i].get("role") != "tool":
                    return _bad(
                        f"messages[{i - 1}] made {len(calls)} tool call(s): each must be "
                        f"answered by a 'tool' message, and messages[{i}] is not one"
                    )
                name = messages[i].get("tool_name")
                if name not in pending:
                    return _bad(
                        f"messages[{i}].tool_name {name!r} names none of the calls it answers "
                        f"({', '.join(str(p) for p in pending) or 'none left'})"
                    )
                pending.remove(name)
                i += 1
        return None


def _call_name(call: Any) -> Any:
    function = call.get("function") if isinstance(call, dict) else None
    return function.get("name") if isinstance(function, dict) else None


def _bad(message: str) -> Status:
    return Status(400, {"error": message})


# -- /api/chat bodies ---------------------------------------------------------------------

_last_ns = 0


def _created_at() -> str:
    """Ollama's timestamp (RFC 3339, nanoseconds), strictly increasing within the process."""
    global _last_ns
    now = max(time.time_ns(), _last_ns + 1)
    _last_ns = now
    seconds, nanos = divmod(now, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos:09d}Z"


def _chat(
    message: dict[str, Any],
    done_reason: str,
    *,
    model: str,
    created_at: str | None,
    prompt_eval_count: int | None,
    eval_count: int | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "created_at": created_at if created_at is not None else _created_at(),
        "message": message,
        "done_reason": done_reason,
        "done": True,
        "total_duration": 1_000_000,
        "load_duration": 100_000,
    }
    if prompt_eval_count is not None:
        body["prompt_eval_count"] = prompt_eval_count
        body["prompt_eval_duration"] = 200_000
    if eval_count is not None:
        body["eval_count"] = eval_count
        body["eval_duration"] = 700_000
    return body


def _message(
    content: str, thinking: str | None, calls: Sequence[tuple[str, Mapping[str, Any] | str]] | None
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if thinking is not None:
        message["thinking"] = thinking
    if calls:
        message["tool_calls"] = [
            {"function": {"name": name, "arguments": _arguments(args)}} for name, args in calls
        ]
    return message


def _arguments(args: Mapping[str, Any] | str) -> Any:
    """An object as Ollama sends it; a string is parsed when it is JSON, else sent verbatim."""
    if isinstance(args, str):
        try:
            return json.loads(args)
        except ValueError:
            return args
    return dict(args)


def ollama_text(
    content: str,
    done_reason: str = "stop",
    *,
    thinking: str | None = None,
    model: str = DEFAULT_MODEL,
    created_at: str | None = None,
    prompt_eval_count: int | None = 10,
    eval_count: int | None = 5,
) -> dict[str, Any]:
    """An assistant text answer (``content=""`` with ``eval_count=0`` is an empty ``stop``)."""
    return _chat(
        _message(content, thinking, None),
        done_reason,
        model=model,
        created_at=created_at,
        prompt_eval_count=prompt_eval_count,
        eval_count=eval_count,
    )


def ollama_calls(
    calls: Sequence[tuple[str, Mapping[str, Any] | str]],
    text: str | None = None,
    thinking: str | None = None,
    *,
    model: str = DEFAULT_MODEL,
    created_at: str | None = None,
    prompt_eval_count: int | None = 10,
    eval_count: int | None = 5,
) -> dict[str, Any]:
    """An answer calling tools, ``(name, arguments)`` each — Ollama sends no call ids.

    ``done_reason`` is ``stop``, as Ollama reports it; ``thinking`` is what a ``think``-enabled
    model adds to the message.
    """
    return _chat(
        _message(text or "", thinking, calls),
        "stop",
        model=model,
        created_at=created_at,
        prompt_eval_count=prompt_eval_count,
        eval_count=eval_count,
    )


def ollama_empty(
    *, model: str = DEFAULT_MODEL, created_at: str | None = None, done_reason: str = "load"
) -> dict[str, Any]:
    """What Ollama answers when it only (un)loaded the model: ``done_reason`` ``load``, nothing
    generated, no token counts."""
    return _chat(
        {"role": "assistant", "content": ""},
        done_reason,
        model=model,
        created_at=created_at,
        prompt_eval_count=None,
        eval_count=None,
    )


def ollama_length(
    content: str = "",
    calls: Sequence[tuple[str, Mapping[str, Any] | str]] | None = None,
    *,
    thinking: str | None = None,
    model: str = DEFAULT_MODEL,
    created_at: str | None = None,
    prompt_eval_count: int | None = 10,
    eval_count: int | None = 512,
) -> dict[str, Any]:
    """A cut-off answer (``done_reason`` ``length``: ``num_predict`` or the context ran out),
    optionally with the calls it got out — a client must not run them."""
    return _chat(
        _message(content, thinking, calls),
        "length",
        model=model,
        created_at=created_at,
        prompt_eval_count=prompt_eval_count,
        eval_count=eval_count,
    )


def ollama_error(
    code: int, message: str | None = None, *, retry_after: float | None = None
) -> Status:
    """An Ollama HTTP error, e.g. ``ollama_error(404, 'model "x" not found, try pulling it
    first')``; ``retry_after`` (seconds) adds the header for backoff tests."""
    headers = {} if retry_after is None else {"retry-after": f"{retry_after:g}"}
    return Status(code, {"error": message or f"scripted {code} error"}, headers)
