"""The ``mcp`` cell: an MCP server's tools as a tool cell of the colony.

Long-running. ``run(ctx)`` holds the connection to the server — a child process (``stdio``),
a Streamable HTTP session (``streamable_http``), or nothing at all (``http``, meclaw's one
POST per request) — and discovers its tools: at start, and again whenever the server sends
``notifications/tools/list_changed``. The tools are cached in ``cell.db``; with
``offer_tools`` the listing is also emitted as a ``system.tools`` write for llm cells.

``handle(message)`` answers one tool call with one ``tool_result`` on the call's id, header
``mcp_tool``, ``duration_ms`` and on failure ``error_code`` (never ``finish_reason``). The
cell type handles messages concurrently (:attr:`colony.cell.CellType.handles_concurrently`):
MCP multiplexes requests by id, so a slow tool holds only its own call.

A stdio server that dies fails every open call with ``mcp_error`` naming how it ended, then
``run`` raises: the colony restarts the cell (a new server process) under its restart limit.
A Streamable HTTP session that breaks fails the call that found it broken; the next call opens
a new session. Each connect and discovery is reported to ``/health`` (``spec.io``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from mcp import ClientSession, types
from mcp.client.session import IncomingMessage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from cells.cellfile import QueryTimeoutError
from cells.mcp.cache import ToolCache
from cells.mcp.jsonrpc import JsonRpcClient, RpcError
from cells.mcp.params import McpParams, update_problem
from cells.mcp.stdio import ServerProcess
from cells.mcp.wire import (
    LIST_TOOLS,
    UNKNOWN_TOOL,
    listing,
    parse_call,
    redacted,
    reply,
    result_text,
    shown_url,
)
from cells.toolcall import ToolCallError
from colony.cell import CellContext, CellSpec, Emission, birth_params
from colony.envelope import Envelope, JsonObject

__all__ = ["McpCell", "ServerDiedError"]

CLIENT_INFO = types.Implementation(name="colony-mcp-cell", version="0.1.0")
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 60.0
DISCOVERY_GAP_S = 1.0
"""At least this long between two discoveries: ``list_changed`` notifications in between are
one more discovery, not one each."""
MAX_PAGES = 100
"""``tools/list`` pages followed at most in one discovery."""


class ServerDiedError(Exception):
    """The stdio server is gone: the cell restarts with a new one."""


class PagingError(Exception):
    """A ``tools/list`` pagination that would not end."""


class LinkError(Exception):
    """A call the server could not answer (``mcp_error``); ``text`` says why."""


def _describe(exc: BaseException) -> str:
    """One line for an exception, looking inside exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return f"rpc {exc.error.code}: {exc.error.message}"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def _first(*events: asyncio.Event) -> None:
    """Wait until one of ``events`` is set."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


def _closed(exc: BaseException | None) -> bool:
    return isinstance(exc, MCPError) and exc.error.code == types.CONNECTION_CLOSED


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Mark a task's outcome seen (a cancelled opening may still end in an error)."""
    if not task.cancelled():
        task.exception()


def _dump(model: Any) -> JsonObject:
    dumped: JsonObject = model.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dumped


