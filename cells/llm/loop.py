"""Loop turns: one model turn of an agent loop whose transcript stays with the model side.

The graph (or an engine outside the colony, through ``POST /llm/chat``) carries only a
conversation reference. A turn is validated, the record read, the model called once, the
answer judged, and the record written by compare-and-set on the turn count, so a duplicated
resume can never fork a conversation. Statuses: 400 invalid request, 404 unknown / expired /
ended-and-deleted, 409 stale turn / ended run / lost race, 422 nothing usable, 502 unexpected
stop reason, 503 store unreachable.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cells.llm.dialects.base import (
    Dialect,
    Reply,
    ReplyError,
    Tool,
    TranslateError,
    compact,
    error_text,
)
from cells.llm.transcript.base import Record, StoreUnavailableError, TranscriptStore, WriteOutcome
from colony.jsonwire import JsonRefused, loads

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
TOOL_KEYS = ("name", "description", "input_schema", "strict")
CONVERSATION = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
_DURATION = re.compile(r"^(\d+)([smhd]?)$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
DEFAULT_TTL = 7 * 86400
LOOP_FIELDS = ("tools", "conversation", "turn", "results", "ttl", "retention", "schema")

ERROR_CODES = {
    400: "invalid_request",
    404: "not_found",
    408: "timeout",
    409: "conflict",
    422: "unprocessable",
    502: "unexpected_stop_reason",
    503: "store_unavailable",
}


class LoopError(Exception):
    """A turn that ends in an HTTP-style status other than 200."""

    def __init__(
        self, status: int, message: str, code: str | None = None, *, url: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code or ERROR_CODES.get(status, "provider_error")
        self.url = url
        """The provider URL (no credentials, no query values) when a provider call failed."""


def _whole(value: Any, what: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise LoopError(400, f"{what} must be a whole number >= {minimum}")
    if isinstance(value, str) and not value.isdigit():
        raise LoopError(400, f"{what} must be a whole number >= {minimum}")
    number = int(value)
    if number < minimum:
        raise LoopError(400, f"{what} must be a whole number >= {minimum}")
    return number


def duration(value: Any, what: str, minimum: int) -> int:
    """Seconds from a whole number or ``30m`` / ``12h`` / ``2d``."""
    if isinstance(value, bool):
        raise LoopError(400, f"{what} must be seconds or a duration such as 30m, 12h, 2d")
    if isinstance(value, int):
        seconds = value
    elif isinstance(value, str) and (match := _DURATION.match(value)):
        seconds = int(match.group(1)) * _UNITS[match.group(2)]
    else:
        raise LoopError(400, f"{what} must be seconds or a duration such as 30m, 12h, 2d")
    if seconds < minimum:
        raise LoopError(400, f"{what} must be at least {minimum} second(s)")
    return seconds


@dataclass(slots=True)
class LoopRequest:
    tools: list[dict[str, Any]]
    conversation: str | None = None
    turn: int | None = None
    results: list[dict[str, Any]] | None = None
    ttl: int = DEFAULT_TTL
    retention: int = 0
    schema: dict[str, Any] | None = None
    messages: list[Any] | None = None
    """The first turn's UBF turns."""
    ttl_given: bool = False
    retention_given: bool = False

    @property
    def continuation(self) -> bool:
        return self.conversation is not None


def parse_tools(tools: Any) -> list[dict[str, Any]]:
    if not isinstance(tools, list) or not tools:
        raise LoopError(400, "tools must be a non-empty list")
    seen: dict[str, int] = {}
    for n, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise LoopError(400, f"tools[{n}] must be a map")
        extra = [k for k in tool if k not in TOOL_KEYS]
        if extra:
            raise LoopError(
                400,
                f"tools[{n}] has unsupported keys: {', '.join(extra)} - supported: "
                + ", ".join(TOOL_KEYS),
            )
        name = tool.get("name")
        if not isinstance(name, str) or not TOOL_NAME.match(name):
            raise LoopError(400, f"tools[{n}].name must match ^[a-zA-Z0-9_-]{{1,128}}$")
        if name in seen:
            raise LoopError(400, f"tools[{n}].name duplicates tools[{seen[name]}]")
        seen[name] = n
        if "description" in tool and not isinstance(tool["description"], str):
            raise LoopError(400, f"tools[{n}].description must be a string")
        schema = tool.get("input_schema", {"type": "object"})
        if not isinstance(schema, dict) or schema.get("type") != "object":
            raise LoopError(400, f"tools[{n}].input_schema must be a map with type: object")
        if "strict" in tool and not isinstance(tool["strict"], bool):
            raise LoopError(400, f"tools[{n}].strict must be true or false")
    return tools


