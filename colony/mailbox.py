"""Bounded per-cell mailboxes: by message count and by bytes.

Every cell receives through one :class:`Mailbox`; the runtime never touches a queue directly,
so a durable journal or a multi-process backend can replace the in-memory one without changing
cells or the router (decisions.md #14).

A mailbox is full when it holds ``capacity`` messages or, holding at least one, ``max_bytes``
bytes of them (measured as the JSON they would be, :func:`message_bytes`): a count alone let
112 messages of 8 MB exhaust a 1 GB machine. What a cell's handling delivers never waits for
room (:meth:`MemoryMailbox.push`): past the bound it goes to the mailbox's :class:`Overflow`
(see :mod:`colony.overflow`: journal ids under at-least-once delivery), in order, and comes
back as the cell takes messages, so no cycle of cells can deadlock on full mailboxes. A
sender from outside the colony may instead wait for room (:meth:`MemoryMailbox.put`, at-most-
once delivery's backpressure on ingress), in arrival order. Every mailbox of a colony adds what
it holds, and what waits to enter it, to one :class:`ByteGauge`, which ingress admission
compares with the colony's bound.

At boot, what the journal held for the cell is attached as a :class:`Backlog`: it is read a
page at a time, as room frees, and always delivered before anything put later, so a journal
larger than memory is redelivered in order without being loaded whole.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from colony.envelope import Envelope

ENVELOPE_BYTES = 256
"""What an envelope's ids, paths and numbers take as JSON, besides its headers and body."""

_WALK_LIMIT = 1_000_000
"""Objects and arrays looked into, at most, to size one value (a cyclic body from a Python
cell ends here)."""


def json_size(value: Any) -> int:
    """About how many bytes ``value`` takes as JSON: its length written by orjson (a couple
    of microseconds for a usual body, ten times less than walking it in Python), or, for
    what orjson refuses (a cycle, deep nesting, a lone surrogate, an integer past 64 bits),
    an estimate from a walk that needs no stack."""
    kind = type(value)
    if kind is str:
        return len(value) + 2
    if kind is dict or kind is list or kind is tuple:
        try:
            return len(orjson.dumps(value, default=_opaque, option=orjson.OPT_NON_STR_KEYS))
        except TypeError:  # orjson.JSONEncodeError
            return _walk(value)
    return 8


def _opaque(value: Any) -> None:
    """A Python object in a body (a Python cell may emit one) counts as ``null``."""
    return None


def _walk(value: dict[Any, Any] | list[Any] | tuple[Any, ...]) -> int:
    # What orjson refuses (see json_size). Each object or array is sized in one pass over
    # its items: strings and scalars are counted where they are met, only nested ones go on
    # the stack.
    total = 0
    stack: list[Any] = [value]
    budget = _WALK_LIMIT
    while stack and budget:
        budget -= 1
        item = stack.pop()
        if type(item) is dict:
            total += 2 + 4 * len(item) + sum(len(k) if type(k) is str else 8 for k in item)
            parts = item.values()
        else:
            total += 2 + len(item)
            parts = item
        for part in parts:
            kind = type(part)
            if kind is str:
                total += len(part) + 2
            elif kind is dict or kind is list or kind is tuple:
                stack.append(part)
            else:
                total += 8
    return total


class _Last:
    """One-entry caches by identity: follow-ups of one emission and transit copies share
    their body, and a chain shares its context, so most puts size nothing new."""

    body: Any = None
    body_size = 0
    context: Any = None
    context_size = 0
    hop: Any = None
    hop_size = 0


def message_bytes(message: Envelope) -> int:
    """About how many bytes ``message`` takes as JSON (what a mailbox's byte bound counts)."""
    last = _Last
    body, headers = message.body, message.headers
    context, hop = headers.context, headers.hop
    if body is not last.body or body is None:
        last.body, last.body_size = body, json_size(body)
    if context is not last.context:
        last.context, last.context_size = context, json_size(context)
    if hop is not last.hop:
        last.hop, last.hop_size = hop, json_size(hop)
    return (
        ENVELOPE_BYTES + len(message.target) + last.body_size + last.context_size + (last.hop_size)
    )


