"""What the colony does, as live events for whoever watches (``GET /colony/events``).

The colony tells :class:`Events` about each hand-off it carried out (routing decisions, the
handling that caused them, dead letters) and each handling that begins. With nobody watching
that costs a counter update (:class:`Rates`, for ``/colony/stats``); with watchers, each event
is built once and offered to every :class:`Watcher`, whose buffer is bounded: a watcher that
falls behind loses events (counted, and told so with a ``dropped`` event naming where to
resume from the record) instead of slowing routing or growing without bound.

An event's id is ``<at_ms>-<n>``: the millisecond it happened and this daemon's running
count, so a watcher that reconnects with ``Last-Event-ID`` can be sent what the record holds
from that millisecond on (:mod:`colony.eventlog`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from colony.effects import Effects, Handled, LogRow
from colony.ids import now_ms
from colony.liveness import Liveness

if TYPE_CHECKING:
    from colony.envelope import Envelope

KINDS = ("route", "handle_start", "handle_end", "llm", "dead_letter")
"""What a watcher may ask for (``dropped`` is always sent)."""

BUFFER = 2048
"""Events a watcher may have waiting before it starts losing them."""


class Event:
    """One event; its JSON is made once, however many watchers send it. A ``route`` event
    keeps its message-log row and makes its fields only when asked (a filter reads them, or
    the event is written): routing publishes most events, and the stream writes them later,
    in batches, off the hand-off's path."""

    __slots__ = ("_data", "_frame", "_row", "at_ms", "kind", "n")

    def __init__(
        self,
        at_ms: int,
        n: int | None,
        kind: str,
        data: dict[str, Any] | None = None,
        row: LogRow | None = None,
    ) -> None:
        self.at_ms = at_ms
        self.n = n
        """This daemon's count of it (0: read back from the record; None: no id)."""
        self.kind = kind
        self._data = data
        self._row = row
        self._frame: bytes | None = None

    @property
    def id(self) -> str:
        """``<at_ms>-<n>``; empty for an event that carries none (``dropped``)."""
        return "" if self.n is None else f"{self.at_ms}-{self.n}"

    @property
    def data(self) -> dict[str, Any]:
        if self._data is None:
            row = self._row
            assert row is not None
            m = row.message
            self._data = {
                "trace_id": m.trace_id,
                "message_id": m.id,
                "parent_message_id": m.parent_message_id,
                "from": row.from_path,
                "to": row.to_path,
                "ttl": row.ttl,
                "edges": list(row.edges),
                "kind": self.kind,
                "at_ms": self.at_ms,
            }
        return self._data

    @property
    def frame(self) -> bytes:
        """The event as one Server-Sent Events message. Written here, not by aiohttp-sse's
        general ``send`` (which checks and splits every field: 10 µs an event, 8% of the
        routing rate with one watcher), because none of its fields can hold a line break: the
        id is digits and a dash, the kind one of :data:`KINDS`, the data compact JSON (a line
        break inside a string is escaped)."""
        if self._frame is None and self._data is None and self._row is not None:
            self._frame = _route_frame(self.at_ms, self.n, self._row)
        if self._frame is None:
            try:
                text = orjson.dumps(self.data)
            except orjson.JSONEncodeError:  # a lone surrogate in an error text, say
                text = json.dumps(self.data).encode()
            head = b"" if self.n is None else b"id: %d-%d\n" % (self.at_ms, self.n)
            self._frame = b"%sevent: %s\ndata: %s\n\n" % (head, self.kind.encode(), text)
        return self._frame


_ROUTE = (
    b'id: %d-%d\nevent: route\ndata: {"trace_id":%s,"message_id":%s,"parent_message_id":%s,'
    b'"from":%s,"to":%s,"ttl":%d,"edges":%s,"kind":"route","at_ms":%d}\n\n'
)


