"""Bounded per-cell mailboxes.

Every cell receives through one :class:`Mailbox`; the runtime never touches a queue directly,
so a durable journal or a multi-process backend can replace the in-memory one without changing
cells or the router (decisions.md #14). The in-memory mailbox is an ``asyncio.Queue``: anyio's
memory streams measured 4x slower for this hand-off.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from colony.envelope import Envelope


@dataclass(frozen=True, slots=True)
class MailboxStatistics:
    capacity: int
    queued: int
    peak: int
    """Most messages ever queued at once."""
    delivered: int
    """Messages put into the mailbox so far."""


class Mailbox(Protocol):
    """What a cell receives through. ``put`` blocks while the mailbox is full."""

    @property
    def capacity(self) -> int: ...

    def full(self) -> bool: ...

    async def put(self, message: Envelope) -> None: ...

    async def get(self) -> Envelope: ...

    def get_nowait(self) -> Envelope | None:
        """The next message, or None when the mailbox is empty."""
        ...

    def drain(self) -> list[Envelope]:
        """Take every queued message (used when a cell is retired)."""
        ...

    def preload(self, message: Envelope) -> None:
        """Queue a message ahead of every later ``put``, past the capacity: what the journal
        gives back at boot, before any cell runs."""
        ...

    def qsize(self) -> int: ...

    def statistics(self) -> MailboxStatistics: ...


class MemoryMailbox:
    """In-process mailbox. Alone it is at-most-once, lost with the process (as in meclaw);
    under at-least-once delivery the colony journals what enters it (see ``Colony.unit``)."""

    __slots__ = ("_backlog", "_capacity", "_delivered", "_peak", "_queue", "_turn")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"mailbox capacity must be >= 1, got {capacity}")
        self._capacity = capacity
        self._queue: asyncio.Queue[Envelope] = asyncio.Queue(capacity)
        self._peak = 0
        self._delivered = 0
        self._backlog: deque[Envelope] = deque()
        self._turn = asyncio.Lock()
        """Held by the one sender waiting for room; the others wait for it in arrival order.
        A bare ``asyncio.Queue`` lets a put that arrives just as room frees up overtake the
        senders already waiting."""

    @property
    def capacity(self) -> int:
        return self._capacity

    def full(self) -> bool:
        return self._queue.full()

    async def put(self, message: Envelope) -> None:
        if self._turn.locked() or self._queue.full():
            async with self._turn:
                await self._queue.put(message)
        else:
            self._queue.put_nowait(message)
        self._delivered += 1
        size = self._queue.qsize()
        if size > self._peak:
            self._peak = size

    async def get(self) -> Envelope:
        if self._backlog:
            return self._backlog.popleft()
        return await self._queue.get()

    def get_nowait(self) -> Envelope | None:
        if self._backlog:
            return self._backlog.popleft()
        try:
            return self._queue.get_nowait()
        except asyncio.QueueEmpty:
            return None

    def drain(self) -> list[Envelope]:
        out: list[Envelope] = []
        while True:
            message = self.get_nowait()
            if message is None:
                return out
            out.append(message)

    def preload(self, message: Envelope) -> None:
        self._backlog.append(message)
        self._delivered += 1

    def qsize(self) -> int:
        return len(self._backlog) + self._queue.qsize()

    def statistics(self) -> MailboxStatistics:
        return MailboxStatistics(self._capacity, self.qsize(), self._peak, self._delivered)
