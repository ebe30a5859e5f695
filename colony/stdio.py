"""The stdio bridge (direct mode: neither ``--api`` nor ``--daemon``).

Text mode: each non-empty stdin line is a user turn sent to ``/``; a message that reaches the
root hive and finds no out-edge leaves the colony, and its last assistant text is printed as
one line. JSON mode (``--stdio-format json``): a ``ready`` frame first, then ``message`` frames
in and out, ``error`` frames (``invalid_frame``) for unreadable input. End of input waits for
the colony to go idle, then shuts down cleanly (exit 0).

Input is held to the rules of every ingress: valid UTF-8 text (a line that is not is refused
with one line on stderr, or an ``invalid_frame``), JSON frames without NaN, lone surrogates or
nesting past :data:`colony.jsonwire.MAX_DEPTH`, UBF bodies, and a frame's ``ttl``, ``context``,
``hop`` and ``trace_id`` as :mod:`colony.ingress` checks them for every door. A line the colony
cannot store is reported and the bridge reads on; while the colony refuses input (a full disk)
it holds back.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any, TextIO

from colony import jsonwire
from colony.colony import Colony
from colony.envelope import Envelope
from colony.ids import uuid7
from colony.ingress import IngressRefused, source_message_of
from colony.persist.db import PersistenceError
from colony.persist.escape import storable_text
from colony.ubf import body_problem

STDIO_USER_ID = "73746469-6f5f-7573-6572-5f6964000001"
"""meclaw's fixed stdio user id (the bytes of ``stdio_user_id`` + 0x000001)."""


def line_reader(stream: TextIO) -> Callable[[], str]:
    """``stream.readline`` that never raises on bytes that are not UTF-8: they come back as
    lone surrogates (``surrogateescape``), which the bridge then refuses by name."""
    buffer = getattr(stream, "buffer", None)
    if buffer is None:
        return stream.readline

    def read() -> str:
        line: bytes = buffer.readline()
        return line.decode("utf-8", "surrogateescape")

    return read


def _turn_id_of(frame: Any) -> str | None:
    """A frame's ``context.turn_id`` when it is a string (echoed on an error frame)."""
    context = frame.get("context") if isinstance(frame, dict) else None
    turn_id = context.get("turn_id") if isinstance(context, dict) else None
    return turn_id if isinstance(turn_id, str) else None


def last_assistant_text(body: Any) -> str | None:
    turns = body.get("messages") if isinstance(body, dict) else None
    for turn in reversed(turns or []):
        if (
            isinstance(turn, dict)
            and turn.get("origin") == "assistant"
            and turn.get("type") == "text"
        ):
            text = turn.get("text")
            return text if isinstance(text, str) else None
    return None


class StdioBridge:
    def __init__(
        self, colony: Colony, *, json_mode: bool, version: str, out: TextIO | None = None
    ) -> None:
        self.colony = colony
        self.json_mode = json_mode
        self.version = version
        self.out = out or sys.stdout
        self.chat_id = uuid7()

    def _write(self, line: str) -> None:
        # What a cell emits may hold a lone surrogate; the terminal gets it spelled \udXXX.
        self.out.write(storable_text(line) + "\n")
        self.out.flush()

    async def egress(self, message: Envelope) -> None:
        """A message that left the colony at the root hive."""
        if self.json_mode:
            frame = {
                "v": 1,
                "type": "message",
                "trace_id": message.trace_id,
                "context": message.headers.context,
                "body": message.body,
            }
            self._write(jsonwire.dumps(frame))
            return
        text = last_assistant_text(message.body)
        if text is None:
            self.colony.log.warning(
                "stdio_egress_discarded",
                trace_id=message.trace_id,
                detail="the message left the colony without an assistant text turn to print",
            )
            return
        self._write(text)

    def _frame_error(self, detail: str, turn_id: str | None = None) -> None:
        """An ``error`` frame; it echoes the refused frame's ``context.turn_id`` when it had
        one, so a parent with several requests in flight (a ``subcolony`` cell) can tell
        which of them was refused instead of waiting for it to time out."""
        frame: dict[str, Any] = {
            "v": 1,
            "type": "error",
            "error_code": "invalid_frame",
            "detail": detail,
        }
        if turn_id is not None:
            frame["context"] = {"turn_id": turn_id}
        self._write(jsonwire.dumps(frame))

    def _refuse(self, detail: str) -> None:
        """An input line the bridge does not send: said where the user looks."""
        self.colony.log.warning("stdio_input_refused", detail=detail)
        if self.json_mode:
            self._frame_error(detail)
        else:
            sys.stderr.write(f"meclaw: {detail}\n")
            sys.stderr.flush()

    def _context(self) -> dict[str, str]:
        """What stdio puts in a turn's context unless the frame gave it."""
        return {"user_id": STDIO_USER_ID, "chat_id": self.chat_id, "turn_id": uuid7()}

    def message_for(self, line: str) -> Envelope | None:
        config = self.colony.config
        try:
            line.encode("utf-8")
        except UnicodeEncodeError:
            self._refuse("the input line is not valid UTF-8 text; it was not sent")
            return None
        if not self.json_mode:
            turn = {"origin": "user", "type": "text", "text": line}
            text_body = {"messages": [turn]}
            return source_message_of("/", text_body, config, context_defaults=self._context())
        try:
            frame = jsonwire.loads(line.encode("utf-8"), "the frame")
        except jsonwire.JsonRefused as exc:
            self._frame_error(exc.detail)
            return None
        turn_id = _turn_id_of(frame)
        if not isinstance(frame, dict) or frame.get("v") != 1 or frame.get("type") != "message":
            self._frame_error('a frame is {"v": 1, "type": "message", "body": {...}}', turn_id)
            return None
        body = frame.get("body")
        problem = body_problem(body) if isinstance(body, dict) else "body must be an object"
        if problem is not None:
            self._frame_error(problem, turn_id)
            return None
        try:
            return source_message_of(
                "/",
                body,
                config,
                ttl=frame.get("ttl"),
                context=frame.get("context"),
                hop=frame.get("hop"),
                trace_id=frame.get("trace_id"),
                context_defaults=self._context(),
            )
        except IngressRefused as exc:
            self._frame_error(exc.detail, turn_id)
            return None

    async def run(self, read_line: Callable[[], str]) -> None:
        """Feed stdin lines until end of input, then wait for the colony to go idle."""
        if self.json_mode:
            self._write(jsonwire.dumps({"v": 1, "type": "ready", "version": self.version}))
        while True:
            line = await asyncio.to_thread(read_line)
            if line == "":
                break
            line = line.strip()
            if not line:
                continue
            message = self.message_for(line)
            if message is not None:
                await self._admitted(len(line.encode("utf-8")))
                try:
                    await self.colony.send(message)
                except PersistenceError as exc:  # the colony logged it; the user sees it here
                    self._refuse(f"the input was not taken in: {exc}")
        await self.colony.wait_idle()

    async def _admitted(self, nbytes: int) -> None:
        """Wait while the colony refuses new input (disk full, over its memory bound): stdin
        is a stream, so the bridge holds the line back, it does not drop it."""
        refusal = self.colony.admission(nbytes)
        if refusal is None:
            return
        self.colony.log.warning(
            "stdio_input_held",
            reason=refusal.token,
            detail=f"{refusal.detail}; the bridge reads no more input until the colony takes it",
        )
        while refusal is not None:
            await asyncio.sleep(max(refusal.retry_after_s, 0.1))
            refusal = self.colony.admission(nbytes)
