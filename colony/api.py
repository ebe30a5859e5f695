"""The daemon's HTTP API (``meclaw --api 127.0.0.1:7799``).

Request → envelope or query; no routing logic here. Every error body has one shape,
``{"error": "<token>", "detail": "<what and why>"}`` (400 = unreadable, 404 = no such thing,
422 = understood but refused). Bind loopback by default; a non-loopback bind needs a bearer
token (``--api-token-env VAR``), checked on every route but ``/health``.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

from colony.colony import Colony
from colony.envelope import source_message
from colony.openapi import OPENAPI
from colony.persist.db import (
    DeadLetterRow,
    MessageLogEntry,
    claim_replay,
    delete_dead_letters,
    read_dead_letter,
    read_dead_letters,
    read_messages,
    release_replay,
)
from colony.ubf import body_problem

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
MAX_TTL = 2**32 - 1
MAX_BODY = 10 * 1024 * 1024
COLONY_KEY: web.AppKey[Colony] = web.AppKey("colony", Colony)


class ApiError(Exception):
    def __init__(self, status: int, token: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.token = token
        self.detail = detail


def error_response(status: int, token: str, detail: str) -> web.Response:
    return web.json_response({"error": token, "detail": detail}, status=status)


def _limit(request: web.Request) -> int:
    raw = request.query.get("limit", "100")
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(400, "bad_query", f"limit must be a whole number, got {raw!r}") from None
    return min(max(value, 1), 1000)


def _int_query(request: web.Request, name: str) -> int | None:
    raw = request.query.get(name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(400, "bad_query", f"{name} must be a whole number, got {raw!r}") from None
    if not -(2**63) <= value < 2**63:  # what SQLite can compare against
        raise ApiError(400, "bad_query", f"{name} is out of range: {raw!r} needs 64 bits or fewer")
    return value


def _uuid_query(request: web.Request, name: str) -> str | None:
    raw = request.query.get(name)
    if raw is None:
        return None
    try:
        uuid.UUID(raw)
    except ValueError:
        raise ApiError(400, "bad_query", f"{name} must be a UUID, got {raw!r}") from None
    return raw


def dead_letter_dto(row: DeadLetterRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "sender_path": row.sender_path,
        "original_target": row.original_target,
        "resolved_target": row.resolved_target,
        "error_code": row.error_code,
        "trace_id": row.trace_id,
        "created_at": row.created_at,
        "message_id": row.message_id,
        "detail": row.detail,
    }


def dead_letter_detail(row: DeadLetterRow) -> dict[str, Any]:
    """A dead letter with its replay marks and the stored message (``GET .../{id}``)."""
    return {
        **dead_letter_dto(row),
        "replayed_at": row.replayed_at,
        "replayed_as": row.replayed_as,
        "message": row.message.to_json(),
    }


def _replayed_before(row: DeadLetterRow) -> ApiError:
    return ApiError(
        409,
        "already_replayed",
        f"dead letter {row.id} was replayed at {row.replayed_at} as message {row.replayed_as}; "
        "replay it again with ?force=true",
    )


def message_dto(row: MessageLogEntry) -> dict[str, Any]:
    return {
        "id": row.id,
        "trace_id": row.trace_id,
        "parent_message_id": row.parent_message_id,
        "correlation_id": row.correlation_id,
        "ttl": row.ttl,
        "from_path": row.from_path,
        "to_path": row.to_path,
        "reply_to": row.reply_to,
        "headers": row.headers,
        "body_kind": row.body_kind,
        "body": row.body,
        "created_at": row.created_at,
    }


class Api:
    def __init__(self, colony: Colony) -> None:
        self.colony = colony

    @property
    def db_path(self) -> Any:
        return self.colony.db.path

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "io_liveness": None})

    async def openapi(self, request: web.Request) -> web.Response:
        return web.json_response(OPENAPI)

    async def post_message(self, request: web.Request) -> web.Response:
        kind = request.content_type
        if request.headers.get("Content-Type") and kind != "application/json":
            raise ApiError(415, "unsupported_media_type", "send the message as application/json")
        raw = await request.read()
        try:
            doc = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ApiError(400, "invalid_json", f"the body is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise ApiError(400, "invalid_json", "the body must be a JSON object")
        target = doc.get("target")
        if not isinstance(target, str) or not target:
            raise ApiError(422, "invalid_target", "target must be a non-empty path string")
        if "body" not in doc:
            raise ApiError(422, "invalid_ubf_body", "body is required")
        problem = body_problem(doc["body"])
        if problem is not None:
            raise ApiError(422, "invalid_ubf_body", problem)
        context = doc.get("headers")
        if context is not None and not isinstance(context, dict):
            raise ApiError(422, "invalid_headers", "headers must be an object (it becomes context)")
        hop = doc.get("hop")
        if hop is not None and not isinstance(hop, dict):
            raise ApiError(422, "invalid_hop", "hop must be an object")
        ttl = doc.get("ttl")
        if ttl is None:
            ttl = self.colony.config.message_default_ttl
        elif isinstance(ttl, bool) or not isinstance(ttl, int) or not 1 <= ttl <= MAX_TTL:
            raise ApiError(422, "invalid_ttl", f"ttl must be a whole number in 1..{MAX_TTL}")
        key = request.headers.get("Idempotency-Key")
        if key is not None and not 1 <= len(key) <= 200:
            raise ApiError(422, "invalid_idempotency_key", "Idempotency-Key must be 1..200 chars")
        message = source_message(target, doc["body"], ttl=ttl, context=context, hop=hop)
        taken = await self.colony.send(message, key=None if key is None else f"http:{key}")
        if not taken:
            return web.json_response({"duplicate": True, "idempotency_key": key}, status=200)
        return web.json_response(
            {"message_id": message.id, "trace_id": message.trace_id}, status=202
        )

    async def registry(self, request: web.Request) -> web.Response:
        path = request.query.get("path")
        prefix = request.query.get("path_prefix")
        kind = request.query.get("type")
        active = request.query.get("active")
        rows = []
        for runner in self.colony.runners.values():
            if path is not None and runner.path != path:
                continue
            if prefix is not None and not runner.path.startswith(prefix):
                continue
            if kind is not None and runner.type.name != kind:
                continue
            if active is not None and str(runner.active).lower() != active.lower():
                continue
            rows.append(
                {
                    "path": runner.path,
                    "cell_id": runner.cell_id,
                    "cell_type": runner.type.name,
                    "lifecycle_status": runner.state.value,
                    "active": runner.active,
                    "failed": runner.state.value == "failed",
                }
            )
        return web.json_response({"registry": rows[: _limit(request)]})

    async def graph(self, request: web.Request) -> web.Response:
        scope = request.query.get("scope", "/")

        def inside(path: str) -> bool:
            return scope == "/" or path == scope or path.startswith(scope.rstrip("/") + "/")

        nodes = [
            {"path": r.path, "cell_type": r.type.name}
            for r in self.colony.runners.values()
            if inside(r.path)
        ]
        nodes += [{"path": h, "cell_type": "hive"} for h in sorted(self.colony.hives) if inside(h)]
        edges = []
        for edge in self.colony.edges.all():
            if not (inside(edge.from_path) or inside(edge.to_path)):
                continue
            item: dict[str, Any] = {"id": edge.id, "from": edge.from_path, "to": edge.to_path}
            if edge.condition_source is not None:
                item["condition"] = edge.condition_source
            if edge.restore_ttl:
                item["restore_ttl"] = True
            edges.append(item)
        return web.json_response(
            {"graph": {"scope": scope, "graph_version": 0, "nodes": nodes, "edges": edges}}
        )

    async def trace(self, request: web.Request) -> web.Response:
        trace_id = _uuid_query(request, "trace_id")
        await self.colony.db.flush()
        rows = read_messages(
            self.db_path,
            trace_id=trace_id,
            to_path_prefix=request.query.get("path_prefix"),
            since=_int_query(request, "since"),
            limit=_limit(request),
            oldest_first=True,
        )
        return web.json_response({"trace": [message_dto(r) for r in rows]})

    async def messages(self, request: web.Request) -> web.Response:
        await self.colony.db.flush()
        rows = read_messages(
            self.db_path,
            trace_id=_uuid_query(request, "trace_id"),
            message_id=_uuid_query(request, "id"),
            to_path_prefix=request.query.get("to_path_prefix"),
            from_path_prefix=request.query.get("from_path_prefix"),
            since=_int_query(request, "since"),
            limit=_limit(request),
        )
        return web.json_response({"messages": [message_dto(r) for r in rows]})

    async def dead_letters(self, request: web.Request) -> web.Response:
        await self.colony.db.flush()
        rows = read_dead_letters(
            self.db_path,
            request.query.get("error_code"),
            _int_query(request, "since"),
            _limit(request),
        )
        return web.json_response({"dead_letters": [dead_letter_dto(r) for r in rows]})

    async def drain_dead_letters(self, request: web.Request) -> web.Response:
        await self.colony.db.flush()
        ids = None
        if "ids" in request.query:
            try:
                ids = [int(i) for i in request.query["ids"].split(",") if i]
            except ValueError:
                raise ApiError(400, "bad_query", "ids must be comma-separated numbers") from None
        rows = delete_dead_letters(
            self.db_path,
            error_code=request.query.get("error_code"),
            since=_int_query(request, "since"),
            ids=ids,
        )
        return web.json_response({"dead_letters": [dead_letter_dto(r) for r in rows]})

    async def _dead_letter(self, request: web.Request) -> DeadLetterRow:
        """The dead letter ``{id}`` names, its message decoded off the event loop."""
        raw = request.match_info["id"]
        if not raw.isdigit() or len(raw) > 18:
            raise ApiError(400, "bad_query", "the dead letter id is a whole number (see the list)")
        await self.colony.db.flush()
        row = await asyncio.to_thread(read_dead_letter, self.db_path, int(raw))
        if row is None:
            raise ApiError(404, "not_found", f"no dead letter {raw}")
        return row

    async def dead_letter(self, request: web.Request) -> web.Response:
        row = await self._dead_letter(request)
        return web.json_response({"dead_letter": dead_letter_detail(row)})

    async def replay(self, request: web.Request) -> web.Response:
        force = request.query.get("force", "false")
        if force not in ("true", "false"):
            raise ApiError(400, "bad_query", "force is true or false")
        row = await self._dead_letter(request)
        if row.replayed_at is not None and force != "true":
            raise _replayed_before(row)
        refusal = self.colony.admission()
        if refusal is not None:
            return web.json_response(
                {"error": refusal.token, "detail": refusal.detail},
                status=refusal.status,
                headers={"Retry-After": str(refusal.retry_after_s)},
            )
        dead = row.message
        message = source_message(
            dead.target,
            dead.body,
            ttl=self.colony.config.message_default_ttl,
            context=dead.headers.context,
            hop=dead.headers.hop,
            trace_id=dead.trace_id,
        )
        claim = await asyncio.to_thread(
            claim_replay, self.db_path, row.id, message.id, force=force == "true"
        )
        if claim.letter is None:
            raise ApiError(404, "not_found", f"no dead letter {row.id}")
        if not claim.granted:
            raise _replayed_before(claim.letter)
        try:
            await self.colony.send(message)
        except BaseException:
            await asyncio.to_thread(release_replay, self.db_path, claim.letter)
            raise
        return web.json_response(
            {"message_id": message.id, "trace_id": message.trace_id, "replayed": row.id},
            status=202,
        )

    async def revive(self, request: web.Request) -> web.Response:
        try:
            doc = json.loads(await request.read())
        except (ValueError, UnicodeDecodeError):
            raise ApiError(400, "invalid_json", 'send {"path": "/the/cell"}') from None
        path = doc.get("path") if isinstance(doc, dict) else None
        if not isinstance(path, str) or not path:
            raise ApiError(422, "invalid_path", 'send {"path": "/the/cell"}')
        runner = self.colony.runners.get(path)
        if runner is None:
            raise ApiError(404, "not_found", f"no cell at {path} (see GET /colony/registry)")
        before = runner.state.value
        revived = await runner.revive()
        return web.json_response(
            {"path": path, "revived": revived, "status_before": before, "state": runner.state.value}
        )

    async def events(self, request: web.Request) -> web.Response:
        return web.json_response({"error": "deferred"}, status=501)


def _authorized(request: web.Request, token: str) -> bool:
    """``Authorization: Bearer <token>``, compared in constant time (no timing oracle)."""
    sent = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
    return hmac.compare_digest(sent, f"Bearer {token}".encode("utf-8", "surrogateescape"))


def build_app(
    colony: Colony,
    *,
    token: str | None = None,
    extra_routes: Mapping[tuple[str, str], Callable[[Colony, web.Request], Awaitable[web.Response]]]
    | None = None,
) -> web.Application:
    """The aiohttp application; ``extra_routes`` come from the composition root (e.g. the llm
    cell's ``POST /llm/chat``), since the kernel never imports cells."""

    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        if token is not None and request.path != "/health" and not _authorized(request, token):
            return error_response(401, "unauthorized", "send Authorization: Bearer <token>")
        try:
            return await handler(request)
        except ApiError as exc:
            return error_response(exc.status, exc.token, exc.detail)
        except web.HTTPRequestEntityTooLarge:
            return error_response(413, "body_too_large", f"the body exceeds {MAX_BODY} bytes")
        except web.HTTPNotFound:
            return error_response(404, "not_found", f"no route {request.method} {request.path}")
        except web.HTTPMethodNotAllowed:
            return error_response(405, "method_not_allowed", f"{request.method} {request.path}")

    app = web.Application(middlewares=[errors], client_max_size=MAX_BODY)
    app[COLONY_KEY] = colony
    api = Api(colony)
    app.router.add_get("/health", api.health)
    app.router.add_get("/openapi.json", api.openapi)
    app.router.add_post("/messages", api.post_message)
    app.router.add_get("/colony/registry", api.registry)
    app.router.add_get("/colony/graph", api.graph)
    app.router.add_get("/colony/trace", api.trace)
    app.router.add_get("/colony/messages", api.messages)
    app.router.add_get("/colony/dead_letters", api.dead_letters)
    app.router.add_delete("/colony/dead_letters", api.drain_dead_letters)
    app.router.add_get("/colony/dead_letters/{id}", api.dead_letter)
    app.router.add_post("/colony/dead_letters/{id}/replay", api.replay)
    app.router.add_post("/colony/cells/revive", api.revive)
    app.router.add_get("/colony/events", api.events)
    for (method, path), route in (extra_routes or {}).items():

        async def bound(
            request: web.Request,
            route: Callable[[Colony, web.Request], Awaitable[web.Response]] = route,
        ) -> web.Response:
            return await route(colony, request)

        app.router.add_route(method, path, bound)
    return app


async def serve(app: web.Application, host: str, port: int) -> web.AppRunner:
    """Start serving; returns the runner (call ``cleanup()`` to stop)."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    return runner
