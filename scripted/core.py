"""Scripted LLM provider servers: real HTTP on loopback, answers read from a script.

Tests and the offline demo point the ``llm`` cell at one of these instead of a mock object, so
the real client code (httpx, retries, timeouts, keep-alive, error parsing) runs unchanged while
no byte ever leaves 127.0.0.0/8::

    async with ScriptedOpenAI([tool_calls_reply([("call_1", "search", {"q": "x"})]),
                               error_status(429, retry_after=0.1),
                               text_reply("done")]) as provider:
        ...  # configure the llm cell with base_url=provider.url
        assert provider.served == 3
        provider.requests[0]["messages"]   # what the client really sent

The script is served in order and its last item repeats once exhausted. Requests the real
provider would refuse (broken tool-call sequencing, a body that is not JSON) are answered 400
without consuming an item, so a client bug fails the test instead of being papered over.

:class:`ScriptedServer` holds the transport (asyncio streams + ``h11``); a provider is a small
subclass choosing the path, the request validation and the error-body shape.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, ClassVar, Self, TypeAlias

import h11

__all__ = [
    "Delay",
    "Raw",
    "ScriptItem",
    "ScriptedOpenAI",
    "ScriptedServer",
    "Status",
    "empty_reply",
    "error_status",
    "in_body_error",
    "text_reply",
    "tool_calls_reply",
]

_READ_SIZE = 65536


@dataclass(frozen=True)
class Status:
    """Answer with this HTTP status; ``body=None`` means the provider's default error body."""

    code: int
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Delay:
    """Wait, then answer ``then`` — makes a client time out; a client that leaves is dropped."""

    seconds: float
    then: ScriptItem


@dataclass(frozen=True)
class Raw:
    """A non-JSON answer (an HTML error page from a proxy, a truncated body, …)."""

    status: int
    text: str
    content_type: str = "text/plain"


ScriptItem: TypeAlias = dict[str, Any] | Status | Delay | Raw
"""A ``dict`` is a 200 JSON body; the classes above are everything else."""


@dataclass(frozen=True)
class _Response:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)


