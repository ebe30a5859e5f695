"""The watch's stream loop against a scripted event stream on 127.0.0.1: what it sends, how it
resumes after a lost connection or a ``dropped`` event, and how it fails when nothing (or a
refusal) answers. The real daemon's stream is tests/e2e/test_watch.py's."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from rich.text import Text

from colony.watch_stream import DaemonUnreachable, WatchRefused, follow_events


@dataclass
class Answer:
    """One connection's answer: a status and SSE frames; ``cut`` ends it mid-body."""

    frames: list[str] = field(default_factory=list)
    status: int = 200
    body: str = ""
    cut: bool = False


def frame(kind: str, event_id: str, **data: Any) -> str:
    return f"event: {kind}\nid: {event_id}\ndata: {json.dumps({'kind': kind, **data})}\n\n"


class ScriptedEvents:
    """A stand-in for ``GET /colony/events``: each connection takes the next answer."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.requests: list[tuple[str, dict[str, str]]] = []
        script = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                script.requests.append((self.path, dict(self.headers.items())))
                answer = script.answers.pop(0) if script.answers else Answer(status=503)
                if answer.status != 200:
                    body = answer.body.encode()
                    self.send_response(answer.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for text in answer.frames:
                    data = text.encode()
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()
                if not answer.cut:
                    self.wfile.write(b"0\r\n\r\n")  # the stream ends cleanly
                self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def __enter__(self) -> ScriptedEvents:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Seen:
    events: list[dict[str, Any]] = field(default_factory=list)
    notices: list[Text] = field(default_factory=list)


def follow(
    script: ScriptedEvents, until: int, params: dict[str, str] | None = None, **headers: str
) -> Seen:
    seen = Seen()
    follow_events(
        script.url,
        headers=headers,
        params=params or {},
        on_event=seen.events.append,
        on_notice=seen.notices.append,
        stop=lambda: len(seen.events) >= until or len(script.requests) > 5,
        retry_s=(0.01,),
    )
    return seen


def route(event_id: str, message: str) -> str:
    return frame("route", event_id, message_id=message, to="/a", trace_id="t")


def test_the_filters_go_as_query_parameters_and_the_token_as_a_bearer_header() -> None:
    with ScriptedEvents(Answer([route("1-1", "m1")])) as script:
        params = {"trace_id": "t", "cell": "/a", "kind": "route,handle_end"}
        seen = follow(script, 1, params, Authorization="Bearer s3cret")
    [(path, headers)] = script.requests
    assert path == "/colony/events?trace_id=t&cell=%2Fa&kind=route%2Chandle_end"
    assert headers["Authorization"] == "Bearer s3cret"
    assert headers["Accept"] == "text/event-stream"
    assert "Last-Event-ID" not in headers
    assert [e["message_id"] for e in seen.events] == ["m1"]
    assert seen.notices[0].plain.startswith(f"watching {script.url} trace_id=t cell=/a")


def test_a_lost_connection_is_resumed_from_the_last_event_id_and_said_on_a_dim_line() -> None:
    first = Answer([route("5-1", "m1"), route("5-2", "m2")], cut=True)
    # Around the resume point an event may come twice: it is passed on once.
    second = Answer([route("5-2", "m2"), route("6-3", "m3")])
    with ScriptedEvents(first, second) as script:
        seen = follow(script, 3)
    assert [e["message_id"] for e in seen.events] == ["m1", "m2", "m3"]
    assert script.requests[1][1]["Last-Event-ID"] == "5-2"
    lost, back = seen.notices[1:3]
    assert lost.plain == "connection lost (RemoteProtocolError); reconnecting from event 5-2"
    assert (lost.style, back.plain, back.style) == ("dim", "reconnected", "dim")


def test_a_stream_the_daemon_ends_is_resumed_too() -> None:
    with ScriptedEvents(Answer([route("5-1", "m1")]), Answer([route("6-1", "m2")])) as script:
        seen = follow(script, 2)
    assert [e["message_id"] for e in seen.events] == ["m1", "m2"]
    assert script.requests[1][1]["Last-Event-ID"] == "5-1"
    assert seen.notices[1].plain.startswith("connection lost (the daemon closed the stream)")


def test_a_dropped_event_is_said_in_yellow_and_the_watch_resumes_where_it_names() -> None:
    behind = frame("dropped", "9-9", count=17, resume_from="5-1")
    first = Answer([route("5-1", "m1"), behind, route("9-10", "never read")])
    with ScriptedEvents(first, Answer([route("7-2", "m2")])) as script:
        seen = follow(script, 2)
    assert [e["message_id"] for e in seen.events] == ["m1", "m2"]
    assert script.requests[1][1]["Last-Event-ID"] == "5-1"
    [_, dropped] = seen.notices
    assert dropped.plain == "17 events dropped (watch fell behind); fetching them from the record"
    assert dropped.style == "yellow"


def test_a_cell_that_handles_a_message_again_after_a_crash_shows_both_ends() -> None:
    crash = frame("handle_end", "1-1", message_id="m", cell="/c", started_ms=1, outcome="crashed")
    again = frame("handle_end", "2-2", message_id="m", cell="/c", started_ms=2, outcome="ok")
    with ScriptedEvents(Answer([crash, again])) as script:
        seen = follow(script, 2)
    assert [e["outcome"] for e in seen.events] == ["crashed", "ok"]


def test_a_401_says_to_pass_the_token_variable() -> None:
    refused = Answer(status=401, body='{"error": "unauthorized"}')
    with ScriptedEvents(refused) as script, pytest.raises(WatchRefused, match="--api-token-env"):
        follow(script, 1)


def test_another_refusal_names_the_status_and_the_daemon_s_reason() -> None:
    bad = Answer(status=400, body='{"error": "bad_query", "detail": "kind: unknown kind x"}')
    with ScriptedEvents(bad) as script, pytest.raises(WatchRefused) as caught:
        follow(script, 1)
    assert str(caught.value).endswith("refused the watch (400 bad_query: kind: unknown kind x)")


@pytest.fixture
def closed_port() -> Iterator[int]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        yield probe.getsockname()[1]  # bound, never listening: connections are refused


def test_nothing_listening_at_the_first_connection_is_a_daemon_unreachable(
    closed_port: int,
) -> None:
    with pytest.raises(DaemonUnreachable, match="is the daemon running"):
        follow_events(
            f"http://127.0.0.1:{closed_port}",
            headers={},
            params={},
            on_event=lambda e: None,
            on_notice=lambda t: None,
        )
