"""``meclaw watch`` against a real daemon process: it finds the daemon's API from the root's
lease, prints the routing of a message as it happens, and ends quietly on Ctrl-C; and it says
in one line what is wrong when no daemon runs or the token is missing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path
from queue import Empty, Queue
from typing import IO, Any

import httpx

from tests.conftest import TreeFactory, cell, hive
from tests.e2e.test_cli_daemon import MECLAW, start, wait_for_line

WITHIN_S = 15.0


def tree(make_tree: TreeFactory) -> Path:
    return make_tree(
        {
            "main/config.json": hive({"from": ".", "to": "./box"}),
            "main/box/config.json": hive({"from": ".", "to": "./sink"}),
            "main/box/sink/config.json": cell("code"),
        }
    )


def watch(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [MECLAW, "watch", "--root", str(root), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def lines_of(stream: IO[str] | None) -> Queue[str]:
    """The lines ``stream`` prints, read on a thread (so a test can wait with a deadline)."""
    assert stream is not None
    lines: Queue[str] = Queue()

    def read() -> None:
        for line in stream:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


def next_line(lines: Queue[str], what: str) -> str:
    try:
        return lines.get(timeout=WITHIN_S)
    except Empty:
        raise AssertionError(f"no {what} within {WITHIN_S} s") from None


def post(url: str, trace_id: str) -> None:
    body = {"target": "/", "body": {"messages": []}, "ttl": 9, "trace_id": trace_id}
    answer = httpx.post(f"{url}/messages", json=body, trust_env=False, timeout=10)
    assert answer.status_code == 202, answer.text


def test_watch_prints_the_route_and_handling_of_a_message_sent_to_the_running_daemon(
    make_tree: TreeFactory,
) -> None:
    root = tree(make_tree)
    trace_id = str(uuid.uuid4())
    with start(root, "--api", "127.0.0.1:0") as daemon:
        url = wait_for_line(daemon, "HTTP API on").split("HTTP API on ", 1)[1].strip()
        with watch(root, "--json", "--trace", trace_id) as watcher:
            try:
                said = lines_of(watcher.stderr)
                assert next_line(said, "watching notice").startswith(f"watching {url}")
                post(url, trace_id)
                events = lines_of(watcher.stdout)
                seen: list[dict[str, Any]] = []
                while not any(e["kind"] == "handle_end" for e in seen):
                    seen.append(json.loads(next_line(events, f"event after {seen}")))
            finally:
                watcher.send_signal(signal.SIGINT)
                assert watcher.wait(timeout=10) == 0  # Ctrl-C ends it quietly
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=20)
    assert {e["trace_id"] for e in seen} == {trace_id}
    routes = [(e["from"], e["to"], e["ttl"]) for e in seen if e["kind"] == "route"]
    assert routes == [("@external", "/", 8), ("/", "/box", 7), ("/box", "/box/sink", 6)]
    [done] = [e for e in seen if e["kind"] == "handle_end"]
    assert (done["cell"], done["outcome"]) == ("/box/sink", "ok")
    assert isinstance(done["duration_ms"], int)


def test_watch_shows_one_uncoloured_line_per_event_in_a_pipe(make_tree: TreeFactory) -> None:
    root = tree(make_tree)
    trace_id = str(uuid.uuid4())
    with start(root, "--api", "127.0.0.1:0") as daemon:
        url = wait_for_line(daemon, "HTTP API on").split("HTTP API on ", 1)[1].strip()
        with watch(root, "--trace", trace_id, "--kind", "route,handle_end") as watcher:
            try:
                printed = lines_of(watcher.stdout)
                assert next_line(printed, "watching notice").startswith(f"watching {url}")
                post(url, trace_id)
                shown = [next_line(printed, "event line") for _ in range(4)]
            finally:
                watcher.send_signal(signal.SIGINT)
                watcher.wait(timeout=10)
                assert watcher.stderr is not None
                assert watcher.stderr.read() == ""  # nothing said on the way out
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=20)
    assert all("\x1b[" not in line for line in shown)  # not a terminal: no colour
    assert [line.split()[2] for line in shown] == ["route"] * 3 + ["handle_end"]
    assert all(trace_id[-8:] in line for line in shown)
    assert shown[2].rstrip().endswith("/box → /box/sink  ttl 6")
    assert " /box/sink  cell took " in shown[3]
    assert shown[3].rstrip().endswith(" ms · ok")


def test_watch_without_the_token_the_daemon_needs_says_to_pass_it(make_tree: TreeFactory) -> None:
    root = tree(make_tree)
    with start(
        root, "--api", "127.0.0.1:0", "--api-token-env", "WATCH_TOKEN", env={"WATCH_TOKEN": "s3"}
    ) as daemon:
        wait_for_line(daemon, "HTTP API on")
        refused = subprocess.run(
            [MECLAW, "watch", "--root", str(root)], capture_output=True, text=True, timeout=30
        )
        allowed = watch(root, "--api-token-env", "WATCH_TOKEN", env={"WATCH_TOKEN": "s3"})
        with allowed:
            said = lines_of(allowed.stderr)
            printed = lines_of(allowed.stdout)
            assert next_line(printed, "watching notice").startswith("watching ")
            allowed.send_signal(signal.SIGINT)
            assert allowed.wait(timeout=10) == 0
            assert said.empty()
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=20)
    assert refused.returncode == 1
    [line] = refused.stderr.splitlines()
    assert line.startswith("meclaw: ")
    assert "(401)" in line
    assert "--api-token-env" in line


def test_watch_with_no_daemon_running_says_so_in_one_line(tmp_path: Path) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [MECLAW, "watch", "--root", str(tmp_path)], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"meclaw: no daemon is running on {tmp_path}; watching goes through a running "
        "daemon's API (start it with --api HOST:PORT, or name one with --api URL)"
    ]
    assert time.monotonic() - started < 10
