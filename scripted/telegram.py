"""A scripted Telegram Bot API: real HTTP on loopback, updates queued by the test.

The ``proxy`` cell (python-telegram-bot's ``telegram.Bot``) is pointed at this server instead of
api.telegram.org, so the real client code — form-encoded POSTs, long polling, timeouts, error
mapping — runs unchanged while no byte leaves 127.0.0.0/8::

    async with ScriptedTelegram(token="123:abc") as telegram:
        ...  # configure the proxy cell with base_url=telegram.url, bot_token="123:abc"
        telegram.push_text(chat_id=42, text="hi", user_id=7)   # a user writes to the bot
        [reply] = await telegram.wait_sent(1)                   # {"chat_id": 42, "text": ...}
        telegram.polls[-1]["offset"]                            # what the client confirmed

It answers ``/bot<token>/getUpdates`` and ``/bot<token>/sendMessage`` (method names are
case-insensitive, as on Telegram) by GET or POST, with parameters in the query string, a JSON
body or a form body. Like Telegram it

* serves the queued updates from ``offset`` on and forgets the ones below it (confirmed);
* holds a ``getUpdates`` with ``timeout`` open until an update is queued or the timeout ends,
  and answers a held poll ``409 Conflict`` when a second one arrives;
* answers a wrong token ``401 Unauthorized`` and an unknown method ``404 Not Found``;
* refuses (``400``) a ``sendMessage`` without ``chat_id``, with an empty text, with a text over
  4096 characters, or to a chat it has never seen (``strict_chats``).

Failures are scripted with :meth:`ScriptedTelegram.fail` (or :meth:`auth_fail`): the next
requests to a method are answered with the given status and Telegram's error body.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import h11

from scripted.core import ScriptedServer, _Response

__all__ = [
    "TELEGRAM_MAX_MESSAGE",
    "ScriptedTelegram",
    "telegram_error",
    "telegram_update",
]

TELEGRAM_MAX_MESSAGE = 4096
"""Telegram's limit on one message's text, in characters (UTF-16 code units)."""

_INT_PARAMS = frozenset({"offset", "limit", "timeout", "chat_id", "message_id"})
_METHODS = {"getupdates": "getUpdates", "sendmessage": "sendMessage"}
_STATUS_TEXT = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    409: "Conflict",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
}


def telegram_error(
    code: int, description: str | None = None, *, retry_after: int | None = None
) -> dict[str, Any]:
    """Telegram's error body: ``{"ok": false, "error_code", "description"}`` (plus
    ``parameters.retry_after`` for flood control)."""
    body: dict[str, Any] = {
        "ok": False,
        "error_code": code,
        "description": description or _STATUS_TEXT.get(code, f"Error {code}"),
    }
    if retry_after is not None:
        body["parameters"] = {"retry_after": retry_after}
    return body


def telegram_update(
    update_id: int,
    chat_id: int,
    text: str | None,
    *,
    user_id: int | None = None,
    message_id: int = 1,
    date: int | None = None,
) -> dict[str, Any]:
    """One ``Update`` carrying a private-chat ``message`` (``text=None``: no text, like a
    sticker or a photo)."""
    message: dict[str, Any] = {
        "message_id": message_id,
        "date": int(time.time()) if date is None else date,
        "chat": _chat(chat_id),
    }
    if user_id is not None:
        message["from"] = {"id": user_id, "is_bot": False, "first_name": f"user{user_id}"}
    if text is not None:
        message["text"] = text
    else:
        message["sticker"] = {
            "file_id": "sticker",
            "file_unique_id": "sticker",
            "type": "regular",
            "width": 512,
            "height": 512,
            "is_animated": False,
            "is_video": False,
        }
    return {"update_id": update_id, "message": message}


def _chat(chat_id: int) -> dict[str, Any]:
    """A ``Chat``: private for positive ids, a group for negative ones (as on Telegram)."""
    if chat_id > 0:
        return {"id": chat_id, "type": "private"}
    return {"id": chat_id, "type": "group", "title": "group"}


@dataclass
class _Failure:
    method: str | None
    status: int
    body: dict[str, Any]
    left: int
    skip: int


class ScriptedTelegram(ScriptedServer):
    """The Telegram Bot API's ``getUpdates`` and ``sendMessage`` on 127.0.0.1.

    :attr:`url` is the ``base_url`` to give the client (``http://127.0.0.1:PORT``); the client
    appends ``/bot<token>/<method>``.
    """

    def __init__(
        self,
        token: str = "123456:scripted-token",
        *,
        host: str = "127.0.0.1",
        first_update_id: int = 1000,
        known_chats: Iterable[int] = (),
        strict_chats: bool = True,
        max_poll_wait: float = 50.0,
    ) -> None:
        super().__init__([], host=host)
        self.token = token
        self.strict_chats = strict_chats
        self.max_poll_wait = max_poll_wait
        """Telegram holds a long poll at most 50 s, whatever ``timeout`` asks for."""
        self.known_chats: set[int] = set(known_chats)
        self._queue: list[dict[str, Any]] = []
        self._next_update_id = first_update_id
        self._message_ids = itertools.count(1)
        self._failures: list[_Failure] = []
        self._changed = asyncio.Event()
        self._poll_generation = 0
        self.sent: list[dict[str, Any]] = []
        """Each accepted ``sendMessage``: ``{"chat_id", "text"}``, in arrival order."""
        self.polls: list[dict[str, Any]] = []
        """Each ``getUpdates`` (also refused ones): ``{"offset", "timeout", "limit"}`` as sent
        (``None`` when absent) plus the HTTP ``status`` answered (``None`` while held, or when
        the client left)."""
        self.calls: list[tuple[str, dict[str, Any]]] = []
        """Every request on a bot path: ``(method as written, parameters)``."""
        self.tokens_seen: list[str] = []
        """The token of every request on a bot path (a test can check it was the right one)."""

    # -- scripting ---------------------------------------------------------------------------

    def push_update(self, update: dict[str, Any]) -> int:
        """Queue a raw ``Update`` object; returns its ``update_id``."""
        update_id = int(update["update_id"])
        self._next_update_id = max(self._next_update_id, update_id + 1)
        message = update.get("message")
        if isinstance(message, dict) and isinstance(message.get("chat"), dict):
            self.known_chats.add(int(message["chat"]["id"]))
        self._queue.append(update)
        self._queue.sort(key=lambda u: int(u["update_id"]))
        self._notify()
        return update_id

    def push_text(
        self,
        chat_id: int,
        text: str | None,
        *,
        user_id: int | None = None,
        message_id: int | None = None,
        update_id: int | None = None,
    ) -> int:
        """Queue a user's message to the bot (``text=None``: a message without text, e.g. a
        sticker); returns its ``update_id``."""
        uid = self._next_update_id if update_id is None else update_id
        mid = next(self._message_ids) if message_id is None else message_id
        return self.push_update(
            telegram_update(uid, chat_id, text, user_id=user_id, message_id=mid)
        )

    def fail(
        self,
        status: int,
        *,
        method: str | None = None,
        times: int = 1,
        after: int = 0,
        description: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        """Answer ``times`` requests to ``method`` (any method when None) with ``status`` and
        Telegram's error body, once ``after`` of them were served normally. Scripted failures
        are used in the order given."""
        body = telegram_error(status, description, retry_after=retry_after)
        name = None if method is None else _METHODS.get(method.lower(), method)
        self._failures.append(_Failure(name, status, body, times, after))

    def auth_fail(self, times: int = 1, *, method: str | None = "getUpdates") -> None:
        """Answer the next ``times`` requests to ``method`` ``401 Unauthorized`` (a revoked
        token)."""
        self.fail(401, method=method, times=times)

    @property
    def pending(self) -> list[dict[str, Any]]:
        """Updates queued and not yet confirmed by an ``offset``."""
        return list(self._queue)

    async def wait_sent(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:  # noqa: ASYNC109
        """Wait until ``count`` messages were sent; returns :attr:`sent`."""
        await self._wait(lambda: len(self.sent) >= count, timeout, f"{count} sendMessage")
        return list(self.sent)

    async def wait_polls(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:  # noqa: ASYNC109
        """Wait until ``count`` ``getUpdates`` requests arrived; returns :attr:`polls`."""
        await self._wait(lambda: len(self.polls) >= count, timeout, f"{count} getUpdates")
        return list(self.polls)

    async def _wait(self, done: Any, timeout: float, what: str) -> None:  # noqa: ASYNC109
        try:
            async with asyncio.timeout(timeout):
                while not done():
                    changed = self._changed
                    await changed.wait()
        except TimeoutError:
            raise TimeoutError(
                f"the scripted Telegram saw no {what} within {timeout} s "
                f"(sent {len(self.sent)}, polls {len(self.polls)})"
            ) from None

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # -- serving -----------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER)
        while True:
            request = await self._read_request(conn, reader)
            if request is None:
                return
            method, target, headers, body = request
            response = await self._answer(method, target, headers, body, conn, reader)
            if response is None:
                return  # the client left while its long poll was held
            await self._send(conn, writer, response)
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()

    def _error(self, code: int, description: str | None = None) -> _Response:
        return self._json(code, telegram_error(code, description))

    def _ok(self, result: Any) -> _Response:
        return self._json(200, {"ok": True, "result": result})

    async def _answer(
        self,
        http_method: str,
        target: str,
        headers: dict[str, str],
        raw: bytes,
        conn: h11.Connection,
        reader: asyncio.StreamReader,
    ) -> _Response | None:
        path, _, query = target.partition("?")
        parts = path.split("/")
        if len(parts) != 3 or parts[0] != "" or not parts[1].startswith("bot"):
            return self._error(404)
        if http_method not in ("GET", "POST"):
            return self._error(405, "Method Not Allowed")
        token, method = parts[1][3:], parts[2]
        try:
            params = _parameters(query, headers.get("content-type", ""), raw)
        except ValueError as exc:
            return self._error(400, f"Bad Request: {exc}")
        self.calls.append((method, params))
        self.tokens_seen.append(token)
        name = _METHODS.get(method.lower())
        poll: dict[str, Any] | None = None
        if name == "getUpdates":
            poll = {key: params.get(key) for key in ("offset", "timeout", "limit")}
            poll["status"] = None
            self.polls.append(poll)
        self._notify()
        if token != self.token:
            response = self._error(401)
        elif name is None:
            response = self._error(404)
        elif (failure := self._take_failure(name)) is not None:
            response = self._json(failure.status, failure.body)
        elif name == "sendMessage":
            response = self._send_message(params)
        else:
            answer = await self._get_updates(params, conn, reader)
            if answer is None:
                return None
            response = answer
        if poll is not None:
            poll["status"] = response.status
            self._notify()
        return response

    def _take_failure(self, method: str) -> _Failure | None:
        for failure in self._failures:
            if failure.left > 0 and failure.method in (None, method):
                if failure.skip > 0:
                    failure.skip -= 1
                    return None
                failure.left -= 1
                return failure
        return None

    def _send_message(self, params: dict[str, Any]) -> _Response:
        chat_id = params.get("chat_id")
        text = params.get("text")
        if chat_id is None or chat_id == "":
            return self._error(400, "Bad Request: chat_id is empty")
        if not isinstance(text, str) or not text.strip():
            return self._error(400, "Bad Request: message text is empty")
        if len(text.encode("utf-16-le")) // 2 > TELEGRAM_MAX_MESSAGE:
            return self._error(400, "Bad Request: message is too long")
        if not isinstance(chat_id, int) or (self.strict_chats and chat_id not in self.known_chats):
            return self._error(400, "Bad Request: chat not found")
        self.sent.append({"chat_id": chat_id, "text": text})
        self._notify()
        message = {
            "message_id": next(self._message_ids),
            "date": int(time.time()),
            "chat": _chat(chat_id),
            "from": {"id": 1, "is_bot": True, "first_name": "scripted", "username": "bot"},
            "text": text,
        }
        return self._ok(message)

    def _confirm(self, offset: int | None) -> None:
        if offset is not None and offset > 0:
            self._queue = [u for u in self._queue if int(u["update_id"]) >= offset]

    def _available(self, offset: int | None, limit: int) -> list[dict[str, Any]]:
        if offset is not None and offset < 0:
            return self._queue[offset:][:limit]
        return self._queue[:limit]

    async def _get_updates(
        self, params: dict[str, Any], conn: h11.Connection, reader: asyncio.StreamReader
    ) -> _Response | None:
        offset, timeout, limit = (params.get(k) for k in ("offset", "timeout", "limit"))
        for key, value in (("offset", offset), ("timeout", timeout), ("limit", limit)):
            if value is not None and not isinstance(value, int):
                return self._error(400, f"Bad Request: invalid {key} specified")
        limit = 100 if limit is None else max(1, min(100, limit))
        self._confirm(offset)
        self._poll_generation += 1
        generation = self._poll_generation
        self._notify()  # a poll held until now answers 409
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(max(timeout or 0, 0), self.max_poll_wait)
        while True:
            if generation != self._poll_generation:
                return self._error(
                    409,
                    "Conflict: terminated by other getUpdates request; make sure that only "
                    "one bot instance is running",
                )
            updates = self._available(offset, limit)
            remaining = deadline - loop.time()
            if updates or remaining <= 0:
                return self._ok(updates)
            if not await self._hold(conn, reader, remaining):
                return None

    async def _hold(
        self, conn: h11.Connection, reader: asyncio.StreamReader, seconds: float
    ) -> bool:
        """Wait until something changes or ``seconds`` pass; ``False`` once the client left."""
        changed = asyncio.ensure_future(self._changed.wait())
        gone = asyncio.ensure_future(reader.read(65536))
        try:
            done, _ = await asyncio.wait(
                {changed, gone}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED
            )
            if gone in done:
                data = gone.result()
                if not data:
                    return False
                conn.receive_data(data)  # pipelined bytes: h11 keeps them for the next cycle
            return True
        finally:
            for task in (changed, gone):
                if not task.done():
                    task.cancel()
            await asyncio.gather(changed, gone, return_exceptions=True)


def _parameters(query: str, content_type: str, raw: bytes) -> dict[str, Any]:
    """The method's parameters from the query string and the body (JSON or form)."""
    values: dict[str, Any] = {k: v[-1] for k, v in urllib.parse.parse_qs(query).items()}
    kind = content_type.split(";", 1)[0].strip().lower()
    if raw.strip():
        if kind == "application/json":
            try:
                body = json.loads(raw)
            except ValueError:
                raise ValueError("can't parse JSON object") from None
            if not isinstance(body, dict):
                raise ValueError("the JSON body must be an object")
            values.update(body)
            return {k: _coerce(k, v) for k, v in values.items()}
        if kind == "application/x-www-form-urlencoded":
            form = urllib.parse.parse_qs(raw.decode("utf-8"), keep_blank_values=True)
            values.update({k: v[-1] for k, v in form.items()})
        else:
            raise ValueError(f"unsupported content type {kind or 'none'!r}")
    return {k: _coerce(k, v) for k, v in values.items()}


def _coerce(key: str, value: Any) -> Any:
    """Form and query values are strings; Telegram reads integer parameters from them."""
    if key in _INT_PARAMS and isinstance(value, str):
        text = value.strip()
        if text.lstrip("-").isdigit():
            return int(text)
    return value
