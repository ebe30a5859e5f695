"""The ``subcolony`` cell: a whole child colony behind one path of this one.

Long-running. Its I/O loop (:meth:`SubcolonyCell.run`) starts the child
(:mod:`cells.subcolony.child`), waits for its ``ready`` frame and then reads its frames: a
frame carrying the ``context.turn_id`` of a pending request answers it, any other goes to
``params.emit_to`` (or is logged and dropped). Messages that reach the cell
(:meth:`SubcolonyCell.handle`) are requests: the body crosses with the trace id, one TTL unit
less, the mapped context keys and a fresh ``turn_id``; the child's answer comes back as one
``subcolony_event: "reply"`` emission on the requester's trace. Requests overlap (the type
handles concurrently), paired with their replies by ``turn_id``.

A boot that cannot succeed (the program is missing, it speaks another protocol, it never says
``ready``) leaves the cell up, answering every request with that error: restarting would fail
the same way. A params update (any, even ``{"params": {}}``) boots it again. A child that dies
after its boot fails the requests in flight with ``subcolony_gone``, then the I/O loop raises,
so the cell restarts (a new child) under its restart limit. A crash in :meth:`handle` restarts
the cell too; the runner lets the requests still in hand settle first (each bounded by
``request_timeout_ms``: long-running cells have no ``message_timeout`` backstop), then closes
this instance, and with it the child.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections import deque
from pathlib import Path
from typing import Any

from cells.cellfile import ParamsOverlay, QueryTimeoutError, bounded, open_cell_db
from cells.subcolony.child import PROTOCOL, BootFailedError, ChildColony, Launch, encode_frame
from cells.subcolony.params import (
    RESERVED_CONTEXT_KEY,
    SubcolonyParams,
    resolve_root,
    update_problem,
)
from colony.cell import CellContext, CellSpec, Emission, birth_params
from colony.envelope import Envelope, JsonObject
from colony.ids import uuid7

__all__ = ["CHAIN_VARIABLE", "ChildGoneError", "SubcolonyCell"]

CHAIN_VARIABLE = "MECLAW_SUBCOLONY_ROOTS"
"""The roots of the colonies above a child, the topmost (which runs without it) first and the
child's own last (``os.pathsep``-joined), set for every child: a subcolony whose root is one of
them, or the root of its own colony, refuses to boot it, instead of starting colonies without
end."""
LATE_KEPT = 1024
"""Answered turn ids remembered, so a second frame for a request is not taken as unsolicited."""

Answer = tuple[str, Any]
"""``("reply", body)`` or (an error code, its detail)."""


class ChildGoneError(Exception):
    """The child colony ended after its boot (the cell restarts with a new one)."""


def _chain(spec: CellSpec) -> list[str]:
    """The roots a child must not have: those the daemon was started with
    (``MECLAW_SUBCOLONY_ROOTS``, set when this colony is itself a child) and this colony's own
    tree root, so a tree whose subcolony points at itself is refused before a second copy runs.

    The tree root is the cell's folder less one folder per path segment, and one more for the
    root node's folder (every segment of a colony path is one folder below the root's)."""
    above = [r for r in os.environ.get(CHAIN_VARIABLE, "").split(os.pathsep) if r]
    if spec.folder is not None:
        depth = len([part for part in spec.path.split("/") if part])
        own = str(Path(spec.folder).absolute().parents[depth].resolve())
        if own not in above:
            above.append(own)
    return above


def _error(code: str, detail: str) -> JsonObject:
    return {
        "header": {"subcolony_event": "error", "error_code": code},
        "messages": [{"origin": "assistant", "type": "text", "text": detail}],
    }


class SubcolonyCell:
    """One child colony. See the module docstring; ``docs/cells/subcolony.md`` for the
    contract."""

    def __init__(self, spec: CellSpec) -> None:
        birth = birth_params(SubcolonyParams, spec)
        self.path = spec.path
        self.log = spec.log
        self.birth = birth
        self.root = resolve_root(birth.root, spec.folder)
        self.chain = _chain(spec)
        """The roots of this colony and of those above it: a child at one of them is refused."""
        self.state_dir: Path | None = None
        """Where the child keeps its state when this colony's state is outside its tree."""
        if spec.state is not None and spec.folder is not None and spec.state != spec.folder:
            self.state_dir = Path(spec.state) / "child"
        self.conn, _ = open_cell_db(spec.state)
        try:
            self.overlay = ParamsOverlay(self.conn, "subcolony_params")
            self.params = birth.merged(self.overlay.read())
        except Exception:
            self.conn.close()
            raise
        self.io = None if spec.io is None else spec.io.task(spec.path, "subcolony_child")
        self.child: ChildColony | None = None
        self.ready = asyncio.Event()
        """Set once the boot ended, ready or not."""
        self.unusable: tuple[str, str] | None = None
        """The boot failure every request is answered with (the cell stays up)."""
        self._retry = asyncio.Event()
        """Set by a params update after a boot failure: boot again."""
        self.gone: str | None = None
        """Why requests can no longer cross (the child ended, or the cell is closing)."""
        self.pending: dict[str, asyncio.Future[Answer]] = {}
        self._answered: deque[str] = deque(maxlen=LATE_KEPT)
        self._ctx: CellContext | None = None

    # -- logging ---------------------------------------------------------------------------

    def _log(self, level: str, event: str, **fields: Any) -> None:
        if self.log is not None:
            getattr(self.log, level)(event, cell=self.path, **fields)

    def _child_log(self, line: str) -> None:
        self._log("debug", "subcolony_child_output", line=line)

    # -- the I/O loop ----------------------------------------------------------------------

    def launch(self) -> Launch:
        """How the child is started (raises :class:`BootFailedError` when it cannot be)."""
        p = self.params
        env = {key: os.environ[key] for key in p.env_passthrough if key in os.environ}
        env.update(p.env)
        if str(self.root) in self.chain:
            raise BootFailedError(
                "subcolony_unavailable",
                f"root {self.root} is this colony or one already running above it; starting "
                "it again would start colonies without end",
            )
        env[CHAIN_VARIABLE] = os.pathsep.join([*self.chain, str(self.root)])
        if p.command is None:
            argv = [sys.executable, "-P", "-m", "colony"]
        else:
            found = (
                p.command
                if os.sep in p.command
                else shutil.which(p.command, path=env.get("PATH", os.defpath))
            )
            if found is None:
                raise BootFailedError(
                    "subcolony_unavailable",
                    f"command {p.command!r} is not on the child's PATH "
                    f"({env.get('PATH', '(no PATH passed through)')})",
                )
            argv = [found]
        argv += ["--root", str(self.root), "--stdio-format", "json"]
        if self.state_dir is not None:
            argv += ["--state-dir", str(self.state_dir)]
        return Launch(argv, env, self.root)

    async def run(self, ctx: CellContext) -> None:
        self._ctx = ctx
        try:
            child = await self._boot()
            while child is None:  # up, refusing: a restart would fail the same way
                await self._retry.wait()
                self._retry.clear()
                self.unusable = None
                self.ready.clear()
                self._log(
                    "info",
                    "subcolony_boot_retried",
                    detail="a params update came after the boot failed: the child colony is "
                    "started again",
                )
                child = await self._boot()
        except BaseException as exc:  # requests waiting for the boot must not wait for ever
            if not self.ready.is_set():
                self.unusable = (
                    "subcolony_unavailable",
                    "the cell stopped during the child colony's boot"
                    if isinstance(exc, asyncio.CancelledError)
                    else f"the child colony's boot ended in {type(exc).__name__}: {exc} (the "
                    "cell restarts)",
                )
                self.ready.set()
            raise
        self.child = child
        self.ready.set()
        if self.io is not None:
            self.io.succeeded()
        self._log("info", "subcolony_ready", pid=child.pid, child_version=child.version)
        try:
            async for frame in child.frames():
                await self._take(frame)
            if not await child.exited_within(self.params.kill_grace_ms / 1000):
                await child.kill()  # it closed its stdout but lives on: it can answer nothing
            detail = f"the child colony ended ({child.exit_text()}){child.said()}"
            self.gone = detail
            if self.io is not None:
                self.io.failed("subcolony_gone", detail)
            self._log(
                "error", "subcolony_gone", pid=child.pid, detail=f"{detail}; the cell restarts"
            )
            raise ChildGoneError(detail)
        finally:  # however reading ended, nobody waits for a reply that cannot come
            self.gone = self.gone or "the cell stopped reading the child colony (it restarts)"
            self._fail_pending("subcolony_gone", self.gone)

    async def _boot(self) -> ChildColony | None:
        """A child that said ``ready``, or None when it cannot boot (the reason is then
        :attr:`unusable`, and every request is answered with it until a retry)."""
        try:
            if not self.root.is_dir():
                raise BootFailedError(
                    "subcolony_unavailable", f"root {self.root} is not an existing directory"
                )
            return await ChildColony.start(
                self.launch(), self.params.boot_timeout_ms / 1000, self._child_log
            )
        except BootFailedError as failure:
            self.unusable = (failure.code, failure.detail)
            self.ready.set()
            if self.io is not None:
                self.io.failed(failure.code, failure.detail)
            self._log(
                "error",
                "subcolony_boot_failed",
                error_code=failure.code,
                detail=f"{failure.detail}; every request is answered with {failure.code} until "
                "the cell gets a params update ('{\"params\": {}}' will do, or a longer "
                "boot_timeout_ms), which boots the child again, or the daemon restarts",
            )
            return None

    async def _take(self, frame: dict[str, Any]) -> None:
        """One frame from the child: a reply, an error, or something it sent on its own."""
        kind = frame.get("type")
        context = frame.get("context")
        turn = context.get(RESERVED_CONTEXT_KEY) if isinstance(context, dict) else None
        turn = turn if isinstance(turn, str) else frame.get(RESERVED_CONTEXT_KEY)
        waiting = self.pending.get(turn) if isinstance(turn, str) else None
        if frame.get("v") != PROTOCOL or kind not in ("message", "error"):
            self._log("warning", "subcolony_frame_skipped", detail=f"not a v1 frame: {kind!r}")
            return
        if kind == "error":
            detail = (
                f"the child colony reported {frame.get('error_code', 'an error')}: "
                f"{frame.get('detail', 'no detail')}"
            )
            if waiting is not None and not waiting.done():
                waiting.set_result(("child_error", detail))
            else:
                self._log("warning", "subcolony_child_error_unpaired", detail=detail)
            return
        body = frame.get("body")
        if waiting is not None:
            if not waiting.done():
                waiting.set_result(("reply", body))
            return
        if isinstance(turn, str) and turn in self._answered:
            self._log(
                "info",
                "subcolony_late_frame",
                turn_id=turn,
                detail="a further frame for a request already answered is dropped",
            )
            return
        await self._unsolicited(body)

    async def _unsolicited(self, body: Any) -> None:
        target = self.params.emit_to
        messages = body.get("messages") if isinstance(body, dict) else None
        if target is None or self._ctx is None:
            self._log(
                "warning",
                "subcolony_unsolicited_dropped",
                detail="the child colony sent a frame no request waits for, and no emit_to "
                "is set; it is dropped",
            )
            return
        if not isinstance(messages, list):
            self._log(
                "warning",
                "subcolony_unsolicited_dropped",
                detail="an unsolicited frame without a messages array is dropped",
            )
            return
        content = {"header": {"subcolony_event": "unsolicited"}, "messages": messages}
        try:
            await self._ctx.emit(content, target)
        except Exception as exc:  # routing trouble must not end the child
            self._log("error", "subcolony_emit_failed", error=f"{type(exc).__name__}: {exc}")

    def _fail_pending(self, code: str, detail: str) -> None:
        pending, self.pending = self.pending, {}
        for waiting in pending.values():
            if not waiting.done():
                waiting.set_result((code, detail))

    # -- requests ----------------------------------------------------------------------------

    async def handle(self, message: Envelope) -> list[Emission] | None:
        code, value = await self._answer(message)
        if code == "reply":
            content = {"header": {"subcolony_event": "reply"}, "messages": value}
            return [Emission(content, message.reply_to or message.target)]
        if code == "silent":
            return None
        self._log(
            "warning",
            "subcolony_request_failed",
            error_code=code,
            trace_id=message.trace_id,
            message_id=message.id,
            detail=value,
        )
        return [Emission(_error(code, str(value)), message.reply_to or message.target)]

    async def _answer(self, message: Envelope) -> Answer:
        body = message.body
        if not isinstance(body, dict):
            return "invalid_input", "the body must be a JSON object"
        if "params" in body:
            return await self._update_params(body["params"])
        if not isinstance(body.get("messages"), list):
            return "invalid_input", "the body has no messages array; the child takes turns"
        if message.ttl <= 1:
            return (
                "ttl_exhausted",
                f"the message has {message.ttl} routing decision(s) left; crossing into the "
                "child colony needs at least one for the child",
            )
        await self.ready.wait()
        if self.unusable is not None:
            return self.unusable
        child = self.child
        if self.gone is not None or child is None:
            return "subcolony_gone", self.gone or "the child colony is not running"
        turn = uuid7()
        context: JsonObject = {
            target: message.context[source]
            for source, target in self.params.context_in.items()
            if source in message.context
        }
        context[RESERVED_CONTEXT_KEY] = turn
        frame = {
            "v": PROTOCOL,
            "type": "message",
            "trace_id": message.trace_id,
            "ttl": message.ttl - 1,
            "context": context,
            "body": body,
        }
        try:
            data = encode_frame(frame)
        except ValueError as exc:
            return (
                "invalid_input",
                "the body cannot cross to the child colony: it holds a number JSON cannot carry "
                f"(NaN or an infinity) or text that is not valid Unicode ({exc})",
            )
        waiting: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self.pending[turn] = waiting
        p = self.params
        try:
            try:
                await child.write(data, p.external_timeout_ms / 1000)
            except TimeoutError:
                return (
                    "request_timeout",
                    f"the child colony did not take the request within external_timeout_ms "
                    f"({p.external_timeout_ms} ms)",
                )
            except (OSError, RuntimeError) as exc:
                return "subcolony_gone", f"the child colony's input is closed: {exc}"
            try:
                async with asyncio.timeout(p.request_timeout_ms / 1000):
                    kind, value = await waiting
            except TimeoutError:
                return (
                    "request_timeout",
                    f"the child colony did not reply within request_timeout_ms "
                    f"({p.request_timeout_ms} ms)",
                )
        finally:
            self.pending.pop(turn, None)
            self._answered.append(turn)
        if kind != "reply":
            return kind, value
        turns = value.get("messages") if isinstance(value, dict) else None
        if not isinstance(turns, list):
            return "child_error", "the child colony's reply has no messages array"
        return "reply", turns

    async def _update_params(self, update: Any) -> Answer:
        """The ``params`` body slot: checked whole, persisted, applied; silent on success."""
        problem = update_problem(update)
        if problem is not None:
            return "invalid_input", problem
        merged = self.params.merged(update)
        try:
            with bounded(self.conn, self.params.query_timeout_ms):
                self.overlay.save(update)
        except QueryTimeoutError as exc:
            return "query_timeout", f"the params update was not applied: {exc}"
        self.params = merged
        self._log("info", "subcolony_params_updated", keys=sorted(update))
        if self.unusable is not None:
            self._retry.set()
        return "silent", None

    # -- lifecycle -------------------------------------------------------------------------

    async def close(self) -> None:
        self.gone = self.gone or "the cell is stopping"
        self._fail_pending("subcolony_gone", self.gone)
        child, self.child = self.child, None
        try:
            if child is not None:
                await child.close(self.params.kill_grace_ms / 1000)
        finally:
            self.conn.close()
