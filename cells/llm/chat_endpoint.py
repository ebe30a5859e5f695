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

from typing import Any

from cells.llm.cell import LlmCell
from cells.llm.loop import ERROR_CODES, LOOP_FIELDS, LoopError, parse_request
from cells.llm.system import PromptError, prompt_of

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
    """``(status, JSON body)`` for one request."""
    try:
        return 200, await _chat(cell, payload, trace_id)
    except LoopError as error:
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


class ChatRoute:
    """``POST /llm/chat?cell=/path`` for the HTTP API: one engine per llm cell, reused."""

    def __init__(self) -> None:
        self._engines: dict[str, LlmCell] = {}

    async def __call__(self, colony: Any, request: Any) -> Any:
        from aiohttp import web

        path = request.query.get("cell")
        runner = colony.runners.get(path) if path else None
        if runner is None or runner.type.name != "llm":
            return web.json_response(
                {"error": "not_found", "detail": f"no llm cell at {path!r} (use ?cell=/path)"},
                status=404,
            )
        try:
            payload = await request.json(loads=_loads)
        except ValueError as exc:
            return web.json_response({"error": "invalid_json", "detail": str(exc)}, status=400)
        engine = self._engines.get(path)
        if engine is None:
            engine = self._engines[path] = LlmCell(runner.spec)
        status, body = await llm_chat(engine, payload)
        if status != 200:
            token = ERROR_CODES.get(status, "provider_error")
            body = {"error": token, "detail": body["error"]}
        return web.json_response(body, status=status)

    async def close(self) -> None:
        for engine in self._engines.values():
            await engine.close()
        self._engines.clear()


def _loads(text: str) -> Any:
    import json

    return json.loads(text)
