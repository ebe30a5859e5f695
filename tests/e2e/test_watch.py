"""``meclaw watch`` against a real daemon process: it finds the daemon's API from the root's
lease, prints the routing of a message as it happens, and ends quietly on Ctrl-C; and it says
in one line what is wrong when no daemon runs or the token is missing."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from queue import Empty, Queue
from typing import IO, Any

import httpx

from tests.conftest import TreeFactory, cell, hive
from tests.e2e.test_cli_daemon import MECLAW, start, wait_for_line
from tests.processes import alive

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


def post(url: str) -> str:
    """Send a message into the colony; its trace id."""
    body = {"target": "/", "body": {"messages": []}, "ttl": 9}
    answer = httpx.post(f"{url}/messages", json=body, trust_env=False, timeout=10)
    assert answer.status_code == 202, answer.text
    return str(answer.json()["trace_id"])


def test_watch_prints_the_route_and_handling_of_a_message_sent_to_the_running_daemon(
    make_tree: TreeFactory,
) -> None:
    root = tree(make_tree)
    with start(root, "--api", "127.0.0.1:0") as daemon:
        url = wait_for_line(daemon, "HTTP API on").split("HTTP API on ", 1)[1].strip()
        with watch(root, "--json") as watcher:
            try:
                said = lines_of(watcher.stderr)
                assert next_line(said, "watching notice").startswith(f"watching {url}")
                trace_id = post(url)
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
    with start(root, "--api", "127.0.0.1:0") as daemon:
        url = wait_for_line(daemon, "HTTP API on").split("HTTP API on ", 1)[1].strip()
        with watch(root, "--cell", "/box", "--kind", "route,handle_end") as watcher:
            try:
                printed = lines_of(watcher.stdout)
                assert next_line(printed, "watching notice").startswith(f"watching {url}")
                trace_id = post(url)
                shown = [next_line(printed, "event line") for _ in range(3)]
            finally:
                watcher.send_signal(signal.SIGINT)
                watcher.wait(timeout=10)
                assert watcher.stderr is not None
                assert watcher.stderr.read() == ""  # nothing said on the way out
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=20)
    assert all("\x1b[" not in line for line in shown)  # not a terminal: no colour
    # --cell /box: what goes to or through /box, not the hop into the root hive.
    assert [line.split()[2] for line in shown] == ["route", "route", "handle_end"]
    assert all(trace_id[-8:] in line for line in shown)
    assert shown[0].rstrip().endswith("/ → /box  ttl 7  fired /box#0")
    assert shown[1].rstrip().endswith("/box → /box/sink  ttl 6")
    assert " /box/sink  cell took " in shown[2]
    assert shown[2].rstrip().endswith(" ms · ok")


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


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_watch_outlives_a_daemon_restart_and_resumes_where_it_left_off(
    make_tree: TreeFactory,
) -> None:
    root = tree(make_tree)
    address = f"127.0.0.1:{free_port()}"
    url = f"http://{address}"
    with watch_after(root, address) as (watcher, printed):
        first = post(url)
        before = [next_line(printed, "event line") for _ in range(5)]
        stop(root)
        assert next_line(printed, "lost notice").startswith("connection lost (")
        with start(root, "--api", address) as daemon:
            wait_for_line(daemon, "HTTP API on")
            assert next_line(printed, "reconnected notice") == "reconnected\n"
            second = post(url)
            after = [next_line(printed, "event line") for _ in range(5)]
            watcher.send_signal(signal.SIGINT)
            assert watcher.wait(timeout=10) == 0
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=20)
    assert all(first[-8:] in line for line in before)
    assert all(second[-8:] in line for line in after)  # nothing of the first trace twice


@contextlib.contextmanager
def watch_after(root: Path, address: str) -> Iterator[tuple[subprocess.Popen[str], Queue[str]]]:
    """A daemon on ``address`` (left running for the test to stop) and a watch following it."""
    daemon = start(root, "--api", address)
    wait_for_line(daemon, "HTTP API on")
    with watch(root, "--api", f"http://{address}") as watcher:
        try:
            printed = lines_of(watcher.stdout)
            assert next_line(printed, "watching notice").startswith("watching ")
            yield watcher, printed
        finally:
            if watcher.poll() is None:
                watcher.send_signal(signal.SIGINT)
                watcher.wait(timeout=10)
            if daemon.poll() is None:
                daemon.send_signal(signal.SIGTERM)
                daemon.wait(timeout=20)
            assert daemon.stderr is not None
            daemon.stderr.close()


def stop(root: Path) -> None:
    """Stop the daemon running on ``root`` (its pid is in the root's lease)."""
    lease = json.loads((root / "colony.db-lease").read_text())
    os.kill(lease["pid"], signal.SIGTERM)
    deadline = time.monotonic() + 20
    while (root / "colony.db-lease").exists() and alive(lease["pid"]):
        assert time.monotonic() < deadline, "the daemon did not stop"
        time.sleep(0.05)


def test_watch_ends_quietly_when_the_reader_of_its_output_goes(make_tree: TreeFactory) -> None:
    root = tree(make_tree)
    with start(root, "--api", "127.0.0.1:0") as daemon:
        url = wait_for_line(daemon, "HTTP API on").split("HTTP API on ", 1)[1].strip()
        with watch(root) as watcher:  # `meclaw watch | head -1`
            assert watcher.stdout is not None
            assert watcher.stdout.readline().startswith("watching ")
            watcher.stdout.close()
            post(url)  # its first line finds nobody reading
            assert watcher.wait(timeout=WITHIN_S) == 0
            assert watcher.stderr is not None
            assert watcher.stderr.read() == ""
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=20)
