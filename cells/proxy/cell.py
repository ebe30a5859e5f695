"""The ``proxy`` cell: a Telegram bot as a door into the colony.

Long-running. Its I/O loop (:meth:`ProxyCell.run`) long-polls ``getUpdates`` through
python-telegram-bot's :class:`telegram.Bot` and emits each text message as a source message
(fresh trace, empty context) towards ``params.emit_to``; the update cursor is saved in
``cell.db`` *before* the emission, so a restart never emits an update twice. Messages that
reach the cell (:meth:`ProxyCell.handle`) are answers: the last assistant text turn goes to
``context.chat_id`` with ``sendMessage`` — split on paragraph boundaries when it is longer than
Telegram's 4096 characters — and nothing is emitted on success. What goes wrong is one
``proxy_inbound_error`` emission.

In a cluster the state is in the cluster's database (:mod:`cells.proxy.state`), every node
sends the answers of the conversations it runs, and only the holder of the leader lease
``proxy:<path>`` polls: the others ask for it again every third of a lease, so polling moves
to another node within about a lease when its node dies.

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
from collections.abc import Awaitable, Callable
from datetime import timedelta
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

from cells import runtime_params
from cells.cellfile import QueryTimeoutError
from cells.clusterstate import cluster_dsn
from cells.proxy.params import IMMUTABLE_KEYS, MUTABLE_KEYS, ProxyParams
from cells.proxy.state import CellDbState, ClusterState, ProxyState
from cells.redact import Redactor
from colony.cell import CellContext, CellSpec, Emission, birth_params
from colony.crashpoints import crash_point
from colony.envelope import Envelope, JsonObject

# python-telegram-bot 22 warns (PTBDeprecationWarning) whenever it reads a time period as an
# int, e.g. inside RetryAfter's constructor; opting into timedelta periods silences that. The
# variable is read at call time, so setting it here (before any bot exists) is enough.
os.environ.setdefault("PTB_TIMEDELTA", "true")

TELEGRAM_MAX_MESSAGE = 4096
"""Telegram's limit on one message's text (UTF-16 code units; characters for most text)."""

Sleep = Callable[[float], Awaitable[None]]

STANDBY_S = 1.0
"""How long a node that does not hold the poller's lease waits before it asks again, when
the cluster's lease is not known."""


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
        birth = birth_params(ProxyParams, spec)
        self.path = spec.path
        self.log = spec.log
        self.token = birth.bot_token
        self.emit_to = birth.emit_to
        self.at_least_once = spec.colony.delivery == "at_least_once"
        self._sleep: Sleep = sleep if sleep is not None else asyncio.sleep
        self.birth = birth
        self.leader = spec.leader
        """Who polls in a cluster (None: a daemon alone, which always does)."""
        self.lease = f"proxy:{spec.path}"
        """The name of the leader lease whose holder polls."""
        cluster = spec.colony.cluster
        self.standby_s = cluster.lease_ms / 3000 if cluster is not None else STANDBY_S
        """How long a node that does not poll waits before it asks for the lease again."""
        self._leading: bool | None = None
        dsn = cluster_dsn(spec)
        self.db: ProxyState
        self.shared: ClusterState | None = None
        """The state in the cluster's database (None: in cell.db, read right here)."""
        self._overlay: dict[str, Any] = {}
        if dsn is None:
            db = CellDbState(spec.state, birth.query_timeout_ms)
            try:
                self.offset = db.offset()
                overlay = db.overlay()
            except sqlite3.Error:
                db.conn.close()
                raise
            self.db = db
            self.params = self._with_overlay(overlay)
        else:
            self.db = self.shared = ClusterState(dsn, spec.path)
            self.offset, self.params = 0, birth
        self._db_errors: tuple[type[Exception], ...] = (QueryTimeoutError, *self.db.errors)
        self._opened = dsn is None
        self._opening = asyncio.Lock()
        if self.shared is not None:
            try:  # ready at once, as on cell.db ...
                offset, overlay = self.shared.open_now(birth.query_timeout_ms)
            except self._db_errors as exc:  # ... or before the first poll or answer
                self._log(
                    "warning",
                    "proxy_state_deferred",
                    error=self.shared.db.describe(exc),
                    detail="the cluster database did not answer; the cell reads its state "
                    "again before its first poll or answer",
                )
            else:
                self.offset, self.params = offset, self._with_overlay(overlay)
                self._opened = True
        _attach_redactor()
        _REDACTOR.hold(self.token)
        self._requests: list[HTTPXRequest] = []
        self._bot_url = ""
        self._bot: Bot | None = None
        self.backoffs: list[tuple[str, float]] = []
        """Every poll backoff taken: ``(kind, seconds)`` with kind ``transient``, ``auth`` or
        ``flood`` (tests read it; the log has the same as ``proxy_poll_backoff``)."""
        self.polls = 0
        """``getUpdates`` requests this instance made (tests read it)."""
        self.io = None if spec.io is None else spec.io.task(spec.path, "telegram_poll")
        """What the poller last did, for ``GET /health`` (None outside a colony)."""

    def _with_overlay(self, overlay: dict[str, Any]) -> ProxyParams:
        """The birth params with the runtime overlay's mutable keys on top (the birth params
        alone when the overlay no longer fits them: logged)."""
        self._overlay = overlay
        mutable = {k: v for k, v in overlay.items() if k in MUTABLE_KEYS}
        try:
            return self.birth.merged(mutable) if mutable else self.birth
        except ValidationError:  # an overlay the birth params no longer admit: ignore it
            self._log("warning", "proxy_params_overlay_ignored", keys=sorted(mutable))
            return self.birth

    async def _open(self) -> None:
        """In a cluster: make the tables, read the cursor and the overlay (once)."""
        if self._opened or self.shared is None:
            return
        async with self._opening:
            if not self._opened:
                offset, overlay = await self.shared.open(self.params.query_timeout_ms)
                self.offset, self.params = offset, self._with_overlay(overlay)
                self._opened = True

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
            if not await self._polls():
                continue
            if self.shared is not None:
                try:
                    await self._refresh(self.shared)
                except self._db_errors as exc:
                    transient = self._next_transient(transient)
                    await self._backoff(
                        "transient",
                        transient,
                        self.shared.db.describe(exc),
                        what="the cursor could not be read from the cluster database",
                    )
                    continue
            p = self.params
            bot = self._bot_for_current_url()
            wait = p.long_poll_request_secs
            read = p.long_poll_timeout_ms / 1000 - wait  # the Bot adds ``wait`` back on
            try:
                self.polls += 1
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
                transient = self._next_transient(transient)
                await self._backoff("transient", transient, exc)
                continue
            transient = 0.0
            if self.io is not None:
                self.io.succeeded()
            if not await self._deliver(ctx, updates):
                transient = self.BACKOFF_FIRST_S
                await self._backoff("transient", transient, "the update cursor was not saved")

    def _next_transient(self, transient: float) -> float:
        return self.BACKOFF_FIRST_S if transient == 0 else min(transient * 2, self.BACKOFF_MAX_S)

    async def _polls(self) -> bool:
        """Whether this node polls this round: always alone; in a cluster while it holds the
        leader lease (asked again before every poll: the lease moves when its holder dies).
        A node without it waits a third of a lease before it asks again."""
        if self.leader is None:
            return True
        held = await self.leader.lead(self.lease)
        if held != self._leading:
            self._leading = held
            if held:
                self._log(
                    "info",
                    "proxy_polling",
                    lease=self.lease,
                    detail="this node holds the proxy's leader lease and polls Telegram",
                )
            else:
                self._log(
                    "info",
                    "proxy_standby",
                    lease=self.lease,
                    detail="another node holds the proxy's leader lease and polls Telegram; "
                    "this node sends answers and asks for the lease again every "
                    f"{self.standby_s:g} s",
                )
        if not held:
            if self.io is not None:
                self.io.standby()
            await asyncio.sleep(self.standby_s)
        return held

    async def _refresh(self, shared: ClusterState) -> None:
        """In a cluster, before each poll: the cursor (another node may have moved it while
        this one did not poll) and the params overlay (a ``params`` update taken in by another
        node) as the database has them."""
        await self._open()
        offset, overlay = await shared.read(self.params.query_timeout_ms)
        self.offset = offset
        if overlay != self._overlay:
            self.params = self._with_overlay(overlay)

    async def _backoff(
        self,
        kind: str,
        seconds: float,
        cause: BaseException | str,
        *,
        what: str = "getUpdates failed",
    ) -> None:
        self.backoffs.append((kind, seconds))
        refused = " (Telegram refuses the bot token)" if kind == "auth" else ""
        if self.io is not None:
            self.io.failed(kind, f"{what}{refused}: {self._scrub(cause)}")
        self._log(
            "warning",
            "proxy_poll_backoff",
            kind=kind,
            delay_s=seconds,
            error=self._scrub(cause),
            detail=f"{what}; the next poll waits{refused}",
        )
        await self._sleep(seconds)

    async def _deliver(self, ctx: CellContext, updates: tuple[Update, ...]) -> bool:
        """Take each update in and move the cursor past it; False when a save failed.

        At-least-once delivery emits first (journalled, keyed by the update id) and then saves
        the cursor: a crash in between fetches the update again and the key drops the copy.
        At-most-once saves the cursor first, as meclaw does: a crash in between loses it.

        In a cluster (at-least-once: the keys are the cluster's, so whichever node's emission
        of an update comes second is dropped) the save is a compare-and-set from the offset
        this poll started at: a node that lost the leader lease while it polled finds the
        cursor moved and stops. It also stops as soon as it knows the lease is gone."""
        for update in sorted(updates, key=lambda u: u.update_id):
            next_offset = update.update_id + 1
            if next_offset <= self.offset:
                continue  # already handled (Telegram sent it again)
            if self.leader is not None and not self.leader.leads(self.lease):
                self._log(
                    "warning",
                    "proxy_lease_lost",
                    lease=self.lease,
                    update_id=update.update_id,
                    detail="this node lost the proxy's leader lease while it polled; what it "
                    "fetched is left to the node that holds the lease",
                )
                return True
            if self.at_least_once:
                await self._emit(ctx, update)
            try:
                saved = await self.db.save_offset(
                    next_offset, self.params.query_timeout_ms, expected=self.offset
                )
            except self._db_errors as exc:
                self._log(
                    "error",
                    "proxy_cursor_save_failed",
                    update_id=update.update_id,
                    error=self._scrub(exc),
                    detail="the update is not emitted; it is fetched again on the next poll",
                )
                return False
            if not saved:
                self._log(
                    "warning",
                    "proxy_cursor_moved",
                    lease=self.lease,
                    update_id=update.update_id,
                    expected=self.offset,
                    detail="another node moved the update cursor (it polls now); this node "
                    "emits nothing more of what it fetched",
                )
                return True
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
        await self._open()
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
        problem = runtime_params.key_problem(
            update, mutable=MUTABLE_KEYS, fixed=IMMUTABLE_KEYS, kind="proxy"
        )
        if problem is not None:
            return "invalid_input", problem
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
        except self.db.errors as exc:
            return "invalid_input", f"{self.db.where} params write failed: {exc}"
        self.params = merged
        self._log("info", "proxy_params_updated", keys=sorted(update))
        return None

    # -- lifecycle ------------------------------------------------------------------------------

    async def close(self) -> None:
        requests, self._requests, self._bot = self._requests, [], None
        if self.leader is not None:  # a closed poller must not keep the cluster's polling
            await self.leader.resign(self.lease)
        try:
            await asyncio.gather(*(r.shutdown() for r in requests), return_exceptions=True)
            await self.db.close()
        finally:
            _REDACTOR.release(self.token)
