"""``POST /llm/chat?cell=/path``: one llm turn driven from outside the colony.

The request is the ``llm.chat`` request of the loop-turn contract — ``prompt`` or ``messages``
(``[{role: user|assistant, content}]``), ``system``, ``params`` (``model``, ``max_tokens``),
``tools``, ``conversation``, ``turn``, ``results``, ``ttl``, ``retention``, ``schema`` — and the
answer is the reply JSON with the contract's HTTP status, so an engine outside the colony can
drive loops on a colony's llm cell and its transcript store. Without ``tools`` it is one plain
call (no transcript). The HTTP server mounts :func:`llm_chat`; it lives here because it speaks
the llm cell's language.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema

from cells.llm.cell import LlmCell
from cells.llm.loop import CONVERSATION, ERROR_CODES, LOOP_FIELDS, LoopError, parse_request
from cells.llm.system import PromptError, prompt_of
from colony.api import ApiError, json_response, read_json

SUPPORTED = ("prompt", "messages", "system", "params", *LOOP_FIELDS)
SUPPORTED_PARAMS = ("provider", "model", "max_tokens", "timeout_ms")


def _turns(payload: dict[str, Any]) -> list[dict[str, Any]] | None:
    messages = payload.get("messages")
    if messages is not None:
        if not isinstance(messages, list) or not messages:
            raise LoopError(400, "messages must be a non-empty list of {role, content}")
        turns = []
        for n, item in enumerate(messages):
            role = item.get("role") if isinstance(item, dict) else None
            content = item.get("content") if isinstance(item, dict) else None
            if role not in ("user", "assistant") or not isinstance(content, str) or not content:
                raise LoopError(
                    400,
                    f"messages[{n}] must be {{role: user|assistant, content: non-empty string}}",
                )
            turns.append({"origin": role, "type": "text", "text": content})
        return turns
    prompt = payload.get("prompt")
    if prompt is None:
        return None
    if not isinstance(prompt, str) or not prompt:
        raise LoopError(400, "prompt must be a non-empty string")
    return [{"origin": "user", "type": "text", "text": prompt}]


async def llm_chat(cell: LlmCell, payload: Any, *, trace_id: str = "http") -> tuple[int, Any]:
    """``(status, JSON body)`` for one request. A failed provider call leaves one ERROR
    line (``llm_chat_failed``: no cell emission, so no ``cell_error``, carries it here)."""
    try:
        return 200, await _chat(cell, payload, trace_id)
    except LoopError as error:
        if error.url is not None and cell.log is not None:
            cell.log.error(
                "llm_chat_failed",
                cell=cell.path,
                error_code=error.code,
                error=error.message,
                url=error.url,
                status=error.status,
                trace_id=trace_id,
            )
        return error.status, {"error": error.message}


async def _chat(cell: LlmCell, payload: Any, trace_id: str) -> dict[str, Any]:
    if not isinstance(payload, dict):
        raise LoopError(400, "the body must be a JSON object")
    unknown = [k for k in payload if k not in SUPPORTED]
    if unknown:
        raise LoopError(
            400, f"unsupported fields: {', '.join(unknown)} - supported: {', '.join(SUPPORTED)}"
        )
    params = payload.get("params") or {}
    if not isinstance(params, dict):
        raise LoopError(400, "params must be a map")
    bad = [k for k in params if k not in SUPPORTED_PARAMS]
    if bad:
        raise LoopError(
            400, f"unsupported params: {', '.join(bad)} - supported: {', '.join(SUPPORTED_PARAMS)}"
        )
    if "provider" in params and params["provider"] != cell.params.provider:
        raise LoopError(400, f"this cell speaks {cell.params.provider}, not {params['provider']}")
    model = params.get("model")
    if model is not None and (not isinstance(model, str) or not model):
        raise LoopError(400, "params.model must be a non-empty string")
    max_tokens = params.get("max_tokens")
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        raise LoopError(400, "params.max_tokens must be a whole number >= 1")
    system = payload.get("system")
    if system is not None and not isinstance(system, str):
        raise LoopError(400, "system must be a string")
    try:
        prompt = (
            system
            if system is not None
            else prompt_of(cell.state.slots(), cell.params.system_order)
        )
    except PromptError as exc:
        raise LoopError(400, str(exc)) from None
    turns = _turns(payload)
    slot = {k: payload[k] for k in LOOP_FIELDS if k in payload}
    if "tools" not in slot:
        if slot:
            raise LoopError(400, f"{', '.join(slot)} need(s) tools")
        if turns is None:
            raise LoopError(400, "the request needs a prompt or messages")
        return await cell.plain_turn(
            turns, prompt=prompt, model=model, max_tokens=max_tokens, trace_id=trace_id
        )
    request = parse_request(slot, turns)
    result = await cell.loop_turn(
        request, prompt=prompt, trace_id=trace_id, model=model, max_tokens=max_tokens
    )
    return result.reply


_DURATION = {
    "anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": "^[0-9]+[smhd]?$"}]
}
_OBJECTS = {"type": "array", "items": {"type": "object"}}


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ChatTurn(_Closed):
    role: Literal["user", "assistant"]
    content: Annotated[str, Field(min_length=1)]


class ChatParams(_Closed):
    provider: str | None = None
    model: Annotated[str, Field(min_length=1)] | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    timeout_ms: Annotated[int, Field(ge=1)] | None = None


class ChatRequest(_Closed):
    """The top-level shape of a ``POST /llm/chat`` request (what the OpenAPI document says);
    the loop-turn rules that tie fields together are :func:`llm_chat`'s."""

    prompt: Annotated[str, Field(min_length=1)] | None = None
    messages: Annotated[list[ChatTurn], Field(min_length=1)] | None = None
    system: str | None = None
    params: ChatParams | None = None
    tools: Annotated[list[dict[str, Any]], WithJsonSchema(_OBJECTS)] | None = None
    conversation: Annotated[str, Field(pattern=CONVERSATION.pattern)] | None = None
    turn: Annotated[int, Field(ge=1)] | Annotated[str, Field(pattern="^[0-9]+$")] | None = None
    results: Annotated[list[dict[str, Any]], WithJsonSchema(_OBJECTS)] | None = None
    ttl: Annotated[int | str, WithJsonSchema(_DURATION)] | None = None
    retention: Annotated[int | str, WithJsonSchema(_DURATION)] | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")


