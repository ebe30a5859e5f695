"""Handing work to the ``colony.db`` writer once per pass of the event loop.

Each put into the writer's queue that finds the writer asleep wakes its thread, and on a busy
two-core machine the woken thread preempts the event loop: the profile of ``bench/routing.py``
measured the put itself at tens of microseconds, twice per message (a cell's ack, then the
next ingress). :class:`HandOff` holds what the loop hands over during one pass and puts it all
into the queue at the start of the next pass, so the writer wakes once and commits the lot in
one transaction. The order of items is kept, so the writer's FIFO rule (a unit is committed
no earlier than every unit handed over before it) is unchanged. Without a running loop (boot,
shutdown, a plain thread) every item is put at once.
"""

from __future__ import annotations

import asyncio
import queue
from typing import Generic, TypeVar

T = TypeVar("T")


class HandOff(Generic[T]):
    """Puts into ``target``, batched per pass of the running event loop."""

    def __init__(self, target: queue.SimpleQueue[T]) -> None:
        self._target = target
        self._held: list[T] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        """The loop whose next pass hands over what is held (None: nothing scheduled)."""

    def put(self, item: T) -> None:
        self._held.append(item)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.release()
            return
        if loop is self._loop:
            return  # this loop's next pass hands it over
        if self._loop is not None:  # held for a loop that is gone, or another one
            self.release()
            return
        self._loop = loop
        loop.call_soon(self.release)

    def release(self) -> None:
        """Put everything held into the queue, in order."""
        held, self._held = self._held, []
        self._loop = None
        put = self._target.put
        for item in held:
            put(item)
