"""The ``proxy`` cell: a Telegram bot as a door into the colony.

Long-running. Its I/O loop (:meth:`ProxyCell.run`) long-polls ``getUpdates`` through
python-telegram-bot's :class:`telegram.Bot` and emits each text message as a source message
(fresh trace, empty context) towards ``params.emit_to``; the update cursor is saved in
``cell.db`` *before* the emission, so a restart never emits an update twice. Messages that
reach the cell (:meth:`ProxyCell.handle`) are answers: the last assistant text turn goes to
``context.chat_id`` with ``sendMessage`` — split on paragraph boundaries when it is longer than
Telegram's 4096 characters — and nothing is emitted on success. What goes wrong is one
``proxy_inbound_error`` emission.

The bot token never reaches a log line or an emission: our own messages never quote it, error
texts are scrubbed, and the records python-telegram-bot and httpx log (their URLs hold the
token) are scrubbed by a logging filter while a proxy cell is alive.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError
from telegram import Bot, Update
from telegram.error import (
    Forbidden,
    InvalidToken,
    RetryAfter,
    TelegramError,
)
from telegram.request import HTTPXRequest

from cells.cellfile import ParamsOverlay, QueryTimeoutError, open_cell_db
from cells.proxy.params import IMMUTABLE_KEYS, MUTABLE_KEYS, ProxyParams
from cells.redact import Redactor
from colony.cell import CellContext, CellSpec, Emission
from colony.crashpoints import crash_point
from colony.envelope import Envelope, JsonObject

# python-telegram-bot 22 warns (PTBDeprecationWarning) whenever it reads a time period as an
# int, e.g. inside RetryAfter's constructor; opting into timedelta periods silences that. The
# variable is read at call time, so setting it here (before any bot exists) is enough.
os.environ.setdefault("PTB_TIMEDELTA", "true")

TELEGRAM_MAX_MESSAGE = 4096
"""Telegram's limit on one message's text (UTF-16 code units; characters for most text)."""

Sleep = Callable[[float], Awaitable[None]]


# -- the token stays out of logs ---------------------------------------------------------------


class _TokenFilter(logging.Filter):
    """Replaces every live bot token in the records of the loggers it is attached to."""

    def __init__(self) -> None:
        super().__init__("proxy-token-redactor")
        self.tokens: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.tokens:
            return True
        try:
            text = record.getMessage()
        except Exception:
            return True
        clean = redact(text, self.tokens)
        if clean != text:
            record.msg, record.args = clean, None
        return True

    def hold(self, token: str) -> None:
        self.tokens[token] = self.tokens.get(token, 0) + 1

    def release(self, token: str) -> None:
        count = self.tokens.get(token, 0) - 1
        if count <= 0:
            self.tokens.pop(token, None)
        else:
            self.tokens[token] = count


_REDACTOR = _TokenFilter()
_LIBRARY_LOGGERS = (
    "telegram.Bot",
    "telegram.request.BaseRequest",
    "telegram.request.HTTPXRequest",
    "httpx",
    "httpcore",
)


def _attach_redactor() -> None:
    for name in _LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        if _REDACTOR not in logger.filters:
            logger.addFilter(_REDACTOR)


def redact(text: str, tokens: Any) -> str:
    """``text`` with every token in ``tokens`` (also URL-encoded) and anything shaped like a
    secret replaced (:class:`cells.redact.Redactor`)."""
    return Redactor(tokens).text(text)


# -- splitting long answers --------------------------------------------------------------------


def _units(text: str) -> int:
    """Length in UTF-16 code units, the measure of Telegram's limit."""
    return len(text.encode("utf-16-le")) // 2


def _fitting_prefix(text: str, limit: int) -> int:
    """The length (in code points) of the longest prefix of ``text`` within ``limit`` units."""
    if _units(text) <= limit:
        return len(text)
    n = min(len(text), limit)
    while _units(text[:n]) > limit:
        n -= 1
    return n


_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n\s*")
_LINE_BREAK = re.compile(r"\n\s*")


