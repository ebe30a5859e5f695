"""The daemon's HTTP API (``meclaw --api 127.0.0.1:7799``).

Request → envelope or query; no routing logic here. Every error body has one shape,
``{"error": "<token>", "detail": "<what and why>"}`` (400 = unreadable, 404 = no such thing,
422 = understood but refused, 429/503 = not now, with ``Retry-After``). Bind loopback by
default; a non-loopback bind needs a bearer token (``--api-token-env VAR``), checked on every
route but the probes (``/health``, ``/ready``: :mod:`colony.liveness`) and the web console's
static files (``/ui/``, :mod:`colony.console`). The reads are :mod:`colony.reads` with the
filters of :mod:`colony.queries`, the same a cell gets by sending a message to
``/colony/<read>``; what a client may hold (connections, time, bytes in flight) is bounded by
:mod:`colony.httpguard`.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import unquote_to_bytes

from aiohttp import web

from colony import jsonwire, reads
from colony.api_models import BodyRefused, post_message
from colony.colony import Colony
from colony.console import add_routes, is_console_path
from colony.errors import ColonyError
from colony.httpguard import (
    BodyTimeout,
    Connections,
    GuardedSite,
    InFlight,
    ServerLimits,
    read_body,
)
from colony.ingress import source_message_of
from colony.liveness import Health, Storage, judge
from colony.livestream import interest_of, stream
from colony.metrics.registry import CONTENT_TYPE, metrics_of
from colony.openapi import document
from colony.persist.db import PersistenceError, UnitRejected
from colony.persist.escape import has_surrogate
from colony.persist.records import (
    DeadLetterRow,
    claim_replay,
    delete_dead_letters,
    read_dead_letter,
    release_replay,
)
from colony.persist.source import Source
from colony.queries import READS, DrainFilters, EventsFilters, QueryError, parse_http
from colony.runner import CellState
from colony.telemetry.context import join as join_trace
from colony.telemetry.context import unjoin as unjoin_trace

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
MAX_BODY = 10 * 1024 * 1024
COLONY_KEY: web.AppKey[Colony] = web.AppKey("colony", Colony)
CONNECTIONS_KEY: web.AppKey[Connections] = web.AppKey("connections", Connections)
LIMITS_KEY: web.AppKey[ServerLimits] = web.AppKey("limits", ServerLimits)
MAX_REQUEST_LINE = 64 * 1024
"""Longest request line read (a read's filters, each up to ``TEXT_MAX`` characters, may take
12 bytes a character percent-encoded)."""
_THREAD_PARSE = 256 * 1024
"""Bodies larger than this are parsed and checked on a worker thread, off the event loop."""


class ApiError(ColonyError):
    """A request answered with an error: ``status``, meclaw's ``token`` for it, a ``detail``."""

    code = "api_error"

    def __init__(
        self, status: int, token: str, detail: str, *, retry_after: int | None = None
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.token = token
        self.detail = detail
        self.retry_after = retry_after


def json_response(data: Any, status: int = 200) -> web.Response:
    """A JSON answer in standard JSON (never a bare NaN)."""
    return web.json_response(data, status=status, dumps=jsonwire.dumps)


def error_response(
    status: int, token: str, detail: str, *, retry_after: int | None = None
) -> web.Response:
    response = json_response({"error": token, "detail": detail}, status=status)
    if retry_after is not None:
        response.headers["Retry-After"] = str(retry_after)
    return response


def dead_letter_detail(row: DeadLetterRow) -> dict[str, Any]:
    """A dead letter with its replay marks and the stored message (``GET .../{id}``)."""
    return {
        **row.fields(),
        "message": row.message.to_json(),
    }


def _replayed_before(row: DeadLetterRow) -> ApiError:
    return ApiError(
        409,
        "already_replayed",
        f"dead letter {row.id} was replayed at {row.replayed_at} as message {row.replayed_as}; "
        "replay it again with ?force=true",
    )


async def read_json(request: web.Request) -> Any:
    """The request's JSON body, read within the body timeout and refused (400
    ``invalid_json``) unless it is UTF-8 JSON with no lone surrogate, no NaN or Infinity and
    at most :data:`colony.jsonwire.MAX_DEPTH` levels deep. Every JSON ingress reads this way."""
    return await _parse(await read_body(request, request.app[LIMITS_KEY]))


async def _parse(raw: bytes) -> Any:
    try:
        if len(raw) > _THREAD_PARSE:
            return await asyncio.to_thread(jsonwire.loads, raw)
        return jsonwire.loads(raw)
    except jsonwire.JsonRefused as exc:
        raise ApiError(400, "invalid_json", exc.detail) from None


class Api:
    def __init__(self, colony: Colony, limits: ServerLimits | None = None) -> None:
        self.colony = colony
        self.limits = limits or ServerLimits()
        self.stopping = False
        """The daemon stops (``GET /ready`` answers 503 from then on)."""

    def stop_taking(self) -> None:
        self.stopping = True

    @property
    def source(self) -> Source:
        """Where the colony's rows are read (``colony.db`` or the cluster database)."""
        return self.colony.db.source

    async def health(self, request: web.Request) -> web.Response:
        """``ok``, ``degraded`` or ``failing`` with a reason each (:mod:`colony.liveness`);
        503 when failing. Reads memory only: it answers while the storage hangs."""
        colony = self.colony
        db = colony.db
        stats = db.statistics()
        storage = Storage(not db.closed, stats.unavailable, stats.kept)
        tasks = colony.events.io.tasks()
        failed = [p for p, r in colony.runners.items() if r.state is CellState.FAILED]
        report = judge(storage, tasks, failed)
        doc: dict[str, Any] = {"status": report.status.value, "reasons": report.reasons}
        member = colony.cluster
        if member is not None:  # which node answers, and the conversations it runs
            doc["node"] = member.node
            doc["partitions"] = sorted(member.owned)
        doc["storage"] = {
            "writer_alive": storage.writer_alive,
            "unavailable": storage.unavailable,
            "kept": storage.kept,
        }
        doc["journal"] = {
            "durable": colony.at_least_once,
            "in_flight": colony.in_flight.count,
            "queued_bytes": colony.queued.value,
            "spilled_bytes": colony.spilled.value,
        }
        doc["failed_cells"] = failed
        doc["io_liveness"] = [t.to_json() for t in tasks] or None  # (meclaw's: last)
        return json_response(doc, status=503 if report.status is Health.FAILING else 200)

    async def ready(self, request: web.Request) -> web.Response:
        """200 while the colony takes traffic: started, its storage writable, not stopping."""
        db = self.colony.db
        why: str | None
        if self.stopping:
            why = "the daemon is stopping"
        elif db.closed:
            why = "the storage writer has stopped"
        else:
            why = db.unavailable()
        if why is not None:
            return json_response({"ready": False, "reason": why}, status=503)
        return json_response({"ready": True, "reason": None})

    async def openapi(self, request: web.Request) -> web.Response:
        return json_response(request.app[DOCUMENT_KEY])

    async def post_message(self, request: web.Request) -> web.Response:
        kind = request.content_type
        if request.headers.get("Content-Type") and kind != "application/json":
            raise ApiError(415, "unsupported_media_type", "send the message as application/json")
        key = request.headers.get("Idempotency-Key")
        if key is not None and has_surrogate(key):  # aiohttp passes bad bytes on as these
            raise ApiError(
                400, "invalid_idempotency_key", "Idempotency-Key is not valid UTF-8 text"
            )
        if key is not None and not 1 <= len(key) <= 200:
            raise ApiError(422, "invalid_idempotency_key", "Idempotency-Key must be 1..200 chars")
        raw = await read_body(request, self.limits)
        doc = await _parse(raw)
        try:
            message = post_message(doc, self.colony.config)
        except BodyRefused as exc:
            status = 400 if exc.token == "invalid_json" else 422
            raise ApiError(status, exc.token, exc.detail) from None
        refusal = self.colony.admission(len(raw))
        if refusal is not None:
            raise ApiError(
                refusal.status, refusal.token, refusal.detail, retry_after=refusal.retry_after_s
            )
        # joined before the send (its hand-off's spans need the link), undone unless taken
        parent = request.headers.get("traceparent")
        linked = parent is not None and join_trace(message.trace_id, parent)
        taken = False
        try:
            taken = await self.colony.send(message, key=None if key is None else f"http:{key}")
        finally:
            if linked and not taken:
                unjoin_trace(message.trace_id)
        if not taken:
            return json_response({"duplicate": True, "idempotency_key": key}, status=200)
        return json_response({"message_id": message.id, "trace_id": message.trace_id}, status=202)

    async def read(self, request: web.Request) -> web.Response:
        """``GET /colony/<read>``: :mod:`colony.reads` with the query string's filters."""
        model = READS[request.path]
        filters = parse_http(model, list(request.query.items()))
        return json_response(await reads.read(self.colony, filters))

    async def drain_dead_letters(self, request: web.Request) -> web.Response:
        filters = parse_http(DrainFilters, list(request.query.items()))
        try:
            await self.colony.db.flush()
        except PersistenceError as exc:
            raise ApiError(503, "storage_unavailable", str(exc), retry_after=5) from None
        rows = await asyncio.to_thread(
            delete_dead_letters,
            self.source,
            error_code=filters.error_code,
            since=filters.since,
            ids=None if filters.ids is None else list(filters.ids),
        )
        return json_response({"dead_letters": [r.fields() for r in rows]})

    async def _dead_letter(self, request: web.Request) -> DeadLetterRow:
        """The dead letter ``{id}`` names, its message decoded off the event loop."""
        raw = request.match_info["id"]
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 19 and 1 <= int(raw) < 2**63):
            raise ApiError(400, "bad_query", "the dead letter id is a whole number (see the list)")
        await self.colony.db.flush()
        row = await asyncio.to_thread(read_dead_letter, self.source, int(raw))
        if row is None:
            raise ApiError(404, "not_found", f"no dead letter {raw}")
        return row

    async def dead_letter(self, request: web.Request) -> web.Response:
        row = await self._dead_letter(request)
        return json_response({"dead_letter": dead_letter_detail(row)})

    async def replay(self, request: web.Request) -> web.Response:
        force = request.query.get("force", "false")
        if force not in ("true", "false"):
            raise ApiError(400, "bad_query", "force is true or false")
        row = await self._dead_letter(request)
        if row.replayed_at is not None and force != "true":
            raise _replayed_before(row)
        refusal = self.colony.admission()
        if refusal is not None:
            raise ApiError(
                refusal.status, refusal.token, refusal.detail, retry_after=refusal.retry_after_s
            )
        dead = row.message
        message = source_message_of(
            dead.target,
            dead.body,
            self.colony.config,
            context=dead.headers.context,
            hop=dead.headers.hop,
            trace_id=dead.trace_id,
        )
        claim = await asyncio.to_thread(
            claim_replay, self.source, row.id, message.id, force=force == "true"
        )
        if claim.letter is None:
            raise ApiError(404, "not_found", f"no dead letter {row.id}")
        if not claim.granted:
            raise _replayed_before(claim.letter)
        try:
            await self.colony.send(message)
        except BaseException:
            await asyncio.to_thread(release_replay, self.source, claim.letter)
            raise
        return json_response(
            {"message_id": message.id, "trace_id": message.trace_id, "replayed": row.id},
            status=202,
        )

    async def revive(self, request: web.Request) -> web.Response:
        doc = await read_json(request)
        path = doc.get("path") if isinstance(doc, dict) else None
        if not isinstance(path, str) or not path:
            raise ApiError(422, "invalid_path", 'send {"path": "/the/cell"}')
        runner = self.colony.runners.get(path)
        if runner is None:
            raise ApiError(404, "not_found", f"no cell at {path} (see GET /colony/registry)")
        before = runner.state.value
        revived = await runner.revive()
        return json_response(
            {"path": path, "revived": revived, "status_before": before, "state": runner.state.value}
        )

    async def metrics(self, request: web.Request) -> web.Response:
        """``GET /metrics``: Prometheus' text format (:mod:`colony.metrics`)."""
        text = await metrics_of(self.colony).exposition()
        return web.Response(body=text, headers={"Content-Type": CONTENT_TYPE})

    async def events(self, request: web.Request) -> web.StreamResponse:
        """``GET /colony/events``: :mod:`colony.livestream`."""
        filters = parse_http(EventsFilters, list(request.query.items()))
        try:
            interest = interest_of(filters)
        except ValueError as exc:
            raise ApiError(400, "bad_query", str(exc)) from None
        return await stream(request, self.colony, interest)


