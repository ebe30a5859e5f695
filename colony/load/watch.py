"""Watching a running colony from outside: its journal's depth and whether it still moves.

The journal (``colony.db``, table ``journal``) holds one row per message queued or in hand:
its row count is how much work is in flight, and a journal whose rows neither come nor go
means nothing is delivered and nothing acknowledged — the colony stands still. Every read
opens its own read-only connection off the event loop, so the same watch serves a colony in
this process and a daemon in another.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any


def _rows(db: Path, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]] | None:
    """The rows of ``sql`` on a read-only connection, or None when the file or table is not
    there yet, or stayed busy past the timeout."""
    if not db.exists():
        return None
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error:
        return None
    try:
        return conn.execute(sql, args).fetchall()
    except sqlite3.Error:  # not created yet, or busy past the timeout: no sample
        return None
    finally:
        conn.close()


def _read(db: Path, sql: str) -> tuple[int, ...] | None:
    rows = _rows(db, sql)
    return None if not rows else tuple(int(v) for v in rows[0])


class JournalWatch:
    """Samples of one ``colony.db``'s journal: depth now, the peak, when it last moved."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.depth = 0
        self.peak = 0
        self._state: tuple[int, ...] | None = None
        self._moved_at = time.monotonic()

    async def sample(self) -> None:
        state = await asyncio.to_thread(
            _read, self.db, "SELECT COUNT(*), COALESCE(MAX(seq), 0) FROM journal"
        )
        if state is None:
            return
        self.depth = state[0]
        self.peak = max(self.peak, self.depth)
        if state != self._state:
            self._state = state
            self._moved_at = time.monotonic()

    def moved(self) -> None:
        """Something else showed progress (an answer, say): the stall clock starts again."""
        self._moved_at = time.monotonic()

    def still_for(self) -> float:
        """Seconds since the journal last changed (rows came or went)."""
        return time.monotonic() - self._moved_at

    def dead_letters(self) -> int:
        """Dead letters committed so far (a blocking read)."""
        state = _read(self.db, "SELECT COUNT(*) FROM dead_letters")
        return 0 if state is None else state[0]

    def dead_letter_kinds(self, limit: int = 5) -> list[str]:
        """The most frequent dead letters so far, one line per (code, cell) with its count and
        one detail, so a failed run says why its messages died (a blocking read)."""
        rows = _rows(
            self.db,
            "SELECT error_code, resolved_target, COUNT(*), MIN(COALESCE(detail, '')) "
            "FROM dead_letters GROUP BY error_code, resolved_target "
            "ORDER BY COUNT(*) DESC LIMIT ?",
            (limit,),
        )
        return [
            f"{code} at {cell}: {count}" + (f" ({detail[:200]})" if detail else "")
            for code, cell, count, detail in rows or ()
        ]


def peak_rss_mb(pid: int) -> float | None:
    """The peak resident memory of process ``pid`` so far (Linux ``VmHWM``), or None."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return None
