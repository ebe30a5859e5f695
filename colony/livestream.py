"""``GET /colony/events``: the colony's live events as Server-Sent Events.

aiohttp-sse serves the stream: its headers, the pings (a comment every 15 s) that find a client
gone, the ``Last-Event-ID`` header; each event's frame is :attr:`colony.events.Event.frame`.
What this adds: a watcher of :class:`colony.events.Events` per client (its bounded buffer is
what keeps a slow client from slowing routing), events written in batches as they gather (one
write, and one wake-up of the client, per batch: per-event writes halved the routing rate of a
colony with one client on the stream), a ``dropped`` event naming where to resume when the
buffer overflowed, and, for a client that comes back with ``Last-Event-ID``, what the record
holds since then (:mod:`colony.eventlog`) before the live stream. A client that takes no
bytes for ``SEND_TIMEOUT_S`` is cut off.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from aiohttp import web
from aiohttp_sse import EventSourceResponse, sse_response

from colony.eventlog import recorded, since_ms
from colony.events import KINDS, Event, FrameWatcher, Interest
from colony.persist.db import PersistenceError
from colony.queries import EventsFilters

PING_S = 15.0
SLACK_MS = 5_000
"""A resumption reads the record from this long before the event named: an event id's
millisecond is when routing decided, and a hand-off is published once committed, so events
reach a watcher slightly out of time order (a watcher keys on message id and kind anyway)."""
GATHER_S = 0.05
"""How long events gather after the first of a batch before they are written: a watcher sees
them at most this late, and the socket is written (and the client woken) at most 20 times a
second instead of once per hand-off."""
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
    watcher = colony.events.watch_frames(interest)  # first: nothing falls between replay and live
    try:
        async with sse_response(
            request, ping_interval=PING_S, send_timeout=SEND_TIMEOUT_S
        ) as response:
            with contextlib.suppress(ConnectionError, RuntimeError, TimeoutError):
                await _serve(request, response, colony, watcher, interest)
        return response
    finally:
        colony.events.unwatch(watcher)


async def _serve(
    request: web.Request,
    response: EventSourceResponse,
    colony: Colony,
    watcher: FrameWatcher,
    interest: Interest,
) -> None:
    # aiohttp holds the headers back until the first bytes of the body: a comment (what
    # aiohttp-sse's pings are) lets the client know at once that it is connected.
    await response.write(b": connected\n\n")
    last = response.last_event_id
    since = since_ms(last)
    if since is not None:
        await _replay(request, response, colony, since, interest)
    gone = asyncio.ensure_future(response.wait())  # the pings found the client gone
    try:
        while not watcher.closed:
            batch = asyncio.ensure_future(watcher.next_frames())
            await asyncio.wait({batch, gone}, return_when=asyncio.FIRST_COMPLETED)
            if not batch.done():
                batch.cancel()
                return
            frames, lost, newest = batch.result()
            if not lost:  # gather a little more (a drop is told at once: see below)
                await asyncio.sleep(GATHER_S)
                more, lost, newest = watcher.take_frames()
                frames += more
            last = newest or last
            if lost:  # every frame held is older than every event dropped after them
                frames.append(dropped(lost, last))
            await _write(request, response, frames)
    finally:
        gone.cancel()


async def _replay(
    request: web.Request,
    response: EventSourceResponse,
    colony: Colony,
    since: int,
    interest: Interest,
) -> None:
    """What the record holds since ``since`` (less :data:`SLACK_MS`), before the live stream."""
    source = colony.db.source
    failures: tuple[type[BaseException], ...] = (*source.errors, PersistenceError)
    try:
        await colony.db.flush()
        past, left_out = await asyncio.to_thread(recorded, source, since - SLACK_MS, interest)
    except failures as exc:
        colony.log.error(
            "events_replay_failed",
            error=str(exc),
            detail="a watcher resuming with Last-Event-ID gets the live stream only",
        )
        return
    # More behind than a resumption reads back: the oldest are lost for good (no resume_from:
    # a client must not reconnect for them, it would get the same answer again).
    frames = [dropped(left_out, None)] if left_out else []
    await _write(request, response, frames + [event.frame for event in past])


def dropped(count: int, resume_from: str | None) -> bytes:
    """The ``dropped`` event's frame. It has no id, so a browser's ``lastEventId`` stays the
    last event it got: reconnecting resumes from there."""
    data = {"kind": "dropped", "count": count, "resume_from": resume_from}
    return Event(0, None, "dropped", data).frame


async def _write(request: web.Request, response: EventSourceResponse, frames: list[bytes]) -> None:
    if not frames:
        return
    try:
        async with asyncio.timeout(SEND_TIMEOUT_S):
            await response.write(b"".join(frames))
    except TimeoutError:  # as aiohttp-sse's own send does with a stalled peer
        response.stop_streaming()
        if request.transport is not None:
            request.transport.abort()
        raise
