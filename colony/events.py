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
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from colony import jsonwire
from colony.effects import Effects, Handled

if TYPE_CHECKING:
    from colony.envelope import Envelope

KINDS = ("route", "handle_start", "handle_end", "llm", "dead_letter")
"""What a watcher may ask for (``dropped`` is always sent)."""

BUFFER = 2048
"""Events a watcher may have waiting before it starts losing them."""


class Event:
    """One event; its JSON is made once, however many watchers send it."""

    __slots__ = ("_text", "data", "id", "kind")

    def __init__(self, event_id: str, kind: str, data: dict[str, Any]) -> None:
        self.id = event_id
        self.kind = kind
        self.data = data
        self._text: str | None = None

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = jsonwire.dumps(self.data)
        return self._text


@dataclass(frozen=True, slots=True)
class Interest:
    """What a watcher wants: a trace, cells under a path prefix, some kinds (None: all)."""

    trace_id: str | None = None
    cell: str | None = None
    kinds: frozenset[str] | None = None

    def match(self, event: Event) -> bool:
        if self.kinds is not None and event.kind not in self.kinds:
            return False
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


class Watcher:
    """One client's bounded buffer of events."""

    def __init__(self, filters: Interest, limit: int = BUFFER) -> None:
        self.filters = filters
        self.limit = limit
        self.queue: deque[Event] = deque()
        self.dropped = 0
        """Events lost since the watcher was last told (its buffer was full)."""
        self.wake = asyncio.Event()
        self.closed = False

    def offer(self, event: Event) -> None:
        if not self.filters.match(event):
            return
        if len(self.queue) >= self.limit:
            self.dropped += 1
        else:
            self.queue.append(event)
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
        batch = list(self.queue)
        self.queue.clear()
        dropped, self.dropped = self.dropped, 0
        return batch, dropped


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
        self._n = 0

    def watch(self, filters: Interest, limit: int = BUFFER) -> Watcher:
        watcher = Watcher(filters, limit)
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
        event = Event(f"{at_ms}-{self._n}", kind, data)
        for watcher in self.watchers:
            watcher.offer(event)

    def began(self, cell: str, cell_type: str, message: Envelope) -> None:
        """A cell took ``message`` in."""
        if self.watchers:
            self._publish(
                time.time_ns() // 1_000_000,
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
        if not self.watchers:
            return
        at = fx.at_ms
        if fx.handled is not None:
            for kind, data in handled_events(fx.handled):
                self._publish(at, kind, data)
        for row in fx.logs:
            m = row.message
            self._publish(
                at,
                "route",
                {
                    "trace_id": m.trace_id,
                    "message_id": m.id,
                    "parent_message_id": m.parent_message_id,
                    "from": row.from_path,
                    "to": row.to_path,
                    "ttl": row.ttl,
                    "edges": list(row.edges),
                },
            )
        for letter in fx.letters:
            m = letter.message
            self._publish(
                at,
                "dead_letter",
                {
                    "trace_id": m.trace_id,
                    "message_id": m.id,
                    "error_code": str(letter.error_code),
                    "sender": letter.sender_path,
                    "target": letter.resolved_target,
                    "detail": letter.detail,
                },
            )


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
