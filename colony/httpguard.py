"""What a client can hold of the HTTP API: connections, time and bytes, each bounded.

aiohttp reads headers and bodies for as long as a client cares to trickle them, takes every
connection the kernel hands it, and the event loop logs every failed ``accept()`` with a
traceback. So the API is served through :class:`GuardedSite`, whose connections are
:class:`_Guarded` protocols wrapping aiohttp's own:

* at most :attr:`ServerLimits.max_connections` at once; one more is answered ``503`` with
  ``Retry-After`` and closed before a byte of it is read (so also before any token check);
* a request head must arrive whole within :attr:`ServerLimits.header_timeout_s` of the
  connection opening or of the previous answer (an idle keep-alive connection is closed after
  the same time); a body must arrive within :attr:`ServerLimits.body_timeout_s`
  (:func:`read_body`, 408), an answer must be taken within ``write_timeout_s``;
* failed ``accept()`` calls (the process is out of file descriptors) are logged once per
  :data:`ACCEPT_LOG_EVERY_S` with a count, not once per attempt.

The in-flight byte bound of request bodies is kept by :class:`InFlight`.
"""

from __future__ import annotations

import asyncio
import errno
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

ACCEPT_LOG_EVERY_S = 10.0
_ACCEPT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"Content-Type: application/json\r\n"
    b"Retry-After: 1\r\n"
    b"Connection: close\r\n"
    b"Content-Length: %d\r\n\r\n%s"
)


def _default_connections() -> int:
    """A quarter of the file descriptors the process may open (cells, pipes and colony.db
    need the rest), between 16 and 1024."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1024
    return max(16, min(1024, soft // 4))


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """The API's bounds. The defaults suit a daemon on a workstation or a small server."""

    header_timeout_s: float = 10.0
    """A request head (request line and headers) must arrive whole within this."""
    body_timeout_s: float = 30.0
    """A request body must arrive whole within this (10 MiB at 350 KB/s)."""
    write_timeout_s: float = 60.0
    """An answer must be taken by the client within this."""
    max_connections: int = field(default_factory=_default_connections)
    """Open connections at once; more are answered 503 and closed."""
    max_inflight_bytes: int = 64 * 1024 * 1024
    """Request bodies being read or handled at once, in bytes; past it a request with a body
    is answered 429 with ``Retry-After`` (each body is at most 10 MiB, so 64 MiB is six
    large posts at once, or thousands of small ones)."""
    retry_after_s: int = 1
    """What ``Retry-After`` says when the API itself sheds load."""


class InFlight:
    """Bytes of request bodies the API holds right now."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.held = 0

    def take(self, nbytes: int) -> bool:
        """Reserve ``nbytes``; False (nothing reserved) when that would pass the bound. One
        request alone is always let in, so a bound below the body cap refuses nothing whole."""
        if self.held and self.held + nbytes > self.bound:
            return False
        self.held += nbytes
        return True

    def give(self, nbytes: int) -> None:
        self.held -= nbytes


class Connections:
    """The open connections of one server, and the request each is on."""

    def __init__(self, limits: ServerLimits, log: Any) -> None:
        self.limits = limits
        self.log = log
        self.by_transport: dict[asyncio.BaseTransport, _Guarded] = {}
        self.refused = 0
        self._refused_logged = 0.0

    def protocol(self, server: Callable[[], asyncio.Protocol]) -> asyncio.Protocol:
        return _Guarded(self, server)

    def guard_of(self, request: web.BaseRequest) -> _Guarded | None:
        transport = request.transport
        return None if transport is None else self.by_transport.get(transport)

    def note_refused(self) -> None:
        self.refused += 1
        now = time.monotonic()
        if now - self._refused_logged >= ACCEPT_LOG_EVERY_S:
            self._refused_logged = now
            self.log.warning(
                "api_connection_refused",
                open=len(self.by_transport),
                max_connections=self.limits.max_connections,
                refused_so_far=self.refused,
                detail="the API holds its maximum of connections; more are answered 503 "
                "until some close",
            )


class _Guarded(asyncio.Protocol):
    """aiohttp's protocol for one connection, behind a connection cap and a head deadline."""

    def __init__(self, book: Connections, server: Callable[[], asyncio.Protocol]) -> None:
        self._book = book
        self._server = server
        self._inner: asyncio.Protocol | None = None
        self._transport: asyncio.Transport | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._busy = 0
        self.timed_out = False

    # -- the connection ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        book = self._book
        if len(book.by_transport) >= book.limits.max_connections:
            body = (
                b'{"error":"too_many_connections","detail":"the API holds its maximum of '
                b'open connections; retry shortly"}'
            )
            transport.write(_REFUSAL % (len(body), body))
            transport.close()
            book.note_refused()
            return
        book.by_transport[transport] = self
        self._inner = self._server()
        self._arm(book.limits.header_timeout_s)
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._inner is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else None

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._transport is not None:
            self._book.by_transport.pop(self._transport, None)
        if self._inner is not None:
            self._inner.connection_lost(exc)

    # -- requests on it (called by the API's middleware) -------------------------------------

    def request_started(self) -> None:
        """A head arrived whole: its deadline no longer applies."""
        self._busy += 1
        self._disarm()

    def request_finished(self) -> None:
        """The answer was written: the next head (or the close) is due in time."""
        self._busy -= 1
        if self._busy == 0:
            self._arm(self._book.limits.header_timeout_s)

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = asyncio.get_running_loop().call_later(seconds, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if self._busy == 0 and self._transport is not None:
            self.timed_out = True
            self._transport.close()


class GuardedSite(web.BaseSite):
    """A TCP site whose connections go through :class:`Connections`."""

    __slots__ = ("_book", "_host", "_port")

    def __init__(self, runner: web.BaseRunner, host: str, port: int, book: Connections) -> None:
        super().__init__(runner)
        self._host = host
        self._port = port
        self._book = book

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: self._book.protocol(server), self._host, self._port, backlog=self._backlog
        )


def rate_limit_accept_errors(loop: asyncio.AbstractEventLoop, log: Any) -> None:
    """Route the loop's "accept() out of system resource" reports to one WARN line per
    :data:`ACCEPT_LOG_EVERY_S` (with how many were folded in); everything else goes to the
    handler that was there before. Idempotent per loop."""
    previous = loop.get_exception_handler()
    if getattr(previous, "_accept_rate_limited", False):
        return
    state = {"last": 0.0, "folded": 0}

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in _ACCEPT_ERRNOS:
            now = time.monotonic()
            if now - state["last"] < ACCEPT_LOG_EVERY_S:
                state["folded"] += 1
                return
            log.warning(
                "api_accept_failed",
                error=exc.strerror or str(exc),
                errno=exc.errno,
                folded=state["folded"],
                detail="the process is out of file descriptors (or memory); the API retries "
                "accepting every second; raise the open-file limit or lower the load",
            )
            state["last"] = now
            state["folded"] = 0
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    handler._accept_rate_limited = True  # type: ignore[attr-defined]
    loop.set_exception_handler(handler)


async def read_body(request: web.Request, limits: ServerLimits) -> bytes:
    """The whole request body, or 408 ``body_timeout`` if it does not arrive in time (the
    connection is then closed: what is left of the body is never read)."""
    try:
        async with asyncio.timeout(limits.body_timeout_s):
            return await request.read()
    except TimeoutError:
        raise BodyTimeout(limits.body_timeout_s) from None


class BodyTimeout(Exception):
    def __init__(self, seconds: float) -> None:
        super().__init__(f"the request body did not arrive within {seconds:g} s")
        self.detail = str(self)