def split_message(text: str, limit: int = TELEGRAM_MAX_MESSAGE) -> list[str]:
    """``text`` in parts of at most ``limit`` units, in order.

    Each part ends at the last paragraph break (a blank line) that fits; a paragraph longer
    than the limit ends at its last line break that fits, a line longer than the limit is cut
    hard. The whitespace at a cut is dropped (Telegram trims it anyway); blank parts are not
    sent. A text within the limit is returned whole, even when blank.
    """
    if _units(text) <= limit:
        return [text]
    parts: list[str] = []
    rest = text
    while _units(rest) > limit:
        n = _fitting_prefix(rest, limit)
        window = rest[: n + 64]
        cut: tuple[int, int] | None = None
        for pattern in (_PARAGRAPH_BREAK, _LINE_BREAK):
            found = [m for m in pattern.finditer(window) if 0 < m.start() <= n]
            if found:
                cut = (found[-1].start(), found[-1].end())
                break
        if cut is None:
            cut = (n, n)
        head, rest = rest[: cut[0]], rest[cut[1] :]
        if head.strip():
            parts.append(head.rstrip())
    if rest.strip():
        parts.append(rest)
    return parts


# -- cell.db -------------------------------------------------------------------------------------


class _CellDb:
    """``update_cursor(id=1, offset)``, the parts already sent (``sent_parts``, so a message
    redelivered after a crash is not sent twice) and the runtime params overlay, one writer at
    a time."""

    def __init__(self, folder: Path | None, query_timeout_ms: int) -> None:
        self.conn, _ = open_cell_db(folder, busy_timeout_ms=query_timeout_ms)
        self.lock = asyncio.Lock()
        self.guard = threading.Lock()
        """Held by the thread using the connection; close() takes it too."""
        try:
            self.conn.execute(
                "CREATE TABLE IF NOT EXISTS update_cursor "
                "(id INTEGER PRIMARY KEY CHECK (id = 1), offset INTEGER NOT NULL)"
            )
            self.conn.execute(
                "CREATE TABLE IF NOT EXISTS sent_parts (message_id TEXT NOT NULL, "
                "part INTEGER NOT NULL, at INTEGER NOT NULL, PRIMARY KEY (message_id, part))"
            )
            self.conn.execute(
                "DELETE FROM sent_parts WHERE at < ?", (int(time.time()) - 7 * 24 * 3600,)
            )
            self.params = ParamsOverlay(self.conn, "proxy_params")
        except sqlite3.Error:
            self.conn.close()
            raise

    def offset(self) -> int:
        row = self.conn.execute("SELECT offset FROM update_cursor WHERE id = 1").fetchone()
        return int(row[0]) if row else 0

    def overlay(self) -> dict[str, Any]:
        return self.params.read()

    async def _call(self, work: Callable[[], None], timeout_ms: int) -> None:
        def run() -> None:
            with self.guard:
                self.conn.execute(f"PRAGMA busy_timeout = {int(timeout_ms)}")
                work()

        async with self.lock:
            try:
                await asyncio.to_thread(run)
            except sqlite3.OperationalError as exc:
                text = str(exc).lower()
                if "locked" in text or "busy" in text:
                    raise QueryTimeoutError(
                        f"cell.db stayed locked for query_timeout_ms ({timeout_ms} ms)"
                    ) from exc
                raise

    async def save_offset(self, offset: int, timeout_ms: int) -> None:
        def work() -> None:
            self.conn.execute(
                "INSERT INTO update_cursor (id, offset) VALUES (1, ?) "
                "ON CONFLICT (id) DO UPDATE SET offset = excluded.offset",
                (offset,),
            )

        await self._call(work, timeout_ms)

    async def sent(self, message_id: str, timeout_ms: int) -> set[int]:
        """Parts of this message Telegram has already accepted."""
        parts: set[int] = set()

        def work() -> None:
            rows = self.conn.execute(
                "SELECT part FROM sent_parts WHERE message_id = ?", (message_id,)
            ).fetchall()
            parts.update(int(r[0]) for r in rows)

        await self._call(work, timeout_ms)
        return parts

    async def mark_sent(self, message_id: str, part: int, timeout_ms: int) -> None:
        def work() -> None:
            self.conn.execute(
                "INSERT OR IGNORE INTO sent_parts (message_id, part, at) VALUES (?, ?, ?)",
                (message_id, part, int(time.time())),
            )

        await self._call(work, timeout_ms)

    async def save_overlay(self, values: dict[str, Any], timeout_ms: int) -> None:
        await self._call(lambda: self.params.save(values), timeout_ms)

    async def close(self) -> None:
        async with self.lock:
            # A cancelled _call releases ``lock`` while its thread still runs: wait for it.
            with self.guard:
                self.conn.close()


