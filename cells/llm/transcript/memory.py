"""The in-process store: a dict under one lock. Valid for one process only — behind a load
balancer another replica would answer 404."""

from __future__ import annotations

import asyncio
import time

from cells.llm.transcript.base import Record, WriteOutcome


class MemoryStore:
    name = "memory"

    def __init__(self) -> None:
        self._records: dict[str, tuple[str, float]] = {}
        self._lock = asyncio.Lock()

    def _live(self, conversation: str) -> str | None:
        entry = self._records.get(conversation)
        if entry is None:
            return None
        text, expires = entry
        if time.monotonic() >= expires:
            del self._records[conversation]
            return None
        return text

    async def read(self, conversation: str) -> Record | None:
        text = self._live(conversation)
        return Record.from_json(text) if text is not None else None

    async def write(
        self, conversation: str, expected_turn: int, record: Record | None, expire_s: int
    ) -> WriteOutcome:
        async with self._lock:
            text = self._live(conversation)
            if expected_turn == 0:
                if text is not None:
                    return WriteOutcome.STALE
            elif text is None:
                return WriteOutcome.GONE
            elif Record.from_json(text).turn != expected_turn:
                return WriteOutcome.STALE
            if record is None or expire_s <= 0:
                self._records.pop(conversation, None)
            else:
                self._records[conversation] = (record.to_json(), time.monotonic() + expire_s)
            return WriteOutcome.WRITTEN

    def expiry(self, conversation: str) -> float | None:
        """Seconds left before the record expires (for tests), or None."""
        entry = self._records.get(conversation)
        return None if entry is None else entry[1] - time.monotonic()

    async def close(self) -> None:
        self._records.clear()