class ScriptedServer:
    """HTTP/1.1 keep-alive server answering one endpoint from a script.

    Subclasses set :attr:`base_path` and :attr:`endpoint` (or override :meth:`accepts`),
    override :meth:`validate` with the provider's request checks and :meth:`error_body` with
    its error shape. Everything else — ordering, repetition, recording, delays, shutdown — is
    shared so every provider behaves the same way under test.
    """

    base_path: ClassVar[str] = ""
    """Prefix of :attr:`url`; the client appends its own endpoint path to it."""
    endpoint: ClassVar[str] = "/"
    """The scripted endpoint, relative to :attr:`base_path`."""

    def __init__(
        self,
        script: Sequence[ScriptItem],
        *,
        host: str = "127.0.0.1",
        responder: Callable[[Any], ScriptItem] | None = None,
        keep_requests: bool = True,
    ) -> None:
        if not ipaddress.ip_address(host).is_loopback:
            raise ValueError(f"scripted servers bind loopback addresses only, not {host!r}")
        self._script = list(script)
        self.responder = responder
        """When set, answers each accepted request body instead of the script: a load test's
        many conversations each get the answer their own request calls for."""
        self.keep_requests = keep_requests
        """False: :attr:`requests` and :attr:`headers` stay empty (long runs, memory bounds)."""
        self._host = host
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self.requests: list[Any] = []
        """Every body received on the endpoint, parsed JSON (raw text when it is not JSON)."""
        self.headers: list[dict[str, str]] = []
        """The headers of each entry of :attr:`requests`, names lower-cased."""
        self.served = 0
        """How many script items have been consumed."""
        self.connections = 0
        """How many TCP connections were accepted (keep-alive and pooling tests)."""

    # -- lifecycle -------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._connection, self._host, 0)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        # Abort rather than cancel: each handler then sees EOF and returns normally (3.11's
        # start_server logs a cancelled handler task as an error).
        for writer in self._connections.values():
            writer.transport.abort()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await asyncio.sleep(0)  # let handlers of just-accepted sockets run (and abort)
        await server.wait_closed()

    @property
    def port(self) -> int:
        """The ephemeral port the server is listening on."""
        return self.addresses[0][1]

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """Every (host, port) a listening socket is bound to."""
        if self._server is None:
            raise RuntimeError("the scripted server is not running (use 'async with')")
        return [(str(s.getsockname()[0]), int(s.getsockname()[1])) for s in self._server.sockets]

    @property
    def url(self) -> str:
        """Base URL to configure the client with, e.g. ``http://127.0.0.1:PORT/v1``."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}{self.base_path}"

    # -- provider hooks --------------------------------------------------------------------

    def accepts(self, method: str, path: str) -> bool:
        """Whether this request goes to the script (anything else is a 404)."""
        return method == "POST" and path == self.base_path + self.endpoint

    def validate(self, body: Any) -> Status | None:
        """The provider's request checks: an error answer, or ``None`` when the body is valid."""
        return None

    def error_body(self, code: int, message: str, type: str = "scripted") -> Any:
        """The provider's JSON error shape, used for every error the server makes up."""
        return {"error": {"message": message, "type": type, "code": code}}

    # -- serving ---------------------------------------------------------------------------

    def _next_item(self) -> ScriptItem | None:
        if not self._script:
            return None
        item = self._script[min(self.served, len(self._script) - 1)]
        self.served += 1
        return item

    def _json(self, status: int, body: Any, headers: Mapping[str, str] | None = None) -> _Response:
        return _Response(status, json.dumps(body).encode(), headers=headers or {})

    def _dispatch(
        self, method: str, path: str, headers: dict[str, str], raw: bytes
    ) -> ScriptItem | _Response:
        """Decide the answer; runs synchronously so arrival order is consumption order."""
        if not self.accepts(method, path):
            return self._json(
                404, self.error_body(404, f"no route for {method} {path}", "not_found")
            )
        try:
            body: Any = json.loads(raw)
        except ValueError:
            self.requests.append(raw.decode("utf-8", "replace"))
            self.headers.append(headers)
            return self._json(
                400, self.error_body(400, "request body is not valid JSON", "invalid_request_error")
            )
        if self.keep_requests:
            self.requests.append(body)
            self.headers.append(headers)
        refusal = self.validate(body)
        if refusal is not None:
            return refusal
        if self.responder is not None:
            self.served += 1
            return self.responder(body)
        item = self._next_item()
        if item is None:
            return self._json(500, self.error_body(500, "the script is empty"))
        return item

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if self._server is None:  # accepted just before __aexit__ closed the listener
            writer.transport.abort()
            return
        self._connections[task] = writer
        self.connections += 1
        try:
            await self._serve(reader, writer)
        except (ConnectionError, h11.ProtocolError, asyncio.IncompleteReadError):
            pass  # the client went away or spoke garbage: drop the connection quietly
        finally:
            self._connections.pop(task, None)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    @classmethod
    async def _read_request(
        cls, conn: h11.Connection, reader: asyncio.StreamReader
    ) -> tuple[str, str, dict[str, str], bytes] | None:
        """The next request as ``(method, target, headers, body)``; None once the client left.
        Repeated headers are joined with ``", "``, names lower-cased."""
        event = await cls._next_event(conn, reader)
        if isinstance(event, h11.ConnectionClosed):
            return None
        if not isinstance(event, h11.Request):
            raise h11.RemoteProtocolError(f"unexpected {type(event).__name__}")
        chunks: list[bytes] = []
        while True:
            part = await cls._next_event(conn, reader)
            if isinstance(part, h11.Data):
                chunks.append(bytes(part.data))
            elif isinstance(part, h11.EndOfMessage):
                break
            else:  # ConnectionClosed mid-body
                return None
        headers: dict[str, str] = {}
        for name, value in event.headers:
            key, text = name.decode("latin-1").lower(), value.decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        method, target = event.method.decode("latin-1"), event.target.decode("latin-1")
        return method, target, headers, b"".join(chunks)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER)
        while True:
            request = await self._read_request(conn, reader)
            if request is None:
                return
            method, target, headers, body = request
            answer = self._dispatch(method, target.split("?", 1)[0], headers, body)
            while isinstance(answer, Delay):
                if not await self._wait_unless_gone(conn, reader, answer.seconds):
                    return
                answer = answer.then
            try:
                response = self._render(answer)
            except (TypeError, ValueError) as exc:  # a script mistake: show it to the test
                response = self._json(500, self.error_body(500, f"bad script item: {exc}"))
            await self._send(conn, writer, response)
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return  # Connection: close (either side) or HTTP/1.0
            conn.start_next_cycle()

    @staticmethod
    async def _next_event(conn: h11.Connection, reader: asyncio.StreamReader) -> Any:
        while True:
            event = conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            conn.receive_data(await reader.read(_READ_SIZE))

    @staticmethod
    async def _wait_unless_gone(
        conn: h11.Connection, reader: asyncio.StreamReader, seconds: float
    ) -> bool:
        """Sleep ``seconds``; ``False`` as soon as the client disconnects (a timed-out client)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while (remaining := deadline - loop.time()) > 0:
            try:
                async with asyncio.timeout(remaining):
                    data = await reader.read(_READ_SIZE)
            except TimeoutError:
                return True
            if not data:
                return False
            conn.receive_data(data)  # pipelined bytes: h11 keeps them for the next cycle
        return True

    def _render(self, item: ScriptItem | _Response) -> _Response:
        if isinstance(item, _Response):
            return item
        if isinstance(item, Status):
            body = item.body
            if body is None:
                body = self.error_body(item.code, f"scripted {item.code} error")
            return self._json(item.code, body, item.headers)
        if isinstance(item, Raw):
            return _Response(item.status, item.text.encode(), item.content_type)
        if isinstance(item, dict):
            return self._json(200, item)
        raise TypeError(f"not a script item: {item!r}")

    @staticmethod
    async def _send(conn: h11.Connection, writer: asyncio.StreamWriter, resp: _Response) -> None:
        headers = {"content-type": resp.content_type}
        headers.update((name.lower(), value) for name, value in resp.headers.items())
        headers["content-length"] = str(len(resp.body))
        events = [
            h11.Response(status_code=resp.status, headers=list(headers.items())),
            h11.Data(data=resp.body),
            h11.EndOfMessage(),
        ]
        writer.write(b"".join(conn.send(event) or b"" for event in events))
        await writer.drain()


class ScriptedOpenAI(ScriptedServer):
    """OpenAI chat completions at ``<url>/chat/completions``, with OpenAI's request checks."""

    base_path = "/v1"
    endpoint = "/chat/completions"

    def validate(self, body: Any) -> Status | None:
        """Refuse what api.openai.com refuses: no ``messages`` list, broken tool-call order."""
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            return _invalid("'messages' must be a list of message objects", "messages")
        i = 0
        while i < len(messages):
            msg = messages[i]
            i += 1
            if msg.get("role") == "tool":
                return _invalid(
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'.",
                    f"messages.[{i - 1}].role",
                )
            calls = msg.get("tool_calls") if msg.get("role") == "assistant" else None
            if not calls:
                continue
            pending = [c.get("id") if isinstance(c, dict) else None for c in calls]
            while i < len(messages) and messages[i].get("role") == "tool":
                answered = messages[i].get("tool_call_id")
                if answered not in pending:
                    return _invalid(
                        "Invalid parameter: messages with role 'tool' must be a response to a "
                        "preceeding message with 'tool_calls'.",
                        f"messages.[{i}].role",
                    )
                pending.remove(answered)
                i += 1
            if pending:
                return _invalid(
                    "An assistant message with 'tool_calls' must be followed by tool messages "
                    "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                    f"response messages: {', '.join(str(p) for p in pending)}",
                    "messages",
                )
        return None