DOCUMENT_KEY: web.AppKey[dict[str, Any]] = web.AppKey("openapi", dict)
API_KEY: web.AppKey[Api] = web.AppKey("api", Api)


def stopping(app: web.Application) -> None:
    """The daemon was told to stop: ``GET /ready`` answers 503 from now on (the listener
    closes right after; a refused probe reads as not ready too)."""
    app[API_KEY].stop_taking()


_OPEN = frozenset({"/health", "/ready"})
"""Routes an orchestrator probes without a token."""


def _authorized(request: web.Request, token: str) -> bool:
    """``Authorization: Bearer <token>``, compared in constant time (no timing oracle)."""
    sent = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
    return hmac.compare_digest(sent, f"Bearer {token}".encode("utf-8", "surrogateescape"))


def _query_problem(request: web.Request) -> str | None:
    """Why the query string is not text (aiohttp would quietly turn bad bytes into U+FFFD)."""
    try:
        unquote_to_bytes(request.rel_url.raw_query_string.replace("+", " ")).decode("utf-8")
    except UnicodeDecodeError:
        return "the query string is not valid UTF-8 once percent-decoded"
    return None


def build_app(
    colony: Colony,
    *,
    token: str | None = None,
    extra_routes: Mapping[tuple[str, str], Callable[[Colony, web.Request], Awaitable[web.Response]]]
    | None = None,
    limits: ServerLimits | None = None,
) -> web.Application:
    """The aiohttp application; ``extra_routes`` come from the composition root (e.g. the llm
    cell's ``POST /llm/chat``), since the kernel never imports cells. ``limits`` default to
    what the colony's ``colony.json`` sets."""
    limits = limits or ServerLimits.of(colony.config)
    connections = Connections(limits, colony.log)
    in_flight = InFlight(limits.max_inflight_bytes)

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        """Marks the connection busy while a request is handled and its answer written (the
        head deadline does not apply to it), and bounds the writing."""
        conn = connections.guard_of(request)
        if conn is not None:
            conn.request_started()
        try:
            response = await handler(request)
            try:
                async with asyncio.timeout(limits.write_timeout_s):
                    await response.prepare(request)
                    await response.write_eof()
            except TimeoutError:
                if request.transport is not None:
                    request.transport.abort()
            except ConnectionError:
                pass  # the client went away; aiohttp notes it when it finishes the response
            return response
        finally:
            if conn is not None:
                conn.request_finished()

    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        if (
            token is not None
            and request.path not in _OPEN
            and not is_console_path(request.path)  # static files; every data call needs it
            and not _authorized(request, token)
        ):
            return error_response(401, "unauthorized", "send Authorization: Bearer <token>")
        problem = _query_problem(request)
        if problem is not None:
            return error_response(400, "bad_query", problem)
        held = 0
        if request.body_exists:
            held = min(request.content_length or MAX_BODY, MAX_BODY)
            if not in_flight.take(held):
                return error_response(
                    429,
                    "overloaded",
                    f"the API holds {in_flight.held} bytes of requests, its bound is "
                    f"{limits.max_inflight_bytes}; retry shortly",
                    retry_after=limits.retry_after_s,
                )
        try:
            return await handler(request)
        except ApiError as exc:
            return error_response(exc.status, exc.token, exc.detail, retry_after=exc.retry_after)
        except QueryError as exc:
            return error_response(400, "bad_query", exc.detail)
        except BodyTimeout as exc:
            response = error_response(408, "body_timeout", exc.detail)
            response.force_close()  # the rest of the body is never read
            return response
        except reads.ReadFailed as exc:
            colony.log.error("api_read_failed", path=request.path, error=str(exc))
            return error_response(503, "storage_unavailable", str(exc), retry_after=5)
        except UnitRejected as exc:  # this message alone; the colony dead-lettered it
            return error_response(422, "unstorable", str(exc))
        except PersistenceError as exc:
            colony.log.error("api_write_failed", path=request.path, error=str(exc))
            return error_response(503, "storage_unavailable", str(exc), retry_after=5)
        except web.HTTPRequestEntityTooLarge:
            return error_response(413, "body_too_large", f"the body exceeds {MAX_BODY} bytes")
        except web.HTTPNotFound:
            return error_response(404, "not_found", f"no route {request.method} {request.path}")
        except web.HTTPMethodNotAllowed as exc:
            response = error_response(
                405, "method_not_allowed", f"{request.method} is not served on {request.path}"
            )
            response.headers["Allow"] = ", ".join(sorted(exc.allowed_methods))
            return response
        except web.HTTPException:
            raise
        except Exception as exc:
            colony.log.exception("api_internal_error", path=request.path, method=request.method)
            return error_response(
                500, "internal_error", f"the daemon failed on this request ({type(exc).__name__})"
            )
        finally:
            in_flight.give(held)

    app = web.Application(middlewares=[guard, errors], client_max_size=MAX_BODY)
    api = Api(colony, limits)
    app[API_KEY] = api

    async def end_streams(app: web.Application) -> None:
        api.stopping = True
        colony.events.close()  # before aiohttp waits for the handlers: each stream then ends

    app.on_shutdown.append(end_streams)
    app[COLONY_KEY] = colony
    app[CONNECTIONS_KEY] = connections
    app[LIMITS_KEY] = limits
    described: dict[str, Any] = {}
    for route in (extra_routes or {}).values():
        described.update(getattr(route, "openapi", {}))
    app[DOCUMENT_KEY] = document(token_required=token is not None, extra=described)
    metrics_of(colony)  # counting starts with the API, not at the first scrape
    app.router.add_get("/health", api.health)
    app.router.add_get("/ready", api.ready)
    app.router.add_get("/openapi.json", api.openapi)
    app.router.add_post("/messages", api.post_message)
    for path in READS:
        app.router.add_get(path, api.read)
    app.router.add_delete("/colony/dead_letters", api.drain_dead_letters)
    app.router.add_get("/colony/dead_letters/{id}", api.dead_letter)
    app.router.add_post("/colony/dead_letters/{id}/replay", api.replay)
    app.router.add_post("/colony/cells/revive", api.revive)
    app.router.add_get("/colony/events", api.events)
    app.router.add_get("/metrics", api.metrics)
    for (method, path), route in (extra_routes or {}).items():

        async def bound(
            request: web.Request,
            route: Callable[[Colony, web.Request], Awaitable[web.Response]] = route,
        ) -> web.Response:
            return await route(colony, request)

        app.router.add_route(method, path, bound)
    add_routes(app)
    return app


async def serve(app: web.Application, host: str, port: int) -> web.AppRunner:
    """Start serving; returns the runner (call ``cleanup()`` to stop)."""
    runner = web.AppRunner(app, access_log=None, max_line_size=MAX_REQUEST_LINE)
    await runner.setup()
    site = GuardedSite(runner, host, port, app[CONNECTIONS_KEY])
    await site.start()
    return runner