class ByteGauge:
    """Bytes queued (or waiting to be queued) in every mailbox of one colony."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


@dataclass(frozen=True, slots=True)
class MailboxStatistics:
    capacity: int
    queued: int
    """Messages held, including those still in the journal's backlog."""
    peak: int
    """Most messages ever queued at once."""
    delivered: int
    """Messages put into the mailbox so far."""
    queued_bytes: int = 0
    """Bytes of the messages held in memory."""
    max_bytes: int | None = None


class Backlog(Protocol):
    """Messages to deliver before anything put later (what the journal held at boot)."""

    @property
    def remaining(self) -> int:
        """Messages not yet taken."""
        ...

    async def take(self, count: int, max_bytes: int | None) -> list[tuple[Envelope, int]]:
        """The next messages and their sizes, oldest first: at least one (while any remain),
        at most ``count``, and no more bytes than ``max_bytes`` past the first."""
        ...


class Overflow(Protocol):
    """What a full mailbox keeps aside, in order (:mod:`colony.overflow`)."""

    def __len__(self) -> int: ...

    def add(self, message: Envelope) -> None: ...

    async def take(self, count: int, max_bytes: int | None) -> list[tuple[Envelope, int]]:
        """The oldest messages, as :meth:`Backlog.take` gives them."""
        ...


class Mailbox(Protocol):
    """What a cell receives through. ``put`` waits while the mailbox is full; ``push`` never
    waits (what does not fit goes to the overflow)."""

    @property
    def capacity(self) -> int: ...

    def full(self) -> bool: ...

    def fits(self, count: int, nbytes: int) -> bool:
        """Whether ``count`` more messages of ``nbytes`` would all be held in memory."""
        ...

    async def put(self, message: Envelope) -> None: ...

    def push(self, message: Envelope) -> bool:
        """Queue ``message`` without waiting; True when it went to the overflow."""
        ...

    @property
    def overflowing(self) -> int:
        """Messages in the overflow."""
        ...

    async def get(self) -> Envelope: ...

    def get_nowait(self) -> Envelope | None:
        """The next message, or None when none can be had without waiting."""
        ...

    def attach(self, backlog: Backlog) -> None:
        """Deliver ``backlog`` before anything put later (called before the cell runs)."""
        ...

    def qsize(self) -> int: ...

    def statistics(self) -> MailboxStatistics: ...


class HasMailbox(Protocol):
    """Anything that receives through a mailbox (a cell's runner, as the colony's parts see
    it)."""

    @property
    def mailbox(self) -> Mailbox: ...