def parse_request(slot: Mapping[str, Any], messages: Any) -> LoopRequest:
    """Validate a ``loop`` body slot (plus the message's ``messages`` on a first turn)."""
    if "tools" not in slot:
        fields = [k for k in LOOP_FIELDS if k in slot]
        raise LoopError(400, f"{', '.join(fields) or 'the loop slot'} need(s) tools")
    unknown = [k for k in slot if k not in LOOP_FIELDS]
    if unknown:
        raise LoopError(
            400,
            f"unsupported loop fields: {', '.join(unknown)} - supported: " + ", ".join(LOOP_FIELDS),
        )
    request = LoopRequest(tools=parse_tools(slot["tools"]))
    present = [k for k in ("conversation", "turn", "results") if k in slot]
    if present and len(present) != 3:
        raise LoopError(400, "conversation, turn and results come together on a continuation")
    if present:
        conversation = slot["conversation"]
        if not isinstance(conversation, str) or not CONVERSATION.match(conversation):
            raise LoopError(400, "conversation must match ^[A-Za-z0-9_-]{1,128}$")
        request.conversation = conversation
        request.turn = _whole(slot["turn"], "turn", 1)
        request.results = _results(slot["results"])
        if messages:
            raise LoopError(
                400,
                "a continuation carries results, not messages: the transcript lives with "
                "the model side",
            )
    else:
        if not isinstance(messages, list) or not messages:
            raise LoopError(400, "the first turn needs a prompt or messages")
        request.messages = messages
    if "ttl" in slot:
        request.ttl = duration(slot["ttl"], "ttl", 1)
        request.ttl_given = True
    if "retention" in slot:
        request.retention = duration(slot["retention"], "retention", 0)
        request.retention_given = True
    if "schema" in slot:
        if not isinstance(slot["schema"], dict):
            raise LoopError(400, "schema must be a map")
        request.schema = slot["schema"]
    return request


def _results(results: Any) -> list[dict[str, Any]]:
    if not isinstance(results, list) or not results:
        raise LoopError(400, "results must be a non-empty list of {id, output} or {id, error}")
    ids: set[str] = set()
    for n, item in enumerate(results):
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            raise LoopError(400, f"results[{n}] must be a map with a string id")
        if ("output" in item) == ("error" in item):
            raise LoopError(400, f"results[{n}] needs exactly one of output or error")
        extra = set(item) - {"id", "output", "error"}
        if extra:
            raise LoopError(400, f"results[{n}] has unsupported keys: {', '.join(sorted(extra))}")
        if item["id"] in ids:
            raise LoopError(400, f"results[{n}].id {item['id']} is duplicated")
        ids.add(item["id"])
    return results


def tools_digest(tools: list[dict[str, Any]]) -> str:
    return hashlib.sha256(compact(tools, sort_keys=True).encode()).hexdigest()