def _chat_path_item() -> dict[str, Any]:
    from colony.openapi import body_schema

    errors = {
        "type": "object",
        "required": ["error"],
        "properties": {"error": {"type": "string"}, "detail": {"type": "string"}},
    }
    error = {"description": "error", "content": {"application/json": {"schema": errors}}}
    return {
        "post": {
            "summary": "One llm turn (a loop turn with tools) on the llm cell ?cell=",
            "parameters": [
                {
                    "name": "cell",
                    "in": "query",
                    "required": True,
                    "schema": {"type": "string", "minLength": 1},
                }
            ],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": body_schema(ChatRequest)}},
            },
            "responses": {
                "200": {
                    "description": "the reply",
                    "content": {"application/json": {"schema": {"type": "object"}}},
                },
                **{str(code): error for code in (400, 404, 408, 409, 413, 415, 422, 429, 502, 503)},
            },
        }
    }


def _refusal(exc: ValidationError) -> str:
    """A pydantic error as a sentence of ours (no "Value error," prefix, no echoed input)."""
    error = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part) for part in error["loc"]) or "the body"
    if error["type"] == "extra_forbidden":
        return f"{where} is not supported - supported: {', '.join(SUPPORTED)}"
    return f"{where}: {error['msg'][0].lower()}{error['msg'][1:]}"


class ChatRoute:
    """``POST /llm/chat?cell=/path`` for the HTTP API: one engine per llm cell, reused."""

    openapi: ClassVar[dict[str, Any]] = {"/llm/chat": _chat_path_item()}
    """The route's path item for the API's OpenAPI document."""

    def __init__(self) -> None:
        self._engines: dict[str, LlmCell] = {}

    async def __call__(self, colony: Any, request: web.Request) -> web.Response:
        unknown = sorted(set(request.query) - {"cell"})
        if unknown:
            raise ApiError(
                400, "bad_query", f"{unknown[0]} is not a parameter; this route takes cell"
            )
        path = request.query.get("cell")
        if not path:
            raise ApiError(400, "bad_query", "name the llm cell: POST /llm/chat?cell=/path")
        runner = colony.runners.get(path)
        if runner is None or runner.type.name != "llm":
            raise ApiError(
                404, "not_found", f"no llm cell at {path} (cells of type llm answer here)"
            )
        if request.headers.get("Content-Type") and request.content_type != "application/json":
            raise ApiError(415, "unsupported_media_type", "send the request as application/json")
        payload = await read_json(request)
        try:
            ChatRequest.model_validate(payload)
        except ValidationError as exc:
            raise ApiError(400, "invalid_request", _refusal(exc)) from None
        engine = self._engines.get(path)
        if engine is None:
            engine = self._engines[path] = LlmCell(runner.spec)
        status, body = await llm_chat(engine, payload)
        if status != 200:
            token = ERROR_CODES.get(status, "provider_error")
            body = {"error": token, "detail": body["error"]}
        return json_response(body, status=status)

    async def close(self) -> None:
        for engine in self._engines.values():
            await engine.close()
        self._engines.clear()
