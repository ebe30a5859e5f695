"""The client side of ``GET /colony/events``: read the daemon's Server-Sent Events and keep
reading across a dropped connection.

httpx streams the response and httpx-sse parses the event stream. The loop remembers the id of
the last event it was given and reconnects with ``Last-Event-ID`` when the connection drops or
the daemon says this client fell behind (a ``dropped`` event names where to resume): the daemon
then sends the recorded events after that point before the live ones. An event can come twice
around such a point (the contract says so), so events already passed on are recognised by their
kind, message id and cell and skipped.

Only the first connection may fail for good (no daemon there, a token refused): once a watch
has been connected it keeps trying until stopped, because a daemon restart should not end it.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import httpx
from httpx_sse import SSEError, connect_sse
from rich.console import Console
from rich.text import Text

from colony.errors import ColonyError
from colony.failures import one_line
from colony.ids import now_ms
from colony.watch import (
    dropped_line,
    event_line,
    reconnect_line,
    reconnected_line,
    watching_line,
)

EVENTS_PATH = "/colony/events"
READ_TIMEOUT_S = 50.0
"""No byte for this long and the connection counts as lost (the daemon pings every 15 s)."""
RETRY_S = (0.2, 0.5, 1.0, 2.0, 5.0)
"""Waits between reconnection attempts; the last one repeats."""
REMEMBERED = 4096
"""How many recent events are remembered to skip one sent twice around a reconnect."""


class WatchRefused(ColonyError):
    """The daemon answered the watch with an error (a token it refused, no events endpoint)."""

    code = "watch_refused"


class DaemonUnreachable(ColonyError):
    """No daemon answered at the API's address on the first connection."""

    code = "daemon_unreachable"


class _ServerTrouble(Exception):
    """A 5xx answer on a reconnection (a daemon restarting): retried like a lost connection."""


class _Seen:
    """The keys of the last :data:`REMEMBERED` events passed on."""

    def __init__(self) -> None:
        self._order: deque[tuple[str, ...]] = deque()
        self._keys: set[tuple[str, ...]] = set()

    def first_time(self, event: Mapping[str, Any]) -> bool:
        message = event.get("message_id")
        if not message:
            return True  # nothing to recognise it by: pass it on
        where = event.get("cell") or event.get("to") or event.get("target") or ""
        # started_ms tells a cell's second handling of a message (after a crash) from the first.
        key = (str(event.get("kind")), str(message), str(where), str(event.get("started_ms")))
        if key in self._keys:
            return False
        self._keys.add(key)
        self._order.append(key)
        if len(self._order) > REMEMBERED:
            self._keys.discard(self._order.popleft())
        return True