def _route_frame(at_ms: int, n: int | None, row: LogRow) -> bytes | None:
    """A route event's frame without its dict: the same bytes :attr:`Event.data` would give
    (a test holds them equal), each string quoted by orjson. Most events are routes, and
    building the dict first cost the stream a third of its share of a hand-off. None when a
    value needs the general path (a string orjson refuses)."""
    m = row.message
    dumps = orjson.dumps
    try:
        return _ROUTE % (
            at_ms,
            n,
            dumps(m.trace_id),
            dumps(m.id),
            dumps(m.parent_message_id),
            dumps(row.from_path),
            dumps(row.to_path),
            row.ttl,
            dumps(list(row.edges)) if row.edges else b"[]",
            at_ms,
        )
    except (orjson.JSONEncodeError, TypeError):
        return None


@dataclass(frozen=True, slots=True)
class Interest:
    """What a watcher wants: a trace, cells under a path prefix, some kinds (None: all)."""

    trace_id: str | None = None
    cell: str | None = None
    kinds: frozenset[str] | None = None

    def match(self, event: Event) -> bool:
        if self.kinds is not None and event.kind not in self.kinds:
            return False
        if self.trace_id is None and self.cell is None:
            return True
        data = event.data
        if self.trace_id is not None and data.get("trace_id") != self.trace_id:
            return False
        prefix = self.cell
        if prefix is not None:
            return any(
                isinstance(data.get(k), str) and _under(data[k], prefix)
                for k in ("cell", "from", "to", "target", "sender")
            )
        return True


def _under(path: str, prefix: str) -> bool:
    return prefix in ("", "/") or path == prefix or path.startswith(prefix.rstrip("/") + "/")


class Bundle:
    """The events of one committed hand-off, made into :class:`Event` objects only when a
    watcher takes them: routing hands over one object per hand-off, whatever it caused."""

    __slots__ = ("fx", "n", "size")

    def __init__(self, fx: Effects, n: int, size: int) -> None:
        self.fx = fx
        self.n = n
        """The count of its first event (the rest follow in order)."""
        self.size = size

    def events(self) -> list[Event]:
        fx, at, n = self.fx, self.fx.at_ms, self.n
        out: list[Event] = []
        if fx.handled is not None:
            for kind, data in handled_events(fx.handled):
                data["kind"] = kind
                data["at_ms"] = at
                out.append(Event(at, n, kind, data))
                n += 1
        for row in fx.logs:
            out.append(Event(at, n, "route", row=row))
            n += 1
        for letter in fx.letters:
            m = letter.message
            data = {
                "trace_id": m.trace_id,
                "message_id": m.id,
                "error_code": str(letter.error_code),
                "sender": letter.sender_path,
                "target": letter.resolved_target,
                "detail": letter.detail,
                "kind": "dead_letter",
                "at_ms": at,
            }
            out.append(Event(at, n, "dead_letter", data))
            n += 1
        return out


class Watcher:
    """One client's bounded buffer of events."""

    def __init__(self, filters: Interest, limit: int = BUFFER) -> None:
        self.filters = filters
        self.limit = limit
        self.queue: deque[Event | Bundle] = deque()
        self.held = 0
        """Events in :attr:`queue` (a bundle holds several; counted before filtering)."""
        self.dropped = 0
        """Events lost since the watcher was last told (its buffer was full; a bundle's
        events count whether or not the filters would have kept them)."""
        self.wake = asyncio.Event()
        self.closed = False

    def offer(self, item: Event | Bundle) -> None:
        size = item.size if isinstance(item, Bundle) else 1
        if isinstance(item, Event) and not self.filters.match(item):
            return
        if self.held + size > self.limit:
            self.dropped += size
        else:
            self.queue.append(item)
            self.held += size
        self.wake.set()

    def close(self) -> None:
        self.closed = True
        self.wake.set()

    async def next_batch(self) -> tuple[list[Event], int]:
        """What is waiting (at least one event, the dropped count, or the watcher closed),
        and how many were dropped before the last of them; the counters start again."""
        while not (self.queue or self.dropped or self.closed):
            self.wake.clear()
            await self.wake.wait()
        return self.take()

    def take(self) -> tuple[list[Event], int]:
        """What is waiting now (perhaps nothing), as :meth:`next_batch` returns it."""
        batch: list[Event] = []
        match = self.filters.match
        for item in self.queue:
            if isinstance(item, Event):
                batch.append(item)
            else:
                batch += [e for e in item.events() if match(e)]
        self.queue.clear()
        self.held = 0
        dropped, self.dropped = self.dropped, 0
        return batch, dropped


