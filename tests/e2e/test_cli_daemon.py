"""``meclaw --root DIR``: a real daemon process, booted, signalled and stopped."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from colony.persist.records import read_dead_letters
from colony.persist.source import Source
from tests.conftest import TreeFactory, cell, hive

MECLAW = str(Path(sys.executable).with_name("meclaw"))


def start(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    mode = [] if "--api" in args else ["--daemon"]  # never the stdio bridge here
    return subprocess.Popen(
        [MECLAW, "--root", str(root), *mode, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def wait_for_line(process: subprocess.Popen[str], needle: str, timeout: float = 20) -> str:
    assert process.stderr is not None
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            break
        seen.append(line)
        if needle in line:
            return line
    raise AssertionError(f"never saw {needle!r}; stderr so far: {''.join(seen)}")


def hive_only(make_tree: TreeFactory) -> Path:
    return make_tree(
        {
            "main/config.json": hive({"from": ".", "to": "./box"}),
            "main/box/config.json": hive({"from": ".", "to": "/colony/registry"}),
            ".env": "SECRET_TOKEN=do-not-log-me\n",
            "main/box/notes/config.json": {
                "cell": {"type": "hive"},
                "description": "${SECRET_TOKEN}",
            },
        }
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_the_daemon_boots_and_stops_cleanly_on_a_signal(make_tree: TreeFactory, sig: int) -> None:
    root = hive_only(make_tree)
    with start(root) as process:
        wait_for_line(process, "colony running")
        process.send_signal(sig)
        assert process.wait(timeout=20) == 0
    events = [json.loads(line)["event"] for line in (root / "log.jsonl").read_text().splitlines()]
    assert events[0] == "colony_started"
    assert events[-1] == "colony_stopped"
    assert (root / "colony.db").exists()


def test_secrets_substituted_into_the_tree_never_reach_the_log(make_tree: TreeFactory) -> None:
    root = hive_only(make_tree)
    with start(root, "--log-level", "debug") as process:
        wait_for_line(process, "colony running")
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=20)
    assert "do-not-log-me" not in (root / "log.jsonl").read_text()


def test_a_second_daemon_on_the_same_root_is_refused(make_tree: TreeFactory) -> None:
    root = hive_only(make_tree)
    with start(root) as first:
        try:
            wait_for_line(first, "colony running")
            second = subprocess.run(
                [MECLAW, "--root", str(root), "--daemon"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert second.returncode == 1
            assert "already running on this root" in second.stderr
            assert f"pid {first.pid}" in second.stderr
            assert "Traceback" not in second.stderr
        finally:
            first.send_signal(signal.SIGTERM)
            first.wait(timeout=20)


def test_a_dangling_endpoint_boots_with_the_warning_validate_gives_and_dead_letters_its_traffic(
    make_tree: TreeFactory,
) -> None:
    # --validate warns and exits 0 (as meclaw does), so boot must not refuse what it passed.
    root = make_tree({"main/config.json": hive({"from": ".", "to": "/sink"})})
    done = subprocess.run(
        [MECLAW, "--root", str(root)], input="hello\n", capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert "warning[dangling_endpoint]" in done.stderr
    assert "/sink" in done.stderr
    assert "Traceback" not in done.stderr
    [letter] = read_dead_letters(Source.sqlite(root / "colony.db"))
    assert (letter.error_code, letter.resolved_target) == ("unresolved_path", "/sink")
    logged = [json.loads(line) for line in (root / "log.jsonl").read_text().splitlines()]
    assert [e["code"] for e in logged if e["event"] == "config_warning"] == ["dangling_endpoint"]


def test_an_invalid_tree_is_reported_and_nothing_starts(make_tree: TreeFactory) -> None:
    root = make_tree({"main/config.json": hive(), "main/a/config.json": cell("lmm")})
    done = subprocess.run([MECLAW, "--root", str(root)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert "error[unknown_cell_type]" in done.stderr
    assert not (root / "colony.db").exists()


def test_the_env_flag_supplies_the_boots_variables(make_tree: TreeFactory, tmp_path: Path) -> None:
    root = make_tree(
        {
            "main/config.json": {
                "cell": {"type": "hive"},
                "description": "${MECLAW_BOOT_ONLY_VAR}",
            }
        }
    )
    missing = subprocess.run(
        [MECLAW, "--root", str(root)], capture_output=True, text=True, timeout=30
    )
    assert missing.returncode == 1
    assert "env_var_missing" in missing.stderr
    env_file = tmp_path / "boot.env"
    env_file.write_text("MECLAW_BOOT_ONLY_VAR=present\n")
    with start(root, "--env", str(env_file)) as process:
        wait_for_line(process, "colony running")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0


def test_the_api_serves_a_running_daemon_over_a_real_socket(make_tree: TreeFactory) -> None:
    import httpx

    root = hive_only(make_tree)
    with start(root, "--api", "127.0.0.1:0") as process:
        line = wait_for_line(process, "HTTP API on")
        url = line.split("HTTP API on ", 1)[1].strip()
        response = httpx.get(f"{url}/health", trust_env=False, timeout=10)
        assert response.json()["status"] == "ok"
        posted = httpx.post(
            f"{url}/messages",
            json={"target": "/nowhere", "body": {"messages": []}},
            trust_env=False,
            timeout=10,
        )
        assert posted.status_code == 202
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0


@pytest.mark.parametrize(
    "args",
    [["--api", "0.0.0.0:7799"], ["--api", "nonsense"], ["--api-token-env", "MECLAW_NO_SUCH_VAR"]],
)
def test_an_unsafe_or_malformed_api_flag_is_a_usage_error(
    make_tree: TreeFactory, args: list[str]
) -> None:
    root = hive_only(make_tree)
    done = subprocess.run(
        [MECLAW, "--root", str(root), *args], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr


def test_dead_letters_follow_prints_a_new_dead_letter_within_a_second(
    make_tree: TreeFactory,
) -> None:
    import httpx

    root = hive_only(make_tree)
    with start(root, "--api", "127.0.0.1:0") as daemon:
        url = wait_for_line(daemon, "HTTP API on").split("HTTP API on ", 1)[1].strip()
        with subprocess.Popen(
            [MECLAW, "dead-letters", "--root", str(root), "--follow"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        ) as follower:
            try:
                time.sleep(1.0)  # the follower is polling an empty table
                posted = time.monotonic()
                httpx.post(
                    f"{url}/messages",
                    json={"target": "/nowhere", "body": {"messages": []}},
                    trust_env=False,
                    timeout=10,
                )
                assert follower.stdout is not None
                line = follower.stdout.readline()
                assert time.monotonic() - posted < 1.5
                assert "unresolved_path" in line
                assert "/nowhere" in line
            finally:
                follower.send_signal(signal.SIGINT)
                follower.wait(timeout=10)
        trace = subprocess.run(
            [MECLAW, "dead-letters", "--root", str(root), "--json"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        [letter] = [json.loads(x) for x in trace.stdout.splitlines()]
        replayed = subprocess.run(
            [MECLAW, "dead-letters", "replay", str(letter["id"]), "--api", url],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert replayed.returncode == 0, replayed.stderr
        assert letter["trace_id"] in replayed.stdout
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=20) == 0
    tree = subprocess.run(
        [MECLAW, "trace", letter["trace_id"], "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    # A message to nowhere is never logged (it died before any hop): the trace is its dead
    # letters, the original's and the replay's.
    assert tree.returncode == 0, tree.stderr
    first, second = letter["id"], letter["id"] + 1
    assert tree.stdout.splitlines() == [
        f"trace {letter['trace_id']}  0 hops · 2 dead letters",
        f"├── ✗ / → /nowhere  dead letter #{first} unresolved_path: no cell or hive at this path",
        f"└── ✗ / → /nowhere  dead letter #{second} unresolved_path: no cell or hive at this path",
    ]
    after = subprocess.run(
        [MECLAW, "dead-letters", "--root", str(root)], capture_output=True, text=True, timeout=30
    )
    assert after.stdout.count("unresolved_path") == 2  # the replay died the same way, same trace


def test_trace_prints_the_hop_tree_with_the_ttl_times_and_durations_at_each_hop(
    make_tree: TreeFactory,
) -> None:
    import httpx

    root = make_tree(
        {
            "main/config.json": hive({"from": ".", "to": "./box"}),
            "main/box/config.json": hive({"from": ".", "to": "./sink"}),
            "main/box/sink/config.json": cell("code"),
        }
    )
    with start(root, "--api", "127.0.0.1:0") as daemon:
        url = wait_for_line(daemon, "HTTP API on").split("HTTP API on ", 1)[1].strip()
        trace_id = httpx.post(
            f"{url}/messages",
            json={"target": "/", "body": {"messages": []}, "ttl": 9},
            trust_env=False,
            timeout=10,
        ).json()["trace_id"]
        time.sleep(0.5)
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=20)
    done = subprocess.run(
        [MECLAW, "trace", trace_id, "--root", str(root)], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    patterns = [
        rf"trace {trace_id}  3 hops · \d+ ms",
        r"└── @external → /  ttl 8  \+0 ms  fired /#0",
        r"    └── / → /box  ttl 7  \+\d+ ms  fired /box#0",  # the edges that fired at a hive
        r"        └── /box → /box/sink  ttl 6  \+\d+ ms  ·  took \d+ ms · ok",
    ]
    lines = done.stdout.splitlines()  # a pipe: no colour, no line wrapped
    assert len(lines) == len(patterns), lines
    for line, pattern in zip(lines, patterns, strict=True):
        assert re.fullmatch(pattern, line), (line, pattern)
    as_json = subprocess.run(
        [MECLAW, "trace", trace_id, "--root", str(root), "--json"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    doc = json.loads(as_json.stdout)
    assert [r["to_path"] for r in doc["trace"]] == ["/", "/box", "/box/sink"]
    assert [(r["cell"], r["outcome"]) for r in doc["handling"]] == [("/box/sink", "ok")]
