"""The ``llm`` cell: one provider call per message, no inner loop.

Per message: apply a ``params`` slot, write ``system`` leaves through the gate (persisted with
the input in one transaction), and — if the message has ``messages`` — build the request from
the whole persisted system tree and the turns, call the provider once (retrying only what the
transport retries), and emit the answer: tool calls, then text, with hop ``finish_reason``,
``tokens_prompt``, ``tokens_completion``, ``model``. A round with no text, no call and no
output is asked once more; a second empty answer is an ``empty_reply`` error. Every failure is
an emission with ``finish_reason: "error"``, the input messages passed through, and
``meta.error`` saying where it failed: ``source`` (``translate``, ``wire`` or ``parse``),
``detail`` (one line), and for a provider call that failed ``url`` (without password or query
values), ``status`` and ``upstream_message`` (the provider's own error text). Every emission's
``meta`` names the ``provider`` and the ``request_model`` asked for; ``meta.model`` and hop
``model`` are the model that answered (telemetry tells them apart). The API key never
leaves the Authorization header: every quoted text passes through :class:`cells.redact.Redactor`.
"""

from __future__ import annotations

import json
import time
from typing import Any

import aiohttp

from cells.cellfile import CELL_DB, own_folder
from cells.llm.dialects import dialect_for
from cells.llm.dialects.base import JsonObject as _Json
from cells.llm.dialects.base import ReplyError, Tool, TranslateError, tool_from_leaf
from cells.llm.loop import LoopError, LoopRequest, TurnResult, parse_request, run_turn
from cells.llm.params import LlmParams, overlay, transcript_dsn
from cells.llm.state import LlmState
from cells.llm.system import GateError, PromptError, check_gate, parse_write, prompt_of, tools_of
from cells.llm.transcript import MemoryStore, SqliteStore, TranscriptStore
from cells.llm.transport import ProviderWireError, error_code_for, post
from cells.redact import Redactor, safe_url
from colony.cell import CellSpec, Emission
from colony.crashpoints import crash_point
from colony.envelope import Envelope, JsonObject