def follow_events(
    api: str,
    *,
    headers: Mapping[str, str],
    params: Mapping[str, str],
    on_event: Callable[[dict[str, Any]], None],
    on_notice: Callable[[Text], None],
    stop: Callable[[], bool] = lambda: False,
    retry_s: tuple[float, ...] = RETRY_S,
) -> None:
    """Pass each event of ``api``'s stream to ``on_event`` (its data object), and each change
    of the connection to ``on_notice``, until ``stop()`` is true (or forever). Raises
    :class:`DaemonUnreachable` or :class:`WatchRefused` when the first connection fails."""
    url = api.rstrip("/") + EVENTS_PATH
    timeout = httpx.Timeout(10.0, read=READ_TIMEOUT_S)
    seen = _Seen()
    last_id: str | None = None
    connected = False
    lost = False
    attempt = 0
    with httpx.Client(timeout=timeout, trust_env=False) as client:
        while not stop():
            sent = dict(headers)
            if last_id is not None:
                sent["Last-Event-ID"] = last_id
            try:
                with connect_sse(client, "GET", url, params=dict(params), headers=sent) as source:
                    if source.response.status_code >= 500 and connected:
                        raise _ServerTrouble(f"HTTP {source.response.status_code}")
                    _check(source.response, url)
                    if not connected:
                        on_notice(watching_line(api, params))
                    connected, attempt = True, 0
                    if lost:
                        on_notice(reconnected_line())
                        lost = False
                    for sse in source.iter_sse():
                        data = _data(sse.data)
                        if data is None:
                            on_notice(Text(f"skipped an unreadable event: {one_line(sse.data)}"))
                            continue
                        if sse.event == "dropped" or data.get("kind") == "dropped":
                            resume = data.get("resume_from")
                            on_notice(dropped_line(data.get("count", "some"), resume is not None))
                            if resume is None:  # lost for good: reconnecting would not help
                                continue
                            last_id = str(resume)
                            break
                        if sse.id:
                            last_id = sse.id
                        if seen.first_time(data):
                            on_event(data)
                        if stop():
                            return
                    else:
                        lost = True
                        on_notice(reconnect_line("the daemon closed the stream", last_id))
                if not lost:
                    continue  # after a `dropped`: at once, from where the record has it
            except SSEError as exc:
                raise WatchRefused(f"{url} answered with no event stream ({exc})") from None
            except (httpx.TransportError, _ServerTrouble) as exc:
                if not connected:
                    raise DaemonUnreachable(
                        f"cannot reach the daemon's API at {api} ({type(exc).__name__}: {exc}); "
                        "is the daemon running with --api?"
                    ) from None
                if not lost:
                    why = str(exc) if isinstance(exc, _ServerTrouble) else type(exc).__name__
                    on_notice(reconnect_line(why, last_id))
                    lost = True
            time.sleep(retry_s[min(attempt, len(retry_s) - 1)])
            attempt += 1


def _data(text: str) -> dict[str, Any] | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _check(response: httpx.Response, url: str) -> None:
    """Raise :class:`WatchRefused` for anything but a 200 event stream."""
    if response.status_code == 200:
        return
    response.read()
    if response.status_code == 401:
        raise WatchRefused(
            f"{url} refused the watch (401): the API needs its bearer token; pass "
            "--api-token-env VAR, VAR holding the token the daemon was started with"
        )
    if response.status_code in (404, 501):  # 501: a /colony/* read this daemon does not know
        raise WatchRefused(
            f"{url} is not served ({response.status_code}): this daemon has no live events; "
            "run a daemon of this meclaw version"
        )
    try:
        doc = response.json()
        detail = f"{doc['error']}: {doc['detail']}" if "detail" in doc else str(doc["error"])
    except (ValueError, KeyError, TypeError):
        detail = one_line(response.text) or response.reason_phrase
    raise WatchRefused(f"{url} refused the watch ({response.status_code} {detail})")


class _Terminal(Console):
    """A console that lets a closed pipe (``meclaw watch | head``) end the watch as it does in
    ``--json`` mode: rich's own handling exits with status 1."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


def print_events(
    api: str,
    *,
    headers: Mapping[str, str],
    params: Mapping[str, str],
    as_json: bool,
    color: bool,
    stop: Callable[[], bool] = lambda: False,
) -> None:
    """``meclaw watch``: each event as a line on stdout (its data as one JSON line with
    ``as_json``), the connection's changes on stderr when stdout carries JSON."""
    out = _Terminal(highlight=False, no_color=not color, soft_wrap=True)
    notes = _Terminal(stderr=True, highlight=False, no_color=not color, soft_wrap=True)
    started_ms = now_ms()

    def on_event(event: dict[str, Any]) -> None:
        if as_json:
            out.file.write(json.dumps(event, ensure_ascii=False) + "\n")
            out.file.flush()
        else:
            out.print(event_line(event, started_ms))

    def on_notice(text: Text) -> None:
        (notes if as_json else out).print(text)

    follow_events(
        api, headers=headers, params=params, on_event=on_event, on_notice=on_notice, stop=stop
    )