def result_turns(record: Record, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The one round of tool results, in call order, whatever order they arrived in."""
    by_id = {item["id"]: item for item in results}
    missing = [i for i in record.pending if i not in by_id]
    extra = [i for i in by_id if i not in record.pending]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing results for {', '.join(missing)}")
        if extra:
            parts.append(f"results for unknown calls {', '.join(extra)}")
        raise LoopError(400, "results do not match the pending calls: " + "; ".join(parts))
    turns = []
    for call_id in record.pending:
        item = by_id[call_id]
        if "error" in item:
            error = item["error"] if isinstance(item["error"], str) else compact(item["error"])
            text = error_text(error)
        else:
            output = item["output"]
            text = output if isinstance(output, str) else compact(output)
            if text == "":
                text = "(empty)"
        turns.append({"origin": "tool", "type": "tool_result", "id": call_id, "text": text})
    return turns


@dataclass(slots=True)
class TurnResult:
    """A turn that succeeded (200)."""

    reply: dict[str, Any]
    turns: list[dict[str, Any]]
    """The model's UBF turns (tool calls first, then text)."""
    usage: dict[str, int] = field(default_factory=dict)


Caller = Callable[[dict[str, Any], str], Awaitable[Any]]
"""Posts one request body for a model to the provider and returns the answer JSON (raises on
failure); the model is passed because some providers name it in the URL."""


async def run_turn(
    request: LoopRequest,
    *,
    dialect: Dialect,
    provider: str,
    model: str | None,
    default_model: str,
    prompt: str,
    store: TranscriptStore,
    call: Caller,
    max_tokens: int,
    temperature: float,
    extra: Mapping[str, Any],
) -> TurnResult:
    """One loop turn; raises :class:`LoopError` for every non-200 outcome.

    ``model`` is the one the request names, if any: a first turn without it uses
    ``default_model``, a continuation without it uses the model the conversation was pinned to,
    so a cell restarted with another configured model still finishes the loops it started."""
    digest = tools_digest(request.tools)
    try:
        if request.continuation:
            assert request.conversation is not None
            assert request.turn is not None
            record = await store.read(request.conversation)
            if record is None:
                raise LoopError(404, f"unknown or expired conversation {request.conversation}")
            if record.state != "open":
                raise LoopError(
                    409, f"conversation {request.conversation} has ended ({record.state})"
                )
            if request.turn != record.turn:
                raise LoopError(
                    409, f"stale turn {request.turn}: the conversation is at turn {record.turn}"
                )
            if model is None:
                model = record.model
            elif model != record.model:
                raise LoopError(
                    400, f"the conversation is pinned to model {record.model}, not {model}"
                )
            if prompt != record.system:
                raise LoopError(
                    400, "the system prompt changed since turn 1; a loop's prefix is pinned"
                )
            if digest != record.tools_digest:
                raise LoopError(400, "the tools changed since turn 1; a loop's prefix is pinned")
            assert request.results is not None
            turns = record.turns + result_turns(record, request.results)
            conversation = request.conversation
        else:
            model = model or default_model
            record = Record(
                provider=provider, model=model, system=prompt, tools_digest=digest, created=_now()
            )
            turns = list(request.messages or [])
            conversation = uuid.uuid4().hex
    except StoreUnavailableError as exc:
        raise LoopError(503, str(exc)) from None

    tools = [
        Tool(
            t["name"],
            t.get("description"),
            t.get("input_schema", {"type": "object"}),
            t.get("strict"),
        )
        for t in request.tools
    ]
    natives = record.native
    try:
        body = dialect.request(
            model=model,
            prompt=prompt,
            tools=tools,
            turns=turns,
            max_tokens=max_tokens,
            temperature=temperature,
            native=lambda calls: natives.get(",".join(calls)),
            extra=extra,
        )
    except TranslateError as exc:
        raise LoopError(400, f"the conversation cannot be sent to {provider}: {exc}") from None
    answer = await call(body, model)
    try:
        reply = dialect.parse(answer)
    except ReplyError as exc:
        raise LoopError(502, f"unexpected stop_reason - {exc}") from None
    status, cap = _status(reply)
    text = reply.text if reply.text and reply.text.strip() else None
    if status in ("done", "cap") and text is None and not reply.calls:
        hint = " (raise max_tokens)" if status == "cap" else ""
        raise LoopError(
            422,
            f"LLM reply is empty - stop_reason={reply.stop_reason}, "
            f"output_tokens={reply.usage.output or 0}{hint}",
        )
    data = None
    if status == "done" and request.schema is not None:
        try:
            data = loads(text or "")
        except JsonRefused as exc:
            raise LoopError(
                422, f"LLM reply is not valid JSON for the requested schema - {exc.problem}"
            ) from None

    record.turns = turns + reply.turns
    record.turn += 1
    record.updated = _now()
    record.pending = list(reply.calls) if status == "tool_use" else []
    record.state = "open" if status == "tool_use" else status
    if reply.native is not None and reply.calls:
        record.native[",".join(reply.calls)] = reply.native
    expected = 0 if not request.continuation else record.turn - 1
    expire = request.ttl if record.state == "open" else request.retention
    try:
        outcome = await store.write(conversation, expected, record if expire > 0 else None, expire)
    except StoreUnavailableError as exc:
        raise LoopError(503, str(exc)) from None
    if outcome is WriteOutcome.GONE:
        raise LoopError(404, f"conversation {conversation} expired during the turn")
    if outcome is WriteOutcome.STALE:
        raise LoopError(409, f"turn {expected} of conversation {conversation} was already answered")

    calls = []
    for turn in reply.turns:
        if turn["type"] == "tool_call":
            function = json.loads(turn["text"])
            arguments = function.get("arguments") or "{}"
            calls.append(
                {
                    "id": turn["id"],
                    "name": function.get("name"),
                    "input": json.loads(arguments) if isinstance(arguments, str) else arguments,
                }
            )
    usage = {
        "input_tokens": reply.usage.input or 0,
        "output_tokens": reply.usage.output or 0,
        "cache_creation_input_tokens": reply.usage.cache_creation or 0,
        "cache_read_input_tokens": reply.usage.cache_read or 0,
    }
    answer_json: dict[str, Any] = {"status": status}
    if data is not None:
        answer_json["data"] = data
    elif text is not None:
        answer_json["text"] = text
    answer_json["calls"] = calls if status == "tool_use" else []
    if status == "refusal":
        answer_json["refusal"] = {
            "category": reply.refusal_category if reply.refusal_category != "refusal" else None
        }
    if cap is not None:
        answer_json["cap"] = cap
    answer_json.update(
        conversation=conversation,
        turn=record.turn,
        model=reply.model or model,
        stop_reason=reply.stop_reason or reply.finish_reason,
        usage=usage,
    )
    return TurnResult(answer_json, reply.turns, usage)


def _status(reply: Reply) -> tuple[str, str | None]:
    if reply.finish_reason == "tool_calls" and reply.calls:
        return "tool_use", None
    if reply.finish_reason == "content_filter":
        return "refusal", None
    if reply.finish_reason == "length":
        context = reply.stop_reason in ("model_context_window_exceeded",)
        return "cap", "context" if context else "max_tokens"
    return "done", None


def _now() -> int:
    return int(time.time() * 1000)