def _invalid(message: str, param: str) -> Status:
    """OpenAI's 400 shape (``code`` is null for these)."""
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": None}
    return Status(400, {"error": error})


# -- OpenAI chat.completion bodies -----------------------------------------------------------


def _completion(
    message: dict[str, Any],
    finish_reason: str,
    *,
    model: str,
    id: str,
    prompt_tokens: int,
    completion_tokens: int,
) -> dict[str, Any]:
    return {
        "id": id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def text_reply(
    content: str | None,
    finish_reason: str = "stop",
    *,
    model: str = "gpt-4o-mock",
    id: str = "chatcmpl-scripted",
    prompt_tokens: int = 10,
    completion_tokens: int = 5,
    refusal: str | None = None,
) -> dict[str, Any]:
    """An assistant text answer (``refusal`` adds the field OpenAI uses for declined asks)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if refusal is not None:
        message["refusal"] = refusal
    return _completion(
        message,
        finish_reason,
        model=model,
        id=id,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
    )


def tool_calls_reply(
    calls: Sequence[tuple[str, str, Mapping[str, Any] | str]],
    content: str | None = None,
    *,
    model: str = "gpt-4o-mock",
    id: str = "chatcmpl-scripted",
    prompt_tokens: int = 10,
    completion_tokens: int = 5,
) -> dict[str, Any]:
    """An answer asking for tools; ``(id, name, arguments)`` with arguments as OpenAI sends them.

    Dict arguments become compact JSON strings; a string is used verbatim, so a test can send
    malformed arguments on purpose.
    """
    tool_calls = [
        {
            "id": call_id,
            "type": "function",
            "function": {
                "name": name,
                "arguments": args
                if isinstance(args, str)
                else json.dumps(dict(args), separators=(",", ":")),
            },
        }
        for call_id, name, args in calls
    ]
    message = {"role": "assistant", "content": content, "tool_calls": tool_calls}
    return _completion(
        message,
        "tool_calls",
        model=model,
        id=id,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
    )


def empty_reply() -> dict[str, Any]:
    """A 200 with nothing in it (no content, no tool calls) — models do return these."""
    return text_reply(None, completion_tokens=0)


def error_status(
    code: int, *, retry_after: float | None = None, message: str | None = None
) -> Status:
    """An OpenAI-shaped HTTP error, optionally with ``Retry-After`` (seconds) for backoff tests."""
    headers = {} if retry_after is None else {"retry-after": f"{retry_after:g}"}
    body = None
    if message is not None:
        body = {"error": {"message": message, "type": "scripted", "code": code}}
    return Status(code, body, headers)


def in_body_error(
    message: str, *, type: str = "server_error", code: str | int | None = None
) -> dict[str, Any]:
    """An HTTP-200 body carrying ``error`` instead of ``choices``, as some compatible hosts do."""
    return {"error": {"message": message, "type": type, "code": code}}
