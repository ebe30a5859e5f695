"""Where a delivery goes when its mailbox is full: an overflow, never a waiting sender.

A sender that waited for room in a full mailbox could deadlock a cycle (llm → tools →
collector ⇄ store → llm): once enough conversations are in flight, every cell on the cycle
waits for the next one and none takes a message again. So a cell's deliveries never wait; what
does not fit goes to the mailbox's overflow, in order, and comes back a page at a time as the
cell takes messages:

* :class:`JournalOverflow` (at-least-once delivery): the message is already a journal row in
  ``colony.db``, committed before it is delivered, so the overflow keeps only its id (about a
  hundred bytes) and reads the rows back by id. Memory stays bounded in bytes whatever the
  backlog; the bytes on disk are counted in a :class:`colony.mailbox.ByteGauge` that ingress
  admission compares with ``queued_max_bytes``.
* :class:`MemoryOverflow` (at-most-once delivery): there is no journal, so the messages are
  kept in memory, counted in the colony's byte gauge like the mailboxes themselves.
"""

from __future__ import annotations

import asyncio
from collections import deque
from pathlib import Path

from colony.envelope import Envelope
from colony.mailbox import ByteGauge, message_bytes
from colony.persist.escape import storable_text
from colony.persist.journal import ENVELOPE_PAIR, stored_envelope
from colony.persist.schema import connect

_PAGE = 500
"""Ids looked up per query, at most."""


class JournalOverflow:
    """A mailbox's overflow kept as journal ids; the rows are read back by id. A delivery that
    would overflow never runs ahead of its commit (:mod:`colony.journal`), so every id here
    has its row."""

    __slots__ = ("_cell", "_gauge", "_ids", "_path")

    def __init__(self, path: Path, cell: str, gauge: ByteGauge) -> None:
        self._path = path
        self._cell = storable_text(cell)  # as the journal stores the path
        self._gauge = gauge
        self._ids: deque[tuple[str, int]] = deque()
        """``(message id, size)`` in delivery order."""

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, message: Envelope) -> None:
        size = message_bytes(message)
        self._ids.append((storable_text(message.id), size))
        self._gauge.value += size

    async def take(self, count: int, max_bytes: int | None) -> list[tuple[Envelope, int]]:
        """The oldest messages: at least one (while any remain), at most ``count``, and no more
        than ``max_bytes`` past the first."""
        wanted: list[tuple[str, int]] = []
        total = 0
        for entry in self._ids:
            if len(wanted) >= min(count, _PAGE):
                break
            if wanted and max_bytes is not None and total + entry[1] > max_bytes:
                break
            wanted.append(entry)
            total += entry[1]
        if not wanted:
            return []
        found = await asyncio.to_thread(self._read, [i for i, _ in wanted])
        for _ in wanted:
            self._ids.popleft()
        self._gauge.value -= total
        # A row that is gone was settled another way (it cannot be: only its cell acks it).
        return [(found[i], size) for i, size in wanted if i in found]

    def _read(self, ids: list[str]) -> dict[str, Envelope]:
        marks = ",".join("?" * len(ids))
        sql = f"SELECT id, {ENVELOPE_PAIR} FROM journal WHERE id IN ({marks}) AND cell = ?"
        out: dict[str, Envelope] = {}
        conn = connect(str(self._path), readonly=True)
        try:
            for row_id, pair in conn.execute(sql, (*ids, self._cell)):
                out[row_id] = stored_envelope(pair)
        finally:
            conn.close()
        return out


class MemoryOverflow:
    """A mailbox's overflow kept in memory (at-most-once delivery: there is no journal)."""

    __slots__ = ("_gauge", "_held")

    def __init__(self, gauge: ByteGauge) -> None:
        self._gauge = gauge
        self._held: deque[tuple[Envelope, int]] = deque()

    def __len__(self) -> int:
        return len(self._held)

    def add(self, message: Envelope) -> None:
        size = message_bytes(message)
        self._held.append((message, size))
        self._gauge.value += size

    async def take(self, count: int, max_bytes: int | None) -> list[tuple[Envelope, int]]:
        out: list[tuple[Envelope, int]] = []
        total = 0
        while self._held and len(out) < count:
            size = self._held[0][1]
            if out and max_bytes is not None and total + size > max_bytes:
                break
            out.append(self._held.popleft())
            total += size
        self._gauge.value -= total
        return out
