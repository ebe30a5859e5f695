"""Work that must end on its own once begun, whoever cancels the task awaiting it.

A thread that writes a file cannot be stopped, and a transaction on a shared connection must
not be cut between BEGIN and COMMIT. The caller of such work waits for it to finish even when
it is cancelled, once or many times, and then raises its first cancellation: what it guards
(a file's lock, a connection's next statement) stays held until the work is over.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TypeVar

__all__ = ["run_to_end"]

T = TypeVar("T")


async def run_to_end(work: asyncio.Future[T]) -> T:
    """``work``'s result (or its exception). Cancelled, this waits for ``work`` to be done,
    however often it is cancelled again meanwhile, then raises the first cancellation; an
    exception of ``work`` is then marked seen (the caller is gone)."""
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        while not work.done():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.shield(work)
        if not work.cancelled():
            work.exception()
        raise
