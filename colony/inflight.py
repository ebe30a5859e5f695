"""Counting the messages a colony has in flight, so a caller can wait until it is quiet."""

from __future__ import annotations

import asyncio


class InFlightMessages:
    """Messages queued in a mailbox, being handled, or being routed anywhere in the colony.

    The colony counts one in when it routes an ingress or puts a message into a mailbox (or
    redelivers one from the journal); a runner counts it out once the message is settled.
    :meth:`wait_idle` is what the harness's ``settle()`` and the benchmarks wait on."""

    __slots__ = ("_count", "_idle")

    def __init__(self) -> None:
        self._count = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def count(self) -> int:
        return self._count

    def add(self, n: int = 1) -> None:
        self._count += n
        if self._count:
            self._idle.clear()

    def done(self) -> None:
        self._count -= 1
        if self._count == 0:
            self._idle.set()

    async def wait_idle(self) -> None:
        """Return once nothing is in flight."""
        while True:
            await self._idle.wait()
            for _ in range(3):  # let tasks woken by the last hand-off run
                await asyncio.sleep(0)
            if self._count == 0:
                return
