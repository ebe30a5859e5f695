"""``meclaw watch``: one terminal line per live event of ``GET /colony/events``.

Pure: an event (the JSON object of one SSE message) becomes a :class:`rich.text.Text`;
printing, colours on or off, and the stream itself are elsewhere (:mod:`colony.watch_stream`,
the ``watch`` command in :mod:`colony.cli`). The daemon may be newer or older than this
client, so every field is optional here: a missing one is left out, never a crash.

Each line starts with the milliseconds since the watch started (the event's ``at_ms`` on the
daemon's clock minus the watch's start on this one), so lines of interleaved traces read in
one time order; events replayed from the record after a reconnect may show a negative time.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from rich.text import Text

from colony.failures import one_line

OUTCOME_STYLES = {
    "ok": "green",
    "error": "red",
    "crashed": "red",
    "timed_out": "red",
    "refused": "yellow",
}
"""The colour of a cell's handling outcome (an unknown outcome is left plain)."""

KIND_STYLES = {
    "route": "cyan",
    "handle_start": "dim",
    "handle_end": "",
    "llm": "magenta",
    "dead_letter": "bold red",
}
KIND_WIDTH = max(len(k) for k in KIND_STYLES)
SHORT_ID = 8
"""Characters of a trace id a line shows: its tail (a UUID v7 begins with its millisecond, so
traces started together share their first characters; the tail is random)."""
ERROR_CHARS = 160
"""An error text or a dead letter's detail is cut to this many characters on a line."""


def short_id(trace_id: object) -> str:
    text = str(trace_id) if trace_id else "?"
    return text[-SHORT_ID:]


def elapsed_ms(event: Mapping[str, Any], started_ms: int) -> int | None:
    at = event.get("at_ms")
    return at - started_ms if isinstance(at, int) and not isinstance(at, bool) else None


def event_line(event: Mapping[str, Any], started_ms: int) -> Text:
    """``<ms since start> <kind> <trace> <what happened>`` for one event."""
    kind = str(event.get("kind", "?"))
    elapsed = elapsed_ms(event, started_ms)
    line = Text(no_wrap=False)
    line.append(f"{elapsed:>8} ms " if elapsed is not None else " " * 12, style="dim")
    line.append(f"{kind:<{KIND_WIDTH}} ", style=KIND_STYLES.get(kind, "bold"))
    line.append(f"{short_id(event.get('trace_id'))}  ", style="dim")
    describe = _DESCRIBE.get(kind, _other)
    line.append_text(describe(event))
    if kind == "dead_letter":  # the whole line stands out, its time and trace too
        return Text(line.plain, style="bold red")
    return line


def _route(event: Mapping[str, Any]) -> Text:
    text = Text(f"{event.get('from', '?')} → {event.get('to', '?')}")
    if event.get("ttl") is not None:
        text.append(f"  ttl {event['ttl']}")
    edges = event.get("edges")
    if isinstance(edges, list) and edges:
        text.append(f"  fired {','.join(str(e) for e in edges)}", style="dim")
    return text


def _handle_start(event: Mapping[str, Any]) -> Text:
    text = Text(str(event.get("cell", "?")), style="dim")
    if event.get("cell_type"):
        text.append(f" ({event['cell_type']})", style="dim")
    return text


def _handle_end(event: Mapping[str, Any]) -> Text:
    outcome = str(event.get("outcome", "?"))
    style = OUTCOME_STYLES.get(outcome, "")
    text = Text(f"{event.get('cell', '?')}  ")
    took = event.get("duration_ms")
    text.append(f"cell took {took if took is not None else '?'} ms · ")
    error = f": {one_line(str(event['error']), ERROR_CHARS)}" if event.get("error") else ""
    text.append(outcome + error, style=style)
    return text


def _llm(event: Mapping[str, Any]) -> Text:
    parts = [str(event.get("model") or "?")]
    if event.get("latency_ms") is not None:
        parts.append(f"{event['latency_ms']} ms")
    parts.append(tokens(event.get("tokens_prompt"), event.get("tokens_completion")))
    return Text(f"{event.get('cell', '?')}  " + " · ".join(p for p in parts if p))


def tokens(prompt: object, completion: object) -> str:
    """``120 → 45 tokens`` (prompt → completion); empty when neither is known."""
    if prompt is None and completion is None:
        return ""
    shown = ["?" if n is None else str(n) for n in (prompt, completion)]
    return f"{shown[0]} → {shown[1]} tokens"


def _dead_letter(event: Mapping[str, Any]) -> Text:
    text = Text(f"✗ {event.get('sender', '?')} → {event.get('target', '?')}  ")
    text.append(str(event.get("error_code", "?")))
    if event.get("detail"):
        text.append(f": {one_line(str(event['detail']), ERROR_CHARS)}")
    return text


def _other(event: Mapping[str, Any]) -> Text:
    """A kind this client does not know (a newer daemon): its fields as compact JSON."""
    rest = {k: v for k, v in event.items() if k not in ("kind", "at_ms", "trace_id")}
    return Text(one_line(json.dumps(rest, ensure_ascii=False, sort_keys=True)), style="dim")


_DESCRIBE = {
    "route": _route,
    "handle_start": _handle_start,
    "handle_end": _handle_end,
    "llm": _llm,
    "dead_letter": _dead_letter,
}


def watching_line(api: str, filters: Mapping[str, str]) -> Text:
    shown = "".join(f" {name}={value}" for name, value in filters.items())
    return Text(f"watching {api}{shown} (Ctrl-C ends it)", style="dim")


def dropped_line(count: object, recoverable: bool = True) -> Text:
    if not recoverable:
        return Text(
            f"{count} events lost (further behind than the daemon reads back); watching on",
            style="yellow",
        )
    return Text(
        f"{count} events dropped (watch fell behind); fetching them from the record",
        style="yellow",
    )


def reconnect_line(why: str, last_id: str | None) -> Text:
    where = f" from event {last_id}" if last_id else ""
    return Text(f"connection lost ({why}); reconnecting{where}", style="dim")


def reconnected_line() -> Text:
    return Text("reconnected", style="dim")