class FrameWatcher(Watcher):
    """A watcher that keeps only its events' frames (bytes), for the event stream.

    Why not the events themselves: a hand-off's objects (its envelopes, rows, dicts) kept
    alive until the stream writes them, up to 50 ms later, tripled the garbage collector's
    young-generation runs and cost the routing rate 6% on their own (measured). Bytes are not
    tracked by the collector; the events they are made from live only while they are offered.
    """

    def __init__(self, filters: Interest, limit: int = BUFFER) -> None:
        super().__init__(filters, limit)
        self.frames: deque[bytes] = deque()
        self.last: tuple[int, int | None] | None = None
        """``(at_ms, n)`` of the newest frame held: where a reader resumes after a drop."""

    def offer(self, item: Event | Bundle) -> None:
        self.offer_events(item.events() if isinstance(item, Bundle) else (item,))

    def offer_events(self, events: Iterable[Event]) -> None:
        match = self.filters.match
        frames = self.frames
        for event in events:
            if not match(event):
                continue
            if len(frames) >= self.limit:
                self.dropped += 1
            else:
                frames.append(event.frame)
                self.last = (event.at_ms, event.n)
        self.wake.set()

    def offer_bundle(self, bundle: Bundle) -> None:
        """A hand-off's events, by kind alone: its routes are framed straight from their rows,
        with no event objects (most events are routes)."""
        kinds = self.filters.kinds
        fx, at = bundle.fx, bundle.fx.at_ms
        if fx.handled is None and not fx.letters:
            if kinds is not None and "route" not in kinds:
                return
            frames = self.frames
            n = bundle.n
            rows = fx.logs
            room = max(0, self.limit - len(frames))
            for row in rows[:room]:
                frames.append(_route_frame(at, n, row) or Event(at, n, "route", row=row).frame)
                n += 1
            if n > bundle.n:
                self.last = (at, n - 1)
            self.dropped += len(rows) - (n - bundle.n)
            self.wake.set()
            return
        self.offer_events(bundle.events())

    async def next_frames(self) -> tuple[list[bytes], int, str | None]:
        """What is waiting (at least one frame, a drop, or the watcher closed), as
        :meth:`take_frames` gives it."""
        while not (self.frames or self.dropped or self.closed):
            self.wake.clear()
            await self.wake.wait()
        return self.take_frames()

    def take_frames(self) -> tuple[list[bytes], int, str | None]:
        """The frames waiting now, how many events were dropped since the last take, and the
        id of the newest frame (None when none was ever held)."""
        frames = list(self.frames)
        self.frames.clear()
        dropped, self.dropped = self.dropped, 0
        last = None if self.last is None else f"{self.last[0]}-{self.last[1]}"
        return frames, dropped, last


class Rates:
    """Decisions and dead letters per 10-second bucket, for the last ten minutes."""

    BUCKET_S = 10
    KEEP = 60

    def __init__(self) -> None:
        self.started = time.time()
        self.decisions = 0
        self.dead_letters = 0
        self._buckets: deque[list[int]] = deque(maxlen=self.KEEP)
        """``[bucket start (epoch s), decisions, dead letters]``, oldest first."""

    def add(self, decisions: int, letters: int) -> None:
        self.decisions += decisions
        self.dead_letters += letters
        start = int(time.time()) // self.BUCKET_S * self.BUCKET_S
        buckets = self._buckets
        if not buckets or buckets[-1][0] != start:
            buckets.append([start, 0, 0])
        last = buckets[-1]
        last[1] += decisions
        last[2] += letters

    def series(self) -> list[dict[str, int]]:
        """Every bucket of the last ten minutes, oldest first (empty ones included)."""
        now = int(time.time()) // self.BUCKET_S * self.BUCKET_S
        held = {b[0]: b for b in self._buckets}
        first = now - (self.KEEP - 1) * self.BUCKET_S
        out = []
        for start in range(first, now + 1, self.BUCKET_S):
            b = held.get(start)
            out.append(
                {
                    "at_s": start,
                    "decisions": b[1] if b else 0,
                    "dead_letters": b[2] if b else 0,
                }
            )
        return out


