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
* connections are accepted by :class:`_Listener`, not the event loop's server: a failed
  ``accept()`` (the process is out of file descriptors) pauses accepting briefly and is
  logged once per :data:`ACCEPT_LOG_EVERY_S` with a count, not once per attempt.

The in-flight byte bound of request bodies is kept by :class:`InFlight`.
"""

from __future__ import annotations

import asyncio
import resource
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from aiohttp import web

from colony.config.models import ColonyConfig
from colony.errors import ColonyError
from colony.observability import Logger

ACCEPT_LOG_EVERY_S = 10.0
"""A failed ``accept()`` (out of descriptors) is logged at most this often, with a count."""
ACCEPT_RETRY_S = 0.1
"""How long accepting pauses after a failed ``accept()``."""
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

    @classmethod
    def of(cls, config: ColonyConfig) -> ServerLimits:
        """The bounds ``colony.json`` sets (its ``api_*`` keys), the rest at their defaults."""
        connections = config.api_max_connections
        return cls(
            header_timeout_s=config.api_header_timeout_ms / 1000,
            body_timeout_s=config.api_body_timeout_ms / 1000,
            max_inflight_bytes=config.api_inflight_max_bytes,
            **({} if connections is None else {"max_connections": connections}),
        )


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

    def __init__(self, limits: ServerLimits, log: Logger) -> None:
        self.limits = limits
        self.log = log
        self.by_transport: dict[asyncio.BaseTransport, _Guarded] = {}
        self.refused = 0
        self._refused_logged = 0.0
        self.accept_failures = 0
        self._accept_logged = 0.0
        self._accept_folded = 0

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

    def accept_failed(self, exc: OSError) -> None:
        """Log a failed ``accept()`` once per :data:`ACCEPT_LOG_EVERY_S`, with how many
        failures the line stands for."""
        self.accept_failures += 1
        now = time.monotonic()
        if self._accept_logged and now - self._accept_logged < ACCEPT_LOG_EVERY_S:
            self._accept_folded += 1
            return
        self.log.warning(
            "api_accept_failed",
            error=exc.strerror or str(exc),
            errno=exc.errno,
            folded=self._accept_folded,
            detail="the API could not accept a connection (out of file descriptors or "
            "memory); it retries every 0.1 s; raise the open-file limit or lower the load",
        )
        self._accept_logged = now
        self._accept_folded = 0


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
        # A stream transport, though not always an asyncio.Transport subclass: uvloop's TCP
        # transport has the same methods and no such base (an isinstance check refused it).
        stream = cast(asyncio.Transport, transport)
        self._transport = stream
        book = self._book
        if len(book.by_transport) >= book.limits.max_connections:
            body = (
                b'{"error":"too_many_connections","detail":"the API holds its maximum of '
                b'open connections; retry shortly"}'
            )
            stream.write(_REFUSAL % (len(body), body))
            stream.close()
            book.note_refused()
            return
        book.by_transport[stream] = self
        self._inner = self._server()
        self._arm(book.limits.header_timeout_s)
        self._inner.connection_made(stream)

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
    """A TCP site whose connections go through :class:`Connections`, accepted by our own
    loop (:class:`_Listener`) rather than the event loop's server."""

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
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        sock = socket.create_server((self._host, self._port), family=family, backlog=self._backlog)
        sock.setblocking(False)
        self._server = _Listener(sock, lambda: self._book.protocol(server), self._book)


class _Listener(asyncio.AbstractServer):
    """Accepts connections on one listening socket, for :class:`GuardedSite`.

    asyncio's own server (3.11) answers ``EMFILE`` by scheduling a retry *per pending
    connection* and logging a traceback each time, so at the file-descriptor limit the retries
    multiply and stderr floods (thousands of lines a second); here a failed ``accept()`` waits
    :data:`ACCEPT_RETRY_S` and is logged once per :data:`ACCEPT_LOG_EVERY_S`."""

    def __init__(
        self, sock: socket.socket, protocol: Callable[[], asyncio.Protocol], book: Connections
    ) -> None:
        self._sock = sock
        self._protocol = protocol
        self._book = book
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task[None] | None = self._loop.create_task(self._accept())

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return () if self._task is None else (self._sock,)

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
            self._sock.close()

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def is_serving(self) -> bool:
        return self._task is not None

    async def start_serving(self) -> None:
        return None

    async def serve_forever(self) -> None:
        if self._task is not None:
            await self._task

    async def wait_closed(self) -> None:
        return None

    async def _accept(self) -> None:
        loop = self._loop
        while True:
            try:
                conn, _ = await loop.sock_accept(self._sock)
            except OSError as exc:
                self._book.accept_failed(exc)
                await asyncio.sleep(ACCEPT_RETRY_S)
                continue
            try:
                await loop.connect_accepted_socket(self._protocol, conn)
            except OSError as exc:
                conn.close()
                self._book.accept_failed(exc)


async def read_body(request: web.Request, limits: ServerLimits) -> bytes:
    """The whole request body, or 408 ``body_timeout`` if it does not arrive in time (the
    connection is then closed: what is left of the body is never read)."""
    try:
        async with asyncio.timeout(limits.body_timeout_s):
            return await request.read()
    except TimeoutError:
        raise BodyTimeout(limits.body_timeout_s) from None


class BodyTimeout(ColonyError):
    """A request body that did not arrive in time (408); the connection is then closed."""

    code = "body_timeout"

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the request body did not arrive within {seconds:g} s")
        self.detail = str(self)
