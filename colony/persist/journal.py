"""Reading the journal at boot, a page at a time.

At boot the journal holds what was in the mailboxes when the daemon last stopped: possibly
more than memory. Nothing reads it whole. :class:`JournalSnapshot` fixes the rows that count
(``seq`` up to the largest at boot: later rows are deliveries of this run) and counts them per
cell in one pass that decodes nothing; each cell's mailbox then reads its own rows in order,
a page at a time, as room frees (:class:`CellBacklog`, through the ``journal(cell, seq)``
index). Every read opens its own read-only connection, so pages are read off the event loop.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path

from colony.envelope import Envelope
from colony.persist.schema import connect

PAGE = 1000
"""Rows read at once, at most."""


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """A message that was in a mailbox when the daemon last stopped."""

    seq: int
    cell: str
    """The cell's path as stored (a surrogate spelled ``\\udXXX``; see persist/escape.py)."""
    sender: str
    message: Envelope
    size: int
    """Characters of its stored JSON: what it counts against a mailbox's byte bound."""


ENVELOPE_PAIR = "'[' || envelope || ',' || body || ']'"
"""SQL for a journal row's ``[envelope, body]`` as one JSON text (see :func:`stored_envelope`)."""

_ROW = f"SELECT seq, cell, sender, {ENVELOPE_PAIR} FROM journal "

_decode = json.JSONDecoder().raw_decode  # loads() minus its checks, for our own text


def stored_envelope(pair: str) -> Envelope:
    """The envelope of a journal row, from its :data:`ENVELOPE_PAIR` text (the body is kept
    apart in the row, so a body shared by follow-ups is stored once)."""
    (doc, body), _ = _decode(pair)
    doc["body_payload"] = body
    return Envelope.from_json(doc)


class JournalSnapshot:
    """The journal rows present when it was made, read a page at a time (blocking calls:
    run them in a thread)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        conn = connect(str(path), readonly=True)
        try:
            self.upto: int = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM journal").fetchone()[0]
            self.cells: dict[str, int] = dict(
                conn.execute(
                    "SELECT cell, COUNT(*) FROM journal WHERE seq <= ? GROUP BY cell", (self.upto,)
                ).fetchall()
            )
        finally:
            conn.close()

    @property
    def total(self) -> int:
        return sum(self.cells.values())

    def head(self, limit: int) -> list[JournalEntry]:
        """The oldest ``limit`` rows of every cell together."""
        return self._read(_ROW + "WHERE seq <= ? ORDER BY seq LIMIT ?", (self.upto, limit), None)

    def page(
        self, cell: str, after: int, limit: int = PAGE, max_bytes: int | None = None
    ) -> list[JournalEntry]:
        """``cell``'s rows after ``seq`` ``after``, oldest first: at least one (if any is
        left), at most ``limit``, and no more than ``max_bytes`` past the first."""
        return self._read(
            _ROW + "WHERE cell = ? AND seq > ? AND seq <= ? ORDER BY seq LIMIT ?",
            (cell, after, self.upto, max(1, min(limit, PAGE))),
            max_bytes,
        )

    def _read(
        self, sql: str, args: tuple[object, ...], max_bytes: int | None
    ) -> list[JournalEntry]:
        out: list[JournalEntry] = []
        taken = 0
        conn = connect(str(self.path), readonly=True)
        try:
            for seq, cell, sender, pair in conn.execute(sql, args):
                size = len(pair)
                if out and max_bytes is not None and taken + size > max_bytes:
                    break
                out.append(JournalEntry(seq, cell, sender, stored_envelope(pair), size))
                taken += size
        finally:
            conn.close()
        return out


class CellBacklog:
    """One cell's journalled messages, fed to its mailbox as room frees (a
    :class:`colony.mailbox.Backlog`)."""

    def __init__(self, snapshot: JournalSnapshot, cell: str) -> None:
        self._snapshot = snapshot
        self._cell = cell
        self._after = 0
        self._remaining = snapshot.cells.get(cell, 0)

    @property
    def remaining(self) -> int:
        return self._remaining

    async def take(self, count: int, max_bytes: int | None) -> list[tuple[Envelope, int]]:
        if self._remaining <= 0:
            return []
        page = await asyncio.to_thread(
            self._snapshot.page, self._cell, self._after, count, max_bytes
        )
        if not page:  # rows gone meanwhile (they never are: only this run acks them)
            self._remaining = 0
            return []
        self._after = page[-1].seq
        self._remaining -= len(page)
        return [(entry.message, entry.size) for entry in page]
