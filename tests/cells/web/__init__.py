"""Helpers for the web cells' tests: a scriptable HTTP/1.1 server on loopback, resolvers that
map test host names, and calls.

Every server here listens on 127.0.0.1 (or ::1) and every test host name resolves to
loopback or to an address the cell refuses before connecting: no test sends a packet
anywhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from cells.web.ssrf import IpAddress


@dataclass
class Request:
    """One request the server received."""

    method: str
    target: str
    headers: dict[str, str]
    """Lower-cased names."""
    sni: str | None = None


@dataclass
class Reply:
    """What the server answers."""

    status: int = 200
    headers: Sequence[tuple[str, str]] = ()
    body: bytes = b""
    stream: Callable[[], AsyncIterator[bytes]] | None = None
    """Chunks sent instead of ``body`` (with ``Content-Length: length`` when given, else
    chunked)."""
    length: int | None = None
    hang: bool = False
    """Never answer (for timeouts)."""


Handler = Callable[[Request], Reply | Awaitable[Reply]]


def reason(status: int) -> str:
    return {200: "OK", 301: "Moved Permanently", 302: "Found", 404: "Not Found"}.get(status, "X")


class LocalServer:
    """An HTTP/1.1 server on loopback answering every request with ``handler(request)``;
    one request per connection. ``sent`` counts the body bytes it managed to write."""

    def __init__(
        self, handler: Handler, *, host: str = "127.0.0.1", tls: ssl.SSLContext | None = None
    ) -> None:
        self.handler = handler
        self.host = host
        self.tls = tls
        self.requests: list[Request] = []
        self.sent = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._sni: str | None = None
        self._port: int | None = None
        if tls is not None:
            tls.sni_callback = self._remember_sni

    def _remember_sni(self, sock: Any, name: str | None, context: Any) -> None:
        self._sni = name

    @property
    def port(self) -> int:
        assert self._port is not None, "the server is not started"
        return self._port

    def url(self, path: str = "/", *, host: str | None = None, scheme: str | None = None) -> str:
        name = host or (f"[{self.host}]" if ":" in self.host else self.host)
        return f"{scheme or ('https' if self.tls else 'http')}://{name}:{self.port}{path}"

    async def __aenter__(self) -> LocalServer:
        self._server = await asyncio.start_server(self._serve, self.host, 0, ssl=self.tls)
        self._port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
                await self._exchange(reader, writer)
        finally:
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, ssl.SSLError, asyncio.CancelledError):
                await writer.wait_closed()

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        line, *lines = head.split("\r\n")
        method, target, _version = line.split(" ", 2)
        headers = {}
        for raw in lines:
            if raw:
                name, value = raw.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        request = Request(method, target, headers, self._sni)
        self.requests.append(request)
        answer = self.handler(request)
        reply = await answer if isinstance(answer, Awaitable) else answer
        if reply.hang:
            await asyncio.Event().wait()
        out = [f"HTTP/1.1 {reply.status} {reason(reply.status)}"]
        out += [f"{name}: {value}" for name, value in reply.headers]
        chunked = reply.stream is not None and reply.length is None
        if reply.stream is None:
            out.append(f"Content-Length: {len(reply.body)}")
        elif chunked:
            out.append("Transfer-Encoding: chunked")
        else:
            out.append(f"Content-Length: {reply.length}")
        out.append("Connection: close")
        writer.write(("\r\n".join(out) + "\r\n\r\n").encode("latin-1"))
        if reply.stream is None:
            writer.write(reply.body)
            self.sent += len(reply.body)
        else:
            async for chunk in reply.stream():
                writer.write(b"%x\r\n%b\r\n" % (len(chunk), chunk) if chunked else chunk)
                await writer.drain()
                self.sent += len(chunk)
            if chunked:
                writer.write(b"0\r\n\r\n")
        await writer.drain()


def fixed(reply: Reply) -> Handler:
    return lambda request: reply


def redirect(location: str, status: int = 302) -> Reply:
    return Reply(status, [("Location", location)])


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


@dataclass
class MapResolver:
    """A resolver from a table of test names; records every lookup. A name it lacks fails
    like an unknown host (no real lookup ever happens)."""

    table: Mapping[str, Sequence[str]]
    lookups: list[str] = field(default_factory=list)

    async def __call__(self, host: str, port: int) -> list[IpAddress]:
        self.lookups.append(host)
        if host not in self.table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [ipaddress.ip_address(a) for a in self.table[host]]


def call(args: Any, call_id: str | None = "call-1") -> dict[str, Any]:
    """A body with one tool_call whose text is ``args`` as JSON."""
    turn: dict[str, Any] = {"origin": "assistant", "type": "tool_call", "text": json.dumps(args)}
    if call_id is not None:
        turn["id"] = call_id
    return {"messages": [turn]}


def turn_of(content: Mapping[str, Any]) -> dict[str, Any]:
    (turn,) = content["messages"]
    assert (turn["origin"], turn["type"]) == ("tool", "tool_result")
    result: dict[str, Any] = turn
    return result


def error_of(content: Mapping[str, Any]) -> tuple[str, str]:
    """``(error_code, text)`` of an error reply (checking its shape)."""
    header = content["header"]
    assert header["finish_reason"] == "error"
    assert isinstance(header["duration_ms"], int)
    return header["error_code"], turn_of(content)["text"]