class MemoryMailbox:
    """In-process mailbox. Alone it is at-most-once, lost with the process (as in meclaw);
    under at-least-once delivery the colony journals what enters it before it enters (see
    :mod:`colony.journal`), and its overflow keeps only journal ids."""

    __slots__ = (
        "_backlog",
        "_bytes",
        "_capacity",
        "_delivered",
        "_gauge",
        "_max_bytes",
        "_overflow",
        "_peak",
        "_queue",
        "_refill",
        "_room",
        "_source",
        "_turn",
    )

    def __init__(
        self,
        capacity: int,
        *,
        max_bytes: int | None = None,
        gauge: ByteGauge | None = None,
        overflow: Overflow | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"mailbox capacity must be >= 1, got {capacity}")
        self._capacity = capacity
        self._max_bytes = max_bytes
        self._gauge = gauge if gauge is not None else ByteGauge()
        self._overflow = overflow
        """Where :meth:`push` puts what does not fit; delivered after everything in memory."""
        self._queue: asyncio.Queue[tuple[Envelope, int]] = asyncio.Queue()
        """What was put, in order; its bound is kept here, not by the queue."""
        self._bytes = 0
        self._peak = 0
        self._delivered = 0
        self._backlog: deque[tuple[Envelope, int]] = deque()
        """Read from ``_source``, delivered before ``_queue``."""
        self._source: Backlog | None = None
        self._refill = asyncio.Lock()
        self._room = asyncio.Event()
        self._turn = asyncio.Lock()
        """Held by the one sender waiting for room; the others wait for it in arrival order,
        so a put that arrives just as room frees up cannot overtake those already waiting."""

    @property
    def capacity(self) -> int:
        return self._capacity

    def _held(self) -> int:
        return len(self._backlog) + self._queue.qsize()

    def _has_room(self, size: int, count: int = 1) -> bool:
        """Room in memory for ``count`` more messages of ``size`` bytes together (one message
        alone always fits an empty mailbox, however large)."""
        held = self._held()
        if held + count > self._capacity:
            return False
        limit = self._max_bytes
        return limit is None or self._bytes + size <= limit or (held == 0 and count == 1)

    def full(self) -> bool:
        """No room in memory, or an overflow still to deliver first."""
        return not self.fits(1, 0)

    def fits(self, count: int, nbytes: int) -> bool:
        """Whether ``count`` more messages of ``nbytes`` together would all be held in memory
        (none of them overflowing) if they were pushed now."""
        overflow = self._overflow
        return not (overflow is not None and len(overflow)) and self._has_room(nbytes, count)

    @property
    def overflowing(self) -> int:
        """Messages in the overflow."""
        return 0 if self._overflow is None else len(self._overflow)

    def push(self, message: Envelope) -> bool:
        overflow = self._overflow
        if overflow is None:
            raise RuntimeError("push() needs a mailbox made with an overflow")
        if len(overflow):  # keep the order: after what overflowed already
            overflow.add(message)
            self._delivered += 1
            return True
        size = message_bytes(message)
        if not self._has_room(size):
            overflow.add(message)
            self._delivered += 1
            return True
        self._gauge.value += size
        self._queue.put_nowait((message, size))
        self._bytes += size
        self._delivered += 1
        held = self._held()
        if held > self._peak:
            self._peak = held
        return False

    async def put(self, message: Envelope) -> None:
        size = message_bytes(message)
        gauge = self._gauge
        gauge.value += size  # a waiting sender holds its message in memory too
        if self._turn.locked() or not self._has_room(size) or self.overflowing:
            try:
                async with self._turn:
                    while not self._has_room(size) or self.overflowing:
                        self._room.clear()
                        await self._room.wait()
            except BaseException:
                gauge.value -= size
                raise
        self._queue.put_nowait((message, size))
        self._bytes += size
        self._delivered += 1
        held = self._held()
        if held > self._peak:
            self._peak = held

    def _taken(self, size: int) -> None:
        self._bytes -= size
        self._gauge.value -= size
        if self._turn.locked():
            self._room.set()

    async def get(self) -> Envelope:
        while not self._backlog and self._source is not None:
            if not await self._read_backlog():
                break
        while not self._backlog and self._queue.empty() and self.overflowing:
            await self._read_overflow()
        if self._backlog:
            message, size = self._backlog.popleft()
        else:
            message, size = await self._queue.get()
        self._taken(size)
        return message

    def get_nowait(self) -> Envelope | None:
        if self._backlog:
            message, size = self._backlog.popleft()
        elif self._source is not None:
            return None  # the next one is on disk: get() reads it
        else:
            try:
                message, size = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                return None  # (an overflow to read first is get()'s too)
        self._taken(size)
        return message

    async def _read_backlog(self) -> bool:
        """Read the next page of the backlog; False once it is exhausted."""
        async with self._refill:
            source = self._source
            if self._backlog:
                return True
            if source is None:
                return False
            if source.remaining <= 0:
                self._source = None
                return False
            room = max(1, self._capacity - self._held())
            budget = None if self._max_bytes is None else max(0, self._max_bytes - self._bytes)
            page = await source.take(room, budget)
            if not page:
                self._source = None
                return False
            for _, size in page:
                self._bytes += size
                self._gauge.value += size
            self._backlog.extend(page)
            self._delivered += len(page)
            if source.remaining <= 0:
                self._source = None
            return True

    async def _read_overflow(self) -> None:
        """Bring the overflow's oldest messages into memory, as many as there is room for."""
        overflow = self._overflow
        assert overflow is not None
        async with self._refill:
            if self._backlog or not self._queue.empty():
                return
            room = max(1, self._capacity - self._held())
            budget = None if self._max_bytes is None else max(0, self._max_bytes - self._bytes)
            page = await overflow.take(room, budget)
            for _, size in page:
                self._bytes += size
                self._gauge.value += size
            self._backlog.extend(page)
            if self._turn.locked() and not len(overflow):
                self._room.set()  # a waiting put may go once the overflow is gone

    def attach(self, backlog: Backlog) -> None:
        if backlog.remaining > 0:
            self._source = backlog

    def qsize(self) -> int:
        source = self._source
        return self._held() + (source.remaining if source is not None else 0) + self.overflowing

    def statistics(self) -> MailboxStatistics:
        return MailboxStatistics(
            self._capacity, self.qsize(), self._peak, self._delivered, self._bytes, self._max_bytes
        )