class _ProviderCallError(Exception):
    def __init__(self, code: str, source: str, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.code = code
        self.source = source
        self.detail = detail
        self.extra = extra


class LlmCell:
    def __init__(self, spec: CellSpec) -> None:
        self.path = spec.path
        self.log = spec.log
        self.state = LlmState(spec.folder, spec.state)
        base = LlmParams.model_validate(spec.params)
        stored = self.state.overlay()
        self.params = overlay(base, stored) if stored else base
        self._client: aiohttp.ClientSession | None = None
        self.own = spec.state
        """Where the cell keeps its files (``cell.db``: the sqlite transcript's too)."""
        self._store: TranscriptStore | None = None
        cluster = spec.colony.cluster
        self.cluster_dsn = None if cluster is None else cluster.dsn
        """A postgres transcript store without a DSN of its own uses the cluster's database."""
        self.io = None if spec.io is None else spec.io.task(spec.path, "provider")
        """What the last provider call did, for ``GET /health`` (None outside a colony)."""

    @property
    def client(self) -> aiohttp.ClientSession:
        """The HTTP session (made on first use: aiohttp binds it to the running loop)."""
        if self._client is None:
            self._client = aiohttp.ClientSession(trust_env=False)
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
        if self._store is not None and not isinstance(self._store, MemoryStore):
            await self._store.close()
        self.state.close()

    def transcript(self) -> TranscriptStore:
        """The transcript store of loop turns (built on first use)."""
        if self._store is None:
            kind = self.params.transcript.store
            if kind == "memory":
                self._store = memory_store(self.path)
            elif kind == "sqlite":
                db = ":memory:" if self.own is None else own_folder(self.own) / CELL_DB
                self._store = SqliteStore(db)
            elif kind == "redis":
                from cells.llm.transcript.redis import RedisStore

                self._store = RedisStore(self.params.transcript.redis.url)
            else:
                from cells.llm.transcript.postgres import PostgresStore

                dsn = transcript_dsn(self.params.transcript, self.cluster_dsn)
                self._store = PostgresStore(dsn or "")
        return self._store

    # -- one message --------------------------------------------------------------------

    async def handle(self, message: Envelope) -> list[Emission]:
        target = message.reply_to or self.path
        started = time.time()
        body = message.body
        if not isinstance(body, dict):
            return [
                Emission(
                    self._error(
                        "provider_error", "parse", "the body is not an object", [], started
                    ),
                    target,
                )
            ]
        turns = body.get("messages")
        if "params" in body:
            update = body["params"]
            try:
                if not isinstance(update, dict):
                    raise ValueError("params must be an object")
                self.params = overlay(self.params, update)
            except ValueError as exc:
                detail = str(exc).splitlines()[0]
                return [
                    Emission(self._error("invalid_input", "parse", detail, [], started), target)
                ]
            self.state.save_overlay(update)
            if "system" not in body and "messages" not in body:
                return []
        if "system" not in body and "messages" not in body:
            return [
                Emission(
                    self._error(
                        "provider_error", "parse", "requires system or messages slot", [], started
                    ),
                    target,
                )
            ]
        if "messages" in body and not isinstance(turns, list):
            return [
                Emission(
                    self._error(
                        "provider_error", "parse", "messages must be an array", [], started
                    ),
                    target,
                )
            ]
        passed = turns if isinstance(turns, list) else []
        if "loop" in body:
            return [Emission(await self._loop_message(message, body), target)]
        try:
            write = parse_write(body.get("system", {}))
            check_gate(
                write,
                set(self.state.slots()),
                max_slots=self.params.system_max_slots,
                max_leaf_bytes=self.params.system_max_leaf_bytes,
                writable=self.params.system_writable,
            )
        except GateError as exc:
            return [
                Emission(self._error("invalid_input", "parse", str(exc), passed, started), target)
            ]
        self.state.write(write, turns)
        if turns is None:
            return []  # a system-only write is silent
        try:
            content = await self._call(message, turns, started)
        except _ProviderCallError as failure:
            content = self._error(
                failure.code, failure.source, failure.detail, passed, started, **failure.extra
            )
        return [Emission(content, target)]

    async def _call(self, message: Envelope, turns: list[Any], started: float) -> JsonObject:
        params = self.params
        dialect = dialect_for(params.provider)
        slots = self.state.slots()
        try:
            tools = _tools(tools_of(slots))
            body = dialect.request(
                model=params.model,
                prompt=prompt_of(slots, params.system_order),
                tools=tools,
                turns=turns,
                max_tokens=params.max_tokens,
                temperature=params.temperature,
                native=lambda calls: self.state.native(params.provider, calls),
                extra=_extra(params),
            )
        except (TranslateError, PromptError) as exc:
            raise _ProviderCallError("provider_error", "translate", str(exc)) from None
        content = encode(body, sort_keys=params.provider == "openai")
        headers = {"Content-Type": "application/json", **dialect.headers(params.api_key)}
        if params.http_referer:
            headers["HTTP-Referer"] = params.http_referer
        if params.x_title:
            headers["X-Title"] = params.x_title
        url = dialect.url(params.root, params.model)
        for attempt in (1, 2):
            begun = time.perf_counter()
            try:
                answer = await self._post(url, content, headers, message.trace_id, params.model)
            except ProviderWireError as failure:
                extra: dict[str, Any] = {"url": safe_url(url)}
                if failure.status is not None:
                    extra["status"] = failure.status
                if failure.upstream:
                    extra["upstream_message"] = self._redact(failure.upstream)
                raise _ProviderCallError(failure.code, "wire", failure.detail, **extra) from None
            crash_point("llm.replied")
            latency = int((time.perf_counter() - begun) * 1000)
            error = dialect.in_body_error(answer)
            if error is not None:
                status, upstream = error
                raise _ProviderCallError(
                    error_code_for(status) if status else "provider_error",
                    "wire",
                    "the provider answered HTTP 200 with an error object",
                    url=safe_url(url),
                    in_body=True,
                    upstream_message=self._redact(upstream) if upstream is not None else None,
                )
            try:
                reply = dialect.parse(answer)
            except ReplyError as exc:
                raise _ProviderCallError("provider_error", "parse", str(exc)) from None
            if reply.empty and attempt == 1:
                if self.log is not None:
                    self.log.info(
                        "llm_empty_round_retry", cell=self.path, trace_id=message.trace_id
                    )
                continue
            if reply.empty:
                if self.log is not None:
                    self.log.warning(
                        "llm_empty_reply",
                        cell=self.path,
                        trace_id=message.trace_id,
                        detail="the provider answered nothing twice (no text, no tool call, no "
                        "output tokens); emitted as error_code empty_reply",
                    )
                raise _ProviderCallError(
                    "empty_reply",
                    "parse",
                    "the provider answered nothing, twice",
                    model=reply.model,
                    response_id=reply.response_id,
                )
            if reply.native is not None and reply.calls:
                self.state.keep_native(params.provider, reply.calls, reply.native)
            return {
                "header": _hop(reply, params.model),
                "messages": reply.turns,
                "meta": {
                    "provider": params.provider,
                    "request_model": params.model,
                    "model": reply.model or params.model,
                    "response_id": reply.response_id,
                    "latency_ms": latency,
                    "started_at": int(started * 1000),
                },
            }
        raise AssertionError("unreachable")  # pragma: no cover

    # -- loop turns -----------------------------------------------------------------------

    async def _loop_message(self, message: Envelope, body: JsonObject) -> JsonObject:
        """A loop turn arriving as a message: the ``loop`` slot, ``system`` (written through the
        gate as usual) and, on the first turn, ``messages``. A ``params.model`` in the body is
        the model this turn asks for (checked against the conversation's pin); without one a
        continuation keeps the pinned model even if the configured one changed since."""
        slot = body["loop"]
        try:
            if not isinstance(slot, dict):
                raise LoopError(400, "the loop slot must be a map")
            write = parse_write(body.get("system", {}))
            check_gate(
                write,
                set(self.state.slots()),
                max_slots=self.params.system_max_slots,
                max_leaf_bytes=self.params.system_max_leaf_bytes,
                writable=self.params.system_writable,
            )
            request = parse_request(slot, body.get("messages"))
            prompt = prompt_of(self.state.preview(write), self.params.system_order)
            asked = body.get("params")
            model = asked.get("model") if isinstance(asked, dict) else None
            result = await self.loop_turn(
                request, prompt=prompt, trace_id=message.trace_id, model=model
            )
            self.state.write(write, body.get("messages"))  # only a turn that went through
        except GateError as exc:
            return _loop_error(LoopError(400, str(exc)))
        except PromptError as exc:
            return _loop_error(LoopError(400, str(exc)))
        except LoopError as error:
            return _loop_error(error)
        return _loop_reply(result)

    async def loop_turn(
        self,
        request: LoopRequest,
        *,
        prompt: str,
        trace_id: str,
        model: str | None = None,
        max_tokens: int | None = None,
    ) -> TurnResult:
        """One loop turn on this cell's provider and transcript store (raises LoopError)."""
        params = self.params
        dialect = dialect_for(params.provider)
        headers = {"Content-Type": "application/json", **dialect.headers(params.api_key)}

        async def call(body: JsonObject, model: str) -> Any:
            url = dialect.url(params.root, model)
            try:
                return await self._post(
                    url,
                    encode(body, sort_keys=params.provider == "openai"),
                    headers,
                    trace_id,
                    model,
                )
            except ProviderWireError as failure:
                status = failure.status or (408 if failure.code == "timeout" else 502)
                upstream = f": {self._redact(failure.upstream)}" if failure.upstream else ""
                raise LoopError(
                    status,
                    f"LLM provider error - {failure.detail}{upstream}",
                    failure.code,
                    url=safe_url(url),
                ) from None

        return await run_turn(
            request,
            dialect=dialect,
            provider=params.provider,
            model=model,
            default_model=params.model,
            prompt=prompt,
            store=self.transcript(),
            call=call,
            max_tokens=max_tokens or params.max_tokens,
            temperature=params.temperature,
            extra=_extra(params),
        )

    async def plain_turn(
        self,
        turns: list[Any],
        *,
        prompt: str,
        trace_id: str,
        model: str | None = None,
        max_tokens: int | None = None,
    ) -> JsonObject:
        """One call without tools or transcript (``POST /llm/chat`` without ``tools``)."""
        params = self.params
        dialect = dialect_for(params.provider)
        headers = {"Content-Type": "application/json", **dialect.headers(params.api_key)}
        try:
            body = dialect.request(
                model=model or params.model,
                prompt=prompt,
                tools=[],
                turns=turns,
                max_tokens=max_tokens or params.max_tokens,
                temperature=params.temperature,
                native=lambda calls: None,
                extra=_extra(params),
            )
            url = dialect.url(params.root, model or params.model)
            answer = await self._post(
                url,
                encode(body, sort_keys=params.provider == "openai"),
                headers,
                trace_id,
                model or params.model,
            )
            reply = dialect.parse(answer)
        except TranslateError as exc:
            raise LoopError(400, str(exc)) from None
        except ProviderWireError as failure:
            status = failure.status or (408 if failure.code == "timeout" else 502)
            upstream = f": {self._redact(failure.upstream)}" if failure.upstream else ""
            raise LoopError(
                status,
                f"LLM provider error - {failure.detail}{upstream}",
                failure.code,
                url=safe_url(url),
            ) from None
        except ReplyError as exc:
            raise LoopError(502, f"unexpected stop_reason - {exc}") from None
        if reply.empty:
            raise LoopError(
                422,
                f"LLM reply is empty - stop_reason={reply.stop_reason}, "
                f"output_tokens={reply.usage.output or 0}",
            )
        out: JsonObject = {"text": reply.text or ""}
        out.update(
            model=reply.model or model or params.model,
            stop_reason=reply.stop_reason or reply.finish_reason,
            usage={
                "input_tokens": reply.usage.input or 0,
                "output_tokens": reply.usage.output or 0,
                "cache_creation_input_tokens": reply.usage.cache_creation or 0,
                "cache_read_input_tokens": reply.usage.cache_read or 0,
            },
        )
        return out

    async def _post(
        self, url: str, content: bytes, headers: dict[str, str], trace_id: str, model: str
    ) -> Any:
        """One provider call (:func:`cells.llm.transport.post`, its retries included) asking
        for ``model``, its outcome told to ``GET /health``: a failure names the URL, the
        status and the provider's own error text (redacted), as the error emission does."""
        params = self.params
        try:
            answer = await post(
                self.client,
                url,
                content,
                headers,
                attempt_timeout=params.timeout,
                max_retries=params.max_retries,
                log=self.log,
                cell=self.path,
                trace_id=trace_id,
                model=model,
                provider=params.provider,
            )
        except ProviderWireError as failure:
            if self.io is not None:
                said = f": {self._redact(failure.upstream)}" if failure.upstream else ""
                self.io.failed(failure.code, f"POST {safe_url(url)}: {failure.detail}{said}")
            raise
        if self.io is not None:
            self.io.succeeded()
        return answer

    # -- errors -------------------------------------------------------------------------

    def _redact(self, text: str) -> str:
        """``text`` without this cell's key and without anything shaped like a secret (only
        failures are redacted, so the redactor is built when one happens)."""
        return Redactor([self.params.api_key]).text(text)

    def _error(
        self,
        code: str,
        source: str,
        detail: str,
        messages: list[Any],
        started: float,
        **extra: Any,
    ) -> JsonObject:
        meta: JsonObject = {
            "provider": self.params.provider,
            "request_model": self.params.model,
            "latency_ms": int((time.time() - started) * 1000),
            "started_at": int(started * 1000),
            "error": {"source": source, "detail": self._redact(detail)},
        }
        for key in ("model", "response_id"):
            if key in extra:
                meta[key] = extra.pop(key)
        meta["error"].update({k: v for k, v in extra.items() if v is not None})
        return {
            "header": {"finish_reason": "error", "error_code": code},
            "messages": messages,
            "meta": meta,
        }


def _tools(leaves: list[Any]) -> list[Tool]:
    return [tool_from_leaf(leaf, f"system.tools[{n}]") for n, leaf in enumerate(leaves)]


def _extra(params: LlmParams) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if params.provider in ("openai", "openai-responses"):  # the only wires with this field
        if params.reasoning is not None:
            extra["reasoning"] = params.reasoning
        elif params.reasoning_effort is not None:
            extra["reasoning"] = {"effort": params.reasoning_effort}
    extra.update(params.provider_extra)
    return extra


def _hop(reply: Any, model: str) -> _Json:
    hop: _Json = {"finish_reason": reply.finish_reason}
    usage = reply.usage
    if usage.prompt_total is not None:
        hop["tokens_prompt"] = usage.prompt_total
    if usage.output is not None:
        hop["tokens_completion"] = usage.output
    if usage.cache_read:
        hop["tokens_cache_read"] = usage.cache_read
    if usage.cache_creation:
        hop["tokens_cache_creation"] = usage.cache_creation
    hop["model"] = reply.model or model
    if reply.stop_reason is not None and reply.stop_reason != reply.finish_reason:
        hop["stop_reason"] = reply.stop_reason
    if reply.refusal_category is not None:
        hop["refusal_category"] = reply.refusal_category
    return hop


def encode(body: _Json, *, sort_keys: bool) -> bytes:
    """Request bytes: compact UTF-8; sorted keys on OpenAI chat (meclaw's serializer), else in
    order, so replayed native blocks go back exactly as they came."""
    return json.dumps(body, sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False).encode()


# -- loop turns ---------------------------------------------------------------------------

_MEMORY_STORES: dict[str, MemoryStore] = {}
"""Memory transcripts outlive a cell instance (it sleeps when idle), not the process."""


def memory_store(path: str) -> MemoryStore:
    store = _MEMORY_STORES.get(path)
    if store is None:
        store = _MEMORY_STORES[path] = MemoryStore()
    return store


_LOOP_FINISH = {"tool_use": "tool_calls", "refusal": "content_filter", "cap": "length"}
"""A loop status in the chat vocabulary, so ordinary edges can route loop replies too."""
_USAGE_HOP = {
    "input_tokens": "tokens_input",
    "output_tokens": "tokens_completion",
    "cache_creation_input_tokens": "tokens_cache_creation",
    "cache_read_input_tokens": "tokens_cache_read",
}


def _loop_error(error: LoopError) -> JsonObject:
    body: JsonObject = {
        "header": {
            "finish_reason": "error",
            "error_code": error.code,
            "status_code": error.status,
        },
        "messages": [],
        "error": error.message,
    }
    if error.url is not None:  # a provider call failed: where, for the cell_error log line
        body["meta"] = {
            "error": {"detail": error.message, "url": error.url, "status": error.status}
        }
    return body


def _loop_reply(result: TurnResult) -> JsonObject:
    reply = result.reply
    hop: JsonObject = {
        "status": reply["status"],
        "conversation": reply["conversation"],
        "turn": reply["turn"],
        "model": reply["model"],
        "stop_reason": reply["stop_reason"],
        "status_code": 200,
        "finish_reason": _LOOP_FINISH.get(reply["status"], "stop"),
        **{_USAGE_HOP[k]: v for k, v in reply["usage"].items()},
    }
    body: JsonObject = {"messages": result.turns}
    for key in ("text", "data", "calls", "refusal", "cap"):
        if key in reply:
            body[key] = reply[key]
    return {"header": hop, **body}
