"""``make run`` runs ``meclaw demo``: the research bot, offline, on a fresh checkout."""

from __future__ import annotations

import json
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import httpx

from colony.demo import ANSWER

REPO = Path(__file__).resolve().parents[2]


def test_the_demo_answers_the_chat_with_no_dead_letters_and_leaves_the_tree_untouched() -> None:
    before = sorted(p.relative_to(REPO) for p in (REPO / "topologies").rglob("*"))
    done = subprocess.run(
        [sys.executable, "-m", "colony", "demo"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert f"answer: {ANSWER}" in lines
    assert "dead letters: 0" in lines
    hops = [line.split() for line in lines if " route " in line and " ttl " in line]
    assert hops[0][4:7] == ["@external", "→", "/prep"]  # as meclaw watch prints it
    assert any(h[4:7] == ["/planner", "→", "/proxy"] for h in hops)  # the answer left for the chat
    llm = [line for line in lines if " llm " in line]
    assert len(llm) == 3
    assert all("10 → 5 tokens" in line for line in llm)
    summary = next(line for line in lines if "routing decisions," in line)
    assert "3 model calls, 2 searches, 2 pages fetched" in summary
    assert int(summary.split()[0]) == len(hops)
    assert "meclaw --root topologies/telegram-research" in done.stdout
    assert "Traceback" not in done.stderr
    assert sorted(p.relative_to(REPO) for p in (REPO / "topologies").rglob("*")) == before


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _lines(stream: IO[str], into: queue.Queue[str]) -> None:
    for line in stream:
        into.put(line)


def _until(lines: queue.Queue[str], seen: list[str], check: Callable[[str], bool]) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            continue
        seen.append(line)
        if check(line):
            return line
    raise AssertionError("timed out; got:\n" + "".join(seen))


def _watched(url: str) -> bool:
    """Whether a client holds the demo's event stream (``/colony/stats`` counts the watchers;
    the demo's own printing is one)."""
    stats = httpx.get(f"{url}/colony/stats", trust_env=False)
    return stats.is_success and stats.json()["stats"]["watchers"] >= 2


def test_meclaw_watch_shows_a_held_demo_s_routing_live() -> None:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    demo = subprocess.Popen(
        [sys.executable, "-m", "colony", "demo", "--api", f"127.0.0.1:{port}", "--hold"],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watch = None
    try:
        assert demo.stdout is not None
        assert demo.stdin is not None
        said: queue.Queue[str] = queue.Queue()
        threading.Thread(target=_lines, args=(demo.stdout, said), daemon=True).start()
        told: list[str] = []
        assert f"meclaw watch --api {url}" in _until(said, told, lambda s: "meclaw watch" in s)
        _until(said, told, lambda s: s.startswith("ask more"))
        watch = subprocess.Popen(
            [sys.executable, "-m", "colony", "watch", "--api", url, "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert watch.stdout is not None
        events: queue.Queue[str] = queue.Queue()
        threading.Thread(target=_lines, args=(watch.stdout, events), daemon=True).start()
        deadline = time.monotonic() + 30
        while not _watched(url):  # the watch has connected: what follows is live
            assert time.monotonic() < deadline, "meclaw watch did not connect"
            time.sleep(0.1)
        demo.stdin.write("Do sea otters hold hands?\n")
        demo.stdin.flush()
        answered = _until(said, told, lambda s: s.startswith("answer:"))
        assert answered.strip() == f"answer: {ANSWER}"
        seen: list[str] = []
        first = json.loads(_until(events, seen, lambda s: '"@external"' in s))
        assert (first["kind"], first["to"]) == ("route", "/prep")
        planner = json.loads(
            _until(events, seen, lambda s: '"handle_end"' in s and '"/planner"' in s)
        )
        assert planner["trace_id"] == first["trace_id"]
        assert planner["outcome"] == "ok"
        assert planner["duration_ms"] >= 0
        demo.stdin.close()
        assert demo.wait(timeout=30) == 0
    finally:
        for process in (demo, watch):
            if process is None:
                continue
            if process.poll() is None:
                process.kill()
                process.wait()
            for pipe in (process.stdin, process.stdout, process.stderr):
                if pipe is not None:
                    pipe.close()