class Events:
    """The colony's event hub: the watchers, and the rates kept whether or not anyone
    watches."""

    def __init__(self) -> None:
        self.watchers: list[Watcher] = []
        self.rates = Rates()
        self.taps: list[Callable[[Effects], None]] = []
        """Observers of every committed hand-off (metrics, OpenTelemetry), called in order
        after the hand-off was carried out. A tap must be cheap and must not raise: it runs
        on the event loop, on the routing path."""
        self.io = Liveness()
        """What the cells' I/O tasks last did (``CellSpec.io``), for ``GET /health``."""
        self.began_hooks: list[Callable[[Envelope], None]] = []
        """Called with each message a cell takes in, in the task that will handle it (the
        telemetry's context variable is set there)."""
        self._n = 0

    def watch(self, filters: Interest, limit: int = BUFFER) -> Watcher:
        """A watcher that gets :class:`Event` objects (in-process readers: the demo)."""
        watcher = Watcher(filters, limit)
        self.watchers.append(watcher)
        return watcher

    def watch_frames(self, filters: Interest, limit: int = BUFFER) -> FrameWatcher:
        """A watcher that gets each event's frame, ready to write (the event stream)."""
        watcher = FrameWatcher(filters, limit)
        self.watchers.append(watcher)
        return watcher

    def unwatch(self, watcher: Watcher) -> None:
        watcher.close()
        if watcher in self.watchers:
            self.watchers.remove(watcher)

    def close(self) -> None:
        """The daemon stops: every watcher's stream ends."""
        for watcher in list(self.watchers):
            self.unwatch(watcher)

    def _publish(self, at_ms: int, kind: str, data: dict[str, Any]) -> None:
        self._n += 1
        data["kind"] = kind
        data["at_ms"] = at_ms
        self._offer(Event(at_ms, self._n, kind, data))

    def _offer(self, item: Event | Bundle) -> None:
        for watcher in self.watchers:
            watcher.offer(item)

    def began(self, cell: str, cell_type: str, message: Envelope) -> None:
        """A cell took ``message`` in."""
        for hook in self.began_hooks:
            hook(message)
        if self.watchers:
            self._publish(
                now_ms(),
                "handle_start",
                {
                    "cell": cell,
                    "cell_type": cell_type,
                    "message_id": message.id,
                    "trace_id": message.trace_id,
                },
            )

    def applied(self, fx: Effects) -> None:
        """A hand-off was committed and carried out."""
        self.rates.add(fx.decisions, len(fx.letters))
        for tap in self.taps:
            tap(fx)
        if not self.watchers:
            return
        handled = fx.handled
        size = len(fx.logs) + len(fx.letters)
        if handled is not None:
            size += 1 if handled.model is None else 2
        if not size:
            return
        bundle = Bundle(fx, self._n + 1, size)
        self._n += size
        events: list[Event] | None = None
        for watcher in self.watchers:
            if not isinstance(watcher, FrameWatcher):
                watcher.offer(bundle)
            elif watcher.filters.trace_id is None and watcher.filters.cell is None:
                watcher.offer_bundle(bundle)  # no filter reads an event's fields
            else:
                if events is None:  # made once, however many streams take them
                    events = bundle.events()
                watcher.offer_events(events)


def handled_events(h: Handled) -> Iterable[tuple[str, dict[str, Any]]]:
    """``handle_end`` for a finished handling, and ``llm`` when it was an LLM call (the same
    fields whether it is live or read back from the record)."""
    yield (
        "handle_end",
        {
            "cell": h.cell,
            "cell_type": h.cell_type,
            "message_id": h.message_id,
            "trace_id": h.trace_id,
            "started_ms": h.started_ms,
            "duration_ms": h.duration_ms,
            "outcome": h.outcome,
            "error": h.error,
        },
    )
    if h.model is not None:
        yield (
            "llm",
            {
                "cell": h.cell,
                "message_id": h.message_id,
                "trace_id": h.trace_id,
                "model": h.model,
                "latency_ms": h.llm_latency_ms,
                "tokens_prompt": h.tokens_prompt,
                "tokens_completion": h.tokens_completion,
            },
        )
