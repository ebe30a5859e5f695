"""``GET /colony/events``: the colony's live events as Server-Sent Events.

The framing, the pings (a comment every 15 s) and the send timeout that drops a stalled peer
are aiohttp-sse's. What this adds: a watcher of :class:`colony.events.Events` per client (its
bounded buffer is what keeps a slow client from slowing routing), events sent in batches as
they gather, a ``dropped`` event naming where to resume when the buffer overflowed, and, for a
client that comes back with ``Last-Event-ID``, what the record holds since then
(:mod:`colony.eventlog`) before the live stream.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from aiohttp import web
from aiohttp_sse import EventSourceResponse, sse_response

from colony import jsonwire
from colony.eventlog import recorded, since_ms
from colony.events import KINDS, Interest, Watcher
from colony.queries import EventsFilters

PING_S = 15.0
SEND_TIMEOUT_S = 30.0
"""A client that takes no bytes for this long is cut off (aiohttp-sse aborts it)."""

if TYPE_CHECKING:
    from colony.colony import Colony


def interest_of(f: EventsFilters) -> Interest:
    """The watcher's interest; ValueError naming an unknown kind."""
    kinds = None
    if f.kind is not None:
        asked = {k.strip() for k in f.kind.split(",") if k.strip()}
        unknown = sorted(asked - set(KINDS))
        if unknown:
            raise ValueError(f"kind {', '.join(unknown)} is not one of {', '.join(KINDS)}")
        kinds = frozenset(asked)
    return Interest(trace_id=f.trace_id, cell=f.cell, kinds=kinds)


async def stream(request: web.Request, colony: Colony, interest: Interest) -> web.StreamResponse:
    """Stream until the client goes, the daemon stops, or a send times out."""
    watcher = colony.events.watch(interest)  # first: nothing falls between replay and live
    try:
        async with sse_response(
            request,
            ping_interval=PING_S,
            send_timeout=SEND_TIMEOUT_S,
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        ) as response:
            with contextlib.suppress(ConnectionError, RuntimeError, TimeoutError):
                await _serve(response, colony, watcher, interest)
        return response
    finally:
        colony.events.unwatch(watcher)


async def _serve(
    response: EventSourceResponse, colony: Colony, watcher: Watcher, interest: Interest
) -> None:
    # aiohttp holds the headers back until the first bytes of the body: a comment (what
    # aiohttp-sse's pings are) lets the client know at once that it is connected.
    await response.write(b": connected\n\n")
    last = response.last_event_id
    since = since_ms(last)
    if since is not None:
        await colony.db.flush()
        past, left_out = await asyncio.to_thread(recorded, colony.db.source, since, interest)
        if left_out:
            await _dropped(response, left_out, last)
        for event in past:
            await response.send(event.text, id=event.id, event=event.kind)
            last = event.id
    gone = asyncio.ensure_future(response.wait())  # the pings found the client gone
    try:
        while not watcher.closed:
            batch = asyncio.ensure_future(watcher.next_batch())
            await asyncio.wait({batch, gone}, return_when=asyncio.FIRST_COMPLETED)
            if not batch.done():
                batch.cancel()
                return
            events, dropped = batch.result()
            for event in events:
                await response.send(event.text, id=event.id, event=event.kind)
                last = event.id
            if dropped:
                await _dropped(response, dropped, last)
    finally:
        gone.cancel()


async def _dropped(response: EventSourceResponse, count: int, resume_from: str | None) -> None:
    data = {"kind": "dropped", "count": count, "resume_from": resume_from}
    await response.send(jsonwire.dumps(data), event="dropped")
