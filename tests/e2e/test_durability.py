"""A real daemon keeps committing, reading and stopping cleanly after what used to break its
colony.db writer for good (issue 15, items 11, 12, 18, 19)."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from tests.colony.persist.disk import fill, small_disk
from tests.conftest import TreeFactory, cell, hive
from tests.e2e.test_cli_daemon import MECLAW, start, wait_for_line

USER = {"messages": [{"origin": "user", "type": "text", "text": "hi"}]}

SURROGATE_SCRIPT = (
    r"""print('{"messages": [{"origin": "assistant", "type": "text", "text": "odd \\ud800"}]}')"""
)
"""A code cell printing a JSON ``\ud800`` escape: its text holds a lone surrogate."""


@contextlib.contextmanager
def _killed_on_failure(process: subprocess.Popen[str]) -> Iterator[None]:
    """Kill the daemon when the test fails, so the failure is reported, not a hang."""
    try:
        yield
    except BaseException:
        process.kill()
        raise


def _poll(read: Callable[[], Any], deadline_s: float = 20) -> Any:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        value = read()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("the condition never held")


def test_a_lone_surrogate_from_a_cell_leaves_the_daemon_working(
    make_tree: TreeFactory,
) -> None:
    root = make_tree(
        {
            "main/config.json": hive({"from": ".", "to": "./echo"}),
            "main/echo/config.json": cell(
                "code", {"runner": "python3", "script_inline": SURROGATE_SCRIPT}
            ),
        }
    )
    with start(root, "--api", "127.0.0.1:0") as daemon, _killed_on_failure(daemon):
        url = wait_for_line(daemon, "HTTP API on").split("HTTP API on ", 1)[1].strip()
        with httpx.Client(base_url=url, trust_env=False, timeout=10) as client:
            first = client.post("/messages", json={"target": "/", "body": USER})
            assert first.status_code == 202

            def letters() -> list[dict[str, Any]]:
                response = client.get("/colony/dead_letters")
                assert response.status_code == 200
                rows: list[dict[str, Any]] = response.json()["dead_letters"]
                return rows

            # The emission has no out-edge: its dead letter carries the surrogate, and is kept.
            (letter,) = _poll(letters)
            assert letter["error_code"] == "no_route"
            assert letter["sender_path"] == "/echo"

            second = client.post("/messages", json={"target": "/", "body": USER})
            assert second.status_code == 202
            trace = second.json()["trace_id"]

            def rows() -> list[dict[str, Any]]:
                response = client.get("/colony/messages", params={"trace_id": trace})
                assert response.status_code == 200
                found: list[dict[str, Any]] = response.json()["messages"]
                return found

            assert {r["to_path"] for r in _poll(rows)} >= {"/", "/echo"}
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=20) == 0
    log = [json.loads(line) for line in (root / "log.jsonl").read_text().splitlines()]
    assert log[-1]["event"] == "colony_stopped"
    assert not [line for line in log if line["event"] == "unit_rejected"]


def test_a_daemon_on_a_full_disk_refuses_ingress_and_works_again_once_space_returns(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    tree = make_tree({"main/config.json": hive({"from": ".", "to": "/colony/registry"})})
    big = {"messages": [{"origin": "user", "type": "text", "text": "x" * 2_000_000}]}
    with small_disk(tmp_path / "disk") as disk:
        root = disk / "root"
        shutil.copytree(tree, root)
        with start(root, "--api", "127.0.0.1:0") as daemon, _killed_on_failure(daemon):
            url = wait_for_line(daemon, "HTTP API on").split("HTTP API on ", 1)[1].strip()
            with httpx.Client(base_url=url, trust_env=False, timeout=10) as client:
                assert (
                    client.post("/messages", json={"target": "/", "body": USER}).status_code == 202
                )
                filler = fill(disk)
                refused = client.post("/messages", json={"target": "/", "body": big})
                assert refused.status_code != 202  # 503 once HTTP ingress asks admission
                health = client.get("/health")  # it answers, and says what is wrong
                assert (health.status_code, health.json()["status"]) == (503, "failing")
                assert "colony.db cannot be written" in health.json()["reasons"][0]
                assert client.get("/ready").status_code == 503
                filler.unlink()

                def accepted() -> str | None:
                    posted = client.post("/messages", json={"target": "/", "body": big})
                    return str(posted.json()["trace_id"]) if posted.status_code == 202 else None

                trace = _poll(accepted)
                rows = client.get("/colony/messages", params={"trace_id": trace}).json()
                assert [r["to_path"] for r in rows["messages"]] == ["/"]
                assert client.get("/health").json()["status"] == "ok"
            daemon.send_signal(signal.SIGTERM)
            assert daemon.wait(timeout=20) == 0
            assert daemon.stderr is not None
            said = daemon.stderr.read()
        events = [
            json.loads(line)["event"] for line in (root / "log.jsonl").read_text().splitlines()
        ]
    assert "colony.db cannot be written" in said
    assert "colony.db takes writes again" in said
    assert "colony_db_recovered" in events
    assert events[-1] == "colony_stopped"


def test_a_garbage_colony_db_at_boot_is_named_with_the_fix_and_exits_1(
    make_tree: TreeFactory,
) -> None:
    root = make_tree({"main/config.json": hive({"from": ".", "to": "/colony/registry"})})
    (root / "colony.db").write_bytes(b"\x00garbage, not SQLite\n" * 100)
    done = subprocess.run([MECLAW, "--root", str(root)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert f"{root / 'colony.db'}: is not a SQLite database" in done.stderr
    assert "move it aside" in done.stderr
    assert "Traceback" not in done.stderr
    assert "internal error" not in done.stderr


def test_colony_db_deleted_under_a_running_daemon_is_reported_and_the_exit_is_1(
    make_tree: TreeFactory,
) -> None:
    root = make_tree({"main/config.json": hive({"from": ".", "to": "/colony/registry"})})
    with start(root, "--api", "127.0.0.1:0") as daemon, _killed_on_failure(daemon):
        url = wait_for_line(daemon, "HTTP API on").split("HTTP API on ", 1)[1].strip()
        for suffix in ("", "-wal", "-shm"):
            (root / f"colony.db{suffix}").unlink(missing_ok=True)
        wait_for_line(daemon, "colony.db was deleted while the daemon was running")
        posted = httpx.post(
            f"{url}/messages", json={"target": "/", "body": USER}, trust_env=False, timeout=10
        )
        assert posted.status_code != 202  # 503 once HTTP ingress asks admission
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=20) == 1
    lost = [
        line
        for line in (root / "log.jsonl").read_text().splitlines()
        if json.loads(line)["event"] == "colony_db_lost"
    ]
    assert len(lost) == 1