class McpCell:
    def __init__(self, spec: CellSpec) -> None:
        params = birth_params(McpParams, spec)
        self.params = params
        self.path = spec.path
        self.log = spec.log
        self.leader = spec.leader
        self.lease = f"mcp:{spec.path}"
        self.io = None if spec.io is None else spec.io.task(spec.path, "mcp_server")
        self.cache = ToolCache(spec.state)
        overlay = self.cache.overlay_values()
        self.external_timeout_ms: int = overlay.get(
            "external_timeout_ms", params.external_timeout_ms
        )
        self.query_timeout_ms: int = overlay.get("query_timeout_ms", params.query_timeout_ms)
        self.tools: list[JsonObject] = []
        self._discovered_once = False
        self._cache_written = False
        """The cache holds ``tools`` (a failed write is retried at the next discovery)."""
        self._last_discovery = 0.0
        self.pid: int | None = None
        """The stdio server's process id while it runs."""
        self._ctx: CellContext | None = None
        self._session: ClientSession | None = None
        self._ready = asyncio.Event()
        """A session (or, on http, the client) is there to call through."""
        self._changed = asyncio.Event()
        self._broken = asyncio.Event()
        self._dead = asyncio.Event()
        self._dead_text = ""
        self._wanted = asyncio.Event()
        self._attempt: asyncio.Future[str | None] | None = None
        self._rpc: JsonRpcClient | None = None
        self._server: ServerProcess | None = None
        self._calls = 0
        self._idle = asyncio.Event()
        self._idle.set()
        if params.sandbox is not None:
            self._log(
                "warning",
                "mcp_sandbox_not_enforced",
                detail="params.sandbox is set, but this build has no process sandbox: the MCP "
                "server runs with the daemon's rights",
            )

    # -- logging and health ----------------------------------------------------------------

    def _log(self, level: str, event: str, **fields: Any) -> None:
        if self.log is not None:
            getattr(self.log, level)(event, cell=self.path, **fields)

    def _failed(self, kind: str, text: str, event: str, level: str = "warning") -> None:
        if self.io is not None:
            self.io.failed(kind, text)
        self._log(level, event, error=text, transport=self.params.kind)

    # -- the I/O loop ------------------------------------------------------------------------

    async def run(self, ctx: CellContext) -> None:
        self._ctx = ctx
        kind = self.params.kind
        if kind == "stdio":
            await self._run_stdio()
        elif kind == "streamable_http":
            await self._run_streamable()
        else:
            await self._run_http()

    async def _run_http(self) -> None:
        """meclaw's form: ``initialize`` and ``tools/list`` until they answer, then park (each
        call is a POST of its own)."""
        endpoint = self.params.endpoint
        assert endpoint is not None
        self._rpc = rpc = JsonRpcClient(endpoint, self.params.bearer)
        self._ready.set()
        delay = 0.0
        while True:
            started = time.monotonic()
            try:
                async with asyncio.timeout(self.external_timeout_ms / 1000):
                    await rpc.initialize()
                    tools = await rpc.list_tools()
            except (RpcError, TimeoutError) as exc:
                text = _describe(exc) if not isinstance(exc, TimeoutError) else self._no_answer()
                delay = BACKOFF_FIRST_S if delay == 0 else min(delay * 2, BACKOFF_MAX_S)
                text = redacted(f"{shown_url(endpoint)}: {text}", endpoint)
                self._failed("discovery", text, "mcp_discovery_failed")
                await asyncio.sleep(delay)
                continue
            await self._discovered(tools, started)
            break
        await asyncio.Event().wait()

    async def _run_stdio(self) -> None:
        p = self.params
        assert p.command is not None
        try:
            server = await ServerProcess.spawn(
                p.command, p.args, p.env, p.cwd, log=self.log, path=self.path
            )
        except (OSError, ValueError) as exc:
            text = f"the MCP server could not be started ({p.command}): {_describe(exc)}"
            self._failed("start", text, "mcp_server_start_failed", "error")
            raise ServerDiedError(text) from None
        self._server, self.pid = server, server.pid
        self._log("info", "mcp_server_started", pid=server.pid, command=p.command)
        ended = asyncio.create_task(server.ended(max(p.kill_grace_ms / 1000, 0.5)))
        text = "the mcp cell was closed"
        died = False
        try:
            text, died = await self._serve_stdio(server, ended)
        finally:
            # Every way the server's run ends fails the open and waiting calls at once.
            self._dead_text = self._dead_text or text
            self._dead.set()
            self._ready.clear()
            self._session = None
            if not ended.done():
                ended.cancel()
            await server.stop(p.kill_grace_ms)
        if died:
            self._failed("exit", text, "mcp_server_died", "error")
        else:
            self._failed("start", text, "mcp_server_start_failed", "error")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):
                await self._idle.wait()  # every open call has its mcp_error
        raise ServerDiedError(text)

    async def _serve_stdio(
        self, server: ServerProcess, ended: asyncio.Task[str]
    ) -> tuple[str, bool]:
        """Initialize and follow the server until it ends: how it ended, and whether it died
        (False: it did not initialize)."""
        async with ClientSession(
            server.read_stream,
            server.write_stream,
            message_handler=self._on_message,
            client_info=CLIENT_INFO,
        ) as session:
            opened = asyncio.create_task(self._open(session), name=f"mcp-open {self.path}")
            try:
                await asyncio.wait({opened, ended}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not opened.done():
                    # Also when run is cancelled here: no offer from an instance that is gone.
                    opened.cancel()
                    opened.add_done_callback(_retrieve)
            if opened.done() and not opened.cancelled():
                failure = opened.exception()
                if _closed(failure):
                    return await ended, True  # the output closed: the exit says why
                if failure is not None and not ended.done():
                    return f"the MCP server did not initialize: {_describe(failure)}", False
            if not ended.done():
                await self._follow(session, ended)
            return ended.result(), True

    async def _run_streamable(self) -> None:
        """One session at a time; a broken one is reopened by the next call that needs it
        (or by the backoff, after a failed attempt)."""
        delay = 0.0
        self._wanted.set()
        while True:
            failure = await self._streamable_session()
            if failure is None:  # (an opened session settled its attempt when it opened)
                delay = 0.0
                await self._wanted.wait()
            else:
                self._settle_attempt(failure)
                delay = BACKOFF_FIRST_S if delay == 0 else min(delay * 2, BACKOFF_MAX_S)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._wanted.wait()
            self._wanted.clear()

    async def _streamable_session(self) -> str | None:
        """Open a session and keep it until it breaks: None, or why it could not be opened."""
        endpoint = self.params.endpoint
        assert endpoint is not None
        headers = {"Authorization": f"Bearer {self.params.bearer}"} if self.params.bearer else None
        up = False
        try:
            async with (
                create_mcp_http_client(headers=headers) as client,
                streamable_http_client(endpoint, http_client=client) as (read, write),
                ClientSession(
                    read, write, message_handler=self._on_message, client_info=CLIENT_INFO
                ) as session,
            ):
                await self._open(session)
                up = True
                self._settle_attempt(None)
                await self._follow(session, None)
        except Exception as exc:
            text = redacted(f"{shown_url(endpoint)}: {_describe(exc)}", endpoint)
            kind = "session" if up else "connect"
            self._failed(kind, text, "mcp_session_lost" if up else "mcp_connect_failed")
            return None if up else text
        finally:
            self._session = None
            self._ready.clear()
            self._broken.clear()
        return None

    def _settle_attempt(self, failure: str | None) -> None:
        """Hand the calls waiting for a session this attempt's outcome; they want no other
        (calls arriving during an attempt share it, not start one each after it)."""
        self._wanted.clear()
        attempt, self._attempt = self._attempt, None
        if attempt is not None and not attempt.done():
            attempt.set_result(failure)

    async def _open(self, session: ClientSession) -> None:
        """``initialize``, then the first discovery; the session takes calls from then on."""
        async with asyncio.timeout(self.external_timeout_ms / 1000):
            await session.initialize()
        self._session = session
        self._ready.set()
        if self.io is not None:
            self.io.succeeded()
        await self._discover(session)

    async def _follow(self, session: ClientSession, ended: asyncio.Task[str] | None) -> None:
        """Discover again on every ``list_changed`` until the server ends or the session
        breaks."""
        while True:
            waits: set[asyncio.Future[Any]] = {
                asyncio.ensure_future(self._changed.wait()),
                asyncio.ensure_future(self._broken.wait()),
            }
            if ended is not None:
                waits.add(ended)
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    if w is not ended:
                        w.cancel()
            if (ended is not None and ended.done()) or self._broken.is_set():
                return
            gap = self._last_discovery + DISCOVERY_GAP_S - time.monotonic()
            if gap > 0 and await self._ends_within(gap, ended):
                return
            self._changed.clear()
            await self._discover(session)

    async def _ends_within(self, seconds: float, ended: asyncio.Task[str] | None) -> bool:
        """Wait ``seconds`` (notifications meanwhile join the next discovery); True when the
        server ends or the session breaks first."""
        broken = asyncio.ensure_future(self._broken.wait())
        waits: set[asyncio.Future[Any]] = {broken} if ended is None else {broken, ended}
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            broken.cancel()
        return (ended is not None and ended.done()) or self._broken.is_set()

    async def _discover(self, session: ClientSession) -> None:
        started = self._last_discovery = time.monotonic()
        try:
            async with asyncio.timeout(self.external_timeout_ms / 1000):
                tools: list[JsonObject] = []
                cursor: str | None = None
                seen: set[str] = set()
                while True:
                    page = await session.list_tools(
                        params=None
                        if cursor is None
                        else types.PaginatedRequestParams(cursor=cursor)
                    )
                    tools += [_dump(t) for t in page.tools]
                    cursor = page.next_cursor
                    if not cursor:
                        break
                    if cursor in seen:
                        raise PagingError(f"the server repeated the cursor {cursor[:100]!r}")
                    seen.add(cursor)
                    if len(seen) >= MAX_PAGES:
                        raise PagingError(f"more than {MAX_PAGES} pages")
        except (TimeoutError, MCPError, ValidationError, PagingError) as exc:
            text = self._no_answer() if isinstance(exc, TimeoutError) else _describe(exc)
            self._failed("discovery", f"tools/list: {text}", "mcp_discovery_failed")
            return
        await self._discovered(tools, started)

    async def _discovered(self, tools: list[JsonObject], started: float) -> None:
        """Keep the tools (memory and cell.db) and offer them when asked to."""
        duration_ms = int((time.monotonic() - started) * 1000)
        if self.io is not None:
            self.io.succeeded()  # the server answered, whether or not its list changed
        changed = not self._discovered_once or tools != self.tools
        if not changed:
            self._log("debug", "mcp_tools_unchanged", tools=len(tools))
            if self._cache_written:
                return  # nothing to write or offer again
        self._discovered_once = True
        self.tools = tools
        if changed:
            self._log("info", "mcp_tools_discovered", tools=[t.get("name") for t in tools])
        try:
            self.cache.replace(tools, self.query_timeout_ms)
            self._cache_written = True
        except QueryTimeoutError as exc:
            self._cache_written = False
            self._log(
                "warning", "mcp_cache_write_failed", error_code="query_timeout", error=str(exc)
            )
        if changed and self.params.offer_tools and self._ctx is not None:
            if self.leader is not None and not await self.leader.lead(self.lease):
                return  # another node of the cluster offers them
            offer, skipped = listing(self.path, tools, duration_ms)
            if skipped:
                self._log(
                    "warning",
                    "mcp_tools_not_offered",
                    tools=skipped,
                    detail="left out of the offer to llm cells; still callable by name",
                )
            del offer["messages"]  # a system-only write: an llm cell takes it in silently
            await self._ctx.emit(offer)

    async def _on_message(self, message: IncomingMessage) -> None:
        """Server notifications: a changed tool list is discovered again (by the I/O loop:
        a request from inside the session's reader would wait for itself)."""
        if isinstance(message, types.ToolListChangedNotification):
            self._changed.set()
        elif isinstance(message, Exception):
            self._log("debug", "mcp_transport_noise", error=_describe(message))

    def _no_answer(self) -> str:
        return f"no answer within external_timeout_ms ({self.external_timeout_ms} ms)"

    # -- messages --------------------------------------------------------------------------

    async def handle(self, message: Envelope) -> list[Emission] | None:
        target = message.reply_to or self.path
        body = message.body
        if isinstance(body, dict) and "params" in body:
            problem = self._update_params(body["params"])
            if problem is None:
                return None
            code, text = problem
            self._log("warning", "mcp_params_refused", error_code=code, detail=text)
            return [Emission(reply("__params__", 0, text, None, code), target)]
        self._calls += 1
        self._idle.clear()
        try:
            return [Emission(await self._answer(body), target)]
        finally:
            self._calls -= 1
            if not self._calls:
                self._idle.set()

    async def _answer(self, body: Any) -> JsonObject:
        started = time.monotonic()

        def took() -> int:
            return int((time.monotonic() - started) * 1000)

        try:
            call = parse_call(body, self.params.tool)
        except ToolCallError as exc:
            self._log("warning", "mcp_call_failed", error_code="invalid_input", detail=exc.text)
            return reply(UNKNOWN_TOOL, took(), exc.text, exc.call_id, "invalid_input")
        if call.name == LIST_TOOLS and self.params.tool is None:
            try:
                tools = self.cache.tools(self.query_timeout_ms)
            except QueryTimeoutError as exc:
                self._log("warning", "mcp_call_failed", error_code="query_timeout", detail=str(exc))
                return reply(LIST_TOOLS, took(), str(exc), call.id, "query_timeout")
            return listing(self.path, tools, took()).message
        code: str | None
        try:
            async with asyncio.timeout(self.external_timeout_ms / 1000):
                result = await self._call(call.name, call.arguments)
            text = result_text(result)
            code = "mcp_error" if result.get("isError") else None
        except TimeoutError:
            text, code = self._no_answer(), "provider_timeout"
        except LinkError as exc:
            endpoint = self.params.endpoint
            text, code = str(exc) if endpoint is None else redacted(str(exc), endpoint), "mcp_error"
        if code is not None:
            self._log("warning", "mcp_call_failed", tool=call.name, error_code=code, detail=text)
        return reply(call.name, took(), text, call.id, code)

    async def _call(self, name: str, arguments: JsonObject) -> JsonObject:
        """``tools/call`` on this cell's transport: the result in the wire form, or
        :class:`LinkError`."""
        if self._rpc is not None:
            try:
                return await self._rpc.call_tool(name, arguments)
            except RpcError as exc:
                raise LinkError(str(exc)) from None
        session = await self._session_for_call()
        return await self._through(session, lambda: session.call_tool(name, arguments))

    async def _session_for_call(self) -> ClientSession:
        if self._dead.is_set():
            raise LinkError(self._dead_text)
        if self._session is not None:
            return self._session
        if self.params.kind == "streamable_http":
            if self._attempt is None:
                self._attempt = asyncio.get_running_loop().create_future()
            attempt = self._attempt
            self._wanted.set()
            failure = await asyncio.shield(attempt)
            if failure is not None:
                raise LinkError(f"the MCP server cannot be reached: {failure}")
        else:
            await _first(self._ready, self._dead)
            if self._dead.is_set():
                raise LinkError(self._dead_text)
        if self._session is None:
            raise LinkError(self._dead_text or "the MCP session is closed")
        return self._session

    async def _through(
        self, session: ClientSession, request: Callable[[], Awaitable[Any]]
    ) -> JsonObject:
        """Run ``request`` on ``session``, failing it as soon as a stdio server dies."""
        call = asyncio.ensure_future(request())
        dead = asyncio.ensure_future(self._dead.wait())
        try:
            await asyncio.wait({call, dead}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            dead.cancel()
            if not call.done():
                call.cancel()
        if not call.done() or call.cancelled():
            raise LinkError(self._dead_text)
        exc = call.exception()
        if exc is None:
            return _dump(call.result())
        if _closed(exc):
            if self.params.kind == "stdio":
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.params.kill_grace_ms / 1000 + 1):
                        await self._dead.wait()
                raise LinkError(self._dead_text or "the MCP server closed the connection")
            self._broken.set()
        elif self.params.kind == "streamable_http" and not isinstance(exc, MCPError):
            self._broken.set()  # the transport failed under the session
        elif isinstance(exc, MCPError) and "Session terminated" in exc.error.message:
            self._broken.set()  # the server forgot the session (it restarted)
        raise LinkError(_describe(exc))

    def _update_params(self, update: Any) -> tuple[str, str] | None:
        problem = update_problem(update)
        if problem is not None:
            return "invalid_input", problem
        try:
            self.cache.save_overlay(update, self.query_timeout_ms)
        except QueryTimeoutError as exc:
            return "query_timeout", f"params write: {exc}"
        self.external_timeout_ms = update.get("external_timeout_ms", self.external_timeout_ms)
        self.query_timeout_ms = update.get("query_timeout_ms", self.query_timeout_ms)
        self._log("info", "mcp_params_updated", keys=sorted(update))
        return None

    # -- lifecycle -------------------------------------------------------------------------

    async def close(self) -> None:
        try:
            if self.leader is not None and self.params.offer_tools:
                await self.leader.resign(self.lease)
            if self._server is not None:
                await self._server.stop(self.params.kill_grace_ms)
            if self._rpc is not None:
                await self._rpc.close()
        finally:
            self.cache.close()