# -- the cell ------------------------------------------------------------------------------------


def _error(code: str, detail: str) -> JsonObject:
    return {
        "header": {"error_code": code, "msg_type": "proxy_inbound_error"},
        "messages": [],
        "meta": {"detail": detail},
    }


def _chat_id(value: Any) -> int | None:
    """``context.chat_id`` as Telegram's integer id (an int, or a string of digits)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"-?\d{1,19}", value.strip()):
        return int(value.strip())
    return None


def _last_assistant_text(messages: list[Any]) -> str | None:
    for turn in reversed(messages):
        if (
            isinstance(turn, dict)
            and turn.get("origin") == "assistant"
            and turn.get("type") == "text"
            and isinstance(turn.get("text"), str)
        ):
            text: str = turn["text"]
            return text
    return None


def _seconds(period: Any) -> float:
    if isinstance(period, timedelta):
        return period.total_seconds()
    return float(period)


class ProxyCell:
    """One Telegram bot. See the module docstring; ``docs/cells/proxy.md`` for the contract."""

    BACKOFF_FIRST_S = 1.0
    """Wait after the first transient poll failure; doubles with each further one."""
    BACKOFF_MAX_S = 60.0
    """Ceiling of the transient backoff."""
    AUTH_RETRY_S = 300.0
    """Wait between polls while Telegram refuses the token (401/403/404)."""
    SEND_RETRIES = 3
    """How often a part refused with flood control (429) is sent again, when Telegram's
    ``retry_after`` fits in what is left of ``send_timeout_ms``."""

    def __init__(self, spec: CellSpec, *, sleep: Sleep | None = None) -> None:
        try:
            birth = ProxyParams.model_validate({} if spec.params is None else spec.params)
        except ValidationError as exc:  # pydantic's text quotes the input (the token): drop it
            problems = "; ".join(
                f"{'.'.join(str(part) for part in e['loc']) or 'params'}: {e['msg']}"
                for e in exc.errors()
            )
            raise ValueError(f"invalid proxy params: {problems}") from None
        self.path = spec.path
        self.log = spec.log
        self.token = birth.bot_token
        self.emit_to = birth.emit_to
        self.at_least_once = spec.colony.delivery == "at_least_once"
        self._sleep: Sleep = sleep if sleep is not None else asyncio.sleep
        self.db = _CellDb(spec.folder, birth.query_timeout_ms)
        try:
            self.offset = self.db.offset()
            overlay = {k: v for k, v in self.db.overlay().items() if k in MUTABLE_KEYS}
        except sqlite3.Error:
            self.db.conn.close()
            raise
        try:
            self.params = birth.merged(overlay) if overlay else birth
        except ValidationError:
            self.params = birth  # an overlay the birth params no longer admit: ignore it
            self._log("warning", "proxy_params_overlay_ignored", keys=sorted(overlay))
        _attach_redactor()
        _REDACTOR.hold(self.token)
        self._requests: list[HTTPXRequest] = []
        self._bot_url = ""
        self._bot: Bot | None = None
        self.backoffs: list[tuple[str, float]] = []
        """Every poll backoff taken: ``(kind, seconds)`` with kind ``transient``, ``auth`` or
        ``flood`` (tests read it; the log has the same as ``proxy_poll_backoff``)."""

    # -- helpers -------------------------------------------------------------------------------

    def _log(self, level: str, event: str, **fields: Any) -> None:
        if self.log is not None:
            getattr(self.log, level)(event, **fields)

    def _scrub(self, exc: BaseException | str) -> str:
        if isinstance(exc, BaseException):
            text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        else:
            text = exc
        return redact(text, (self.token,))

    def _bot_for_current_url(self) -> Bot:
        base = self.params.base_url
        if self._bot is None or self._bot_url != base:
            poll = HTTPXRequest(connection_pool_size=1)
            send = HTTPXRequest(connection_pool_size=4)
            self._requests += [poll, send]
            self._bot = Bot(
                self.token,
                base_url=f"{base}/bot",
                base_file_url=f"{base}/file/bot",
                request=send,
                get_updates_request=poll,
            )
            self._bot_url = base
        return self._bot

    # -- the I/O loop: Telegram → colony ------------------------------------------------------

    async def run(self, ctx: CellContext) -> None:
        transient = 0.0
        while True:
            p = self.params
            bot = self._bot_for_current_url()
            wait = p.long_poll_request_secs
            read = p.long_poll_timeout_ms / 1000 - wait  # the Bot adds ``wait`` back on
            try:
                async with asyncio.timeout(wait + p.long_poll_timeout_ms / 1000):
                    updates = await bot.get_updates(
                        offset=self.offset or None,
                        timeout=wait,
                        read_timeout=read,
                        write_timeout=p.send_timeout_ms / 1000,
                        connect_timeout=p.send_timeout_ms / 1000,
                        pool_timeout=p.send_timeout_ms / 1000,
                    )
            except asyncio.CancelledError:
                raise
            except (InvalidToken, Forbidden) as exc:
                await self._backoff("auth", self.AUTH_RETRY_S, exc)
                continue
            except RetryAfter as exc:
                transient = 0.0
                await self._backoff("flood", max(_seconds(exc.retry_after), 0.0), exc)
                continue
            except (TelegramError, httpx.HTTPError, OSError, TimeoutError) as exc:
                transient = (
                    self.BACKOFF_FIRST_S
                    if transient == 0
                    else min(transient * 2, self.BACKOFF_MAX_S)
                )
                await self._backoff("transient", transient, exc)
                continue
            transient = 0.0
            if not await self._deliver(ctx, updates):
                transient = self.BACKOFF_FIRST_S
                await self._backoff("transient", transient, "the update cursor was not saved")

    async def _backoff(self, kind: str, seconds: float, cause: BaseException | str) -> None:
        self.backoffs.append((kind, seconds))
        self._log(
            "warning",
            "proxy_poll_backoff",
            kind=kind,
            delay_s=seconds,
            error=self._scrub(cause),
            detail="getUpdates failed; the next poll waits"
            + (" (Telegram refuses the bot token)" if kind == "auth" else ""),
        )
        await self._sleep(seconds)

    async def _deliver(self, ctx: CellContext, updates: tuple[Update, ...]) -> bool:
        """Take each update in and move the cursor past it; False when a save failed.

        At-least-once delivery emits first (journalled, keyed by the update id) and then saves
        the cursor: a crash in between fetches the update again and the key drops the copy.
        At-most-once saves the cursor first, as meclaw does: a crash in between loses it."""
        for update in sorted(updates, key=lambda u: u.update_id):
            next_offset = update.update_id + 1
            if next_offset <= self.offset:
                continue  # already handled (Telegram sent it again)
            if self.at_least_once:
                await self._emit(ctx, update)
            try:
                await self.db.save_offset(next_offset, self.params.query_timeout_ms)
            except (QueryTimeoutError, sqlite3.Error) as exc:
                self._log(
                    "error",
                    "proxy_cursor_save_failed",
                    update_id=update.update_id,
                    error=self._scrub(exc),
                    detail="the update is not emitted; it is fetched again on the next poll",
                )
                return False
            self.offset = next_offset
            if not self.at_least_once:
                await self._emit(ctx, update)
        return True

    async def _emit(self, ctx: CellContext, update: Update) -> None:
        content = self._inbound(update)
        if content is None:
            self._log("debug", "proxy_update_skipped", update_id=update.update_id)
            return
        try:
            await ctx.emit(content, self.emit_to, key=f"telegram:{self.path}:{update.update_id}")
        except Exception as exc:  # routing trouble must not stop the bot
            self._log("error", "proxy_emit_failed", update_id=update.update_id, error=repr(exc))

    @staticmethod
    def _inbound(update: Update) -> JsonObject | None:
        message = update.message
        if message is None or message.text is None:
            return None
        header: JsonObject = {"chat_id": message.chat.id}
        if message.from_user is not None:
            header["user_id"] = message.from_user.id
        header["platform"] = "telegram"
        header["message_id"] = message.message_id
        return {
            "header": header,
            "messages": [{"origin": "user", "type": "text", "text": message.text}],
        }

    # -- mailbox: colony → Telegram -----------------------------------------------------------

    async def handle(self, message: Envelope) -> list[Emission] | None:
        try:
            problem = await self._handle(message)
        except Exception as exc:  # never let a bug crash the bot (and log the token)
            problem = ("send_failed", f"unexpected failure: {self._scrub(exc)}")
        if problem is None:
            return None
        code, detail = problem[0], self._scrub(problem[1])  # it may quote Telegram's answer
        self._log("warning", "proxy_inbound_error", error_code=code, detail=detail)
        return [Emission(_error(code, detail), message.reply_to or message.target)]

    async def _handle(self, message: Envelope) -> tuple[str, str] | None:
        body = message.body
        if not isinstance(body, dict):
            return "invalid_body", "the body must be a JSON object"
        if "params" in body:
            return await self._update_params(body["params"])
        chat_id = _chat_id(message.context.get("chat_id"))
        if chat_id is None:
            return "missing_chat_id", "context.chat_id required (an integer Telegram chat id)"
        messages = body.get("messages")
        if not isinstance(messages, list):
            return "invalid_body", "body.messages must be an array"
        text = _last_assistant_text(messages)
        if text is None:
            return "missing_assistant_turn", "messages[] has no assistant text turn"
        parts = split_message(text)
        timeout_ms = self.params.query_timeout_ms
        done = await self.db.sent(message.id, timeout_ms)
        if done:
            self._log(
                "info",
                "proxy_redelivery_skipped",
                message_id=message.id,
                parts=sorted(done),
                detail="these parts reached Telegram before a restart; they are not sent again",
            )
        for index, part in enumerate(parts):
            if index in done:
                continue
            failure = await self._send(chat_id, part)
            if failure is not None:
                where = f" (part {index + 1} of {len(parts)})" if len(parts) > 1 else ""
                return "send_failed", f"sendMessage failed{where}: {failure}"
            await self.db.mark_sent(message.id, index, timeout_ms)
            crash_point("proxy.sent")
        return None

    async def _send(self, chat_id: int, text: str) -> str | None:
        """Send one part; the failure sentence, or None once Telegram accepted it."""
        p = self.params
        budget = p.send_timeout_ms / 1000
        loop = asyncio.get_running_loop()
        deadline = loop.time() + budget
        for attempt in range(self.SEND_RETRIES + 1):
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                async with asyncio.timeout(remaining):
                    await self._bot_for_current_url().send_message(
                        chat_id=chat_id,
                        text=text,
                        read_timeout=remaining,
                        write_timeout=remaining,
                        connect_timeout=remaining,
                        pool_timeout=remaining,
                    )
                return None
            except asyncio.CancelledError:
                raise
            except TimeoutError:
                break
            except RetryAfter as exc:
                wait = _seconds(exc.retry_after)
                if attempt == self.SEND_RETRIES or wait >= deadline - loop.time():
                    return self._scrub(exc)
                await self._sleep(wait)
            except (TelegramError, httpx.HTTPError, OSError) as exc:
                return self._scrub(exc)
        return f"no answer within send_timeout_ms ({p.send_timeout_ms} ms)"

    async def _update_params(self, update: Any) -> tuple[str, str] | None:
        """The ``params`` body slot: merge, validate, persist, apply; silent on success."""
        if not isinstance(update, dict):
            return "invalid_input", "params slot: not a JSON object"
        fixed = sorted(k for k in update if k in IMMUTABLE_KEYS)
        if fixed:
            return "invalid_input", f"params.{fixed[0]} is immutable at runtime"
        unknown = sorted(k for k in update if k not in MUTABLE_KEYS)
        if unknown:
            return (
                "invalid_input",
                f"params.{unknown[0]} is not a proxy param "
                f"(runtime-mutable: {', '.join(MUTABLE_KEYS)})",
            )
        try:
            merged = self.params.merged(update)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            return "invalid_input", f"params.{where}: {first['msg']}"
        if not update:
            return None
        values = {key: getattr(merged, key) for key in update}
        try:
            await self.db.save_overlay(values, self.params.query_timeout_ms)
        except QueryTimeoutError as exc:
            return "query_timeout", f"params write: {exc}"
        except sqlite3.Error as exc:
            return "invalid_input", f"cell.db params write failed: {exc}"
        self.params = merged
        self._log("info", "proxy_params_updated", keys=sorted(update))
        return None

    # -- lifecycle ------------------------------------------------------------------------------

    async def close(self) -> None:
        requests, self._requests, self._bot = self._requests, [], None
        try:
            await asyncio.gather(*(r.shutdown() for r in requests), return_exceptions=True)
            await self.db.close()
        finally:
            _REDACTOR.release(self.token)
