"""Real daemons on one root: members of a cluster share it, everyone else is refused.

A second daemon on a root is allowed exactly when ``colony.json`` has a ``cluster`` block
(issue 18). The DSN is a real PostgreSQL schema's, so these daemons boot as they will once the
cluster backend connects at boot.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from colony.cluster.node import default_node_name
from colony.lease import holder, members
from tests.conftest import TreeFactory, hive
from tests.e2e.test_cli_daemon import MECLAW, start, wait_for_line
from tests.pg import PgSchema

READY = "colony running"


@pytest.fixture
def cluster_root(make_tree: TreeFactory, pg_schema: PgSchema) -> Path:
    return make_tree(
        {
            "colony.json": {"cluster": {"dsn": "${COLONY_PG_DSN}"}},
            ".env": f"COLONY_PG_DSN={pg_schema.dsn}\n",
            "main/config.json": hive({"from": ".", "to": "/colony/registry"}),
        }
    )


class Daemons:
    """Daemons a test started, each stopped (or killed) when the test ends."""

    def __init__(self) -> None:
        self.running: list[subprocess.Popen[str]] = []

    def start(self, root: Path, *args: str) -> subprocess.Popen[str]:
        process = start(root, *args)
        self.running.append(process)
        return process

    def stop(self, process: subprocess.Popen[str]) -> int:
        process.send_signal(signal.SIGTERM)
        return process.wait(timeout=20)


@pytest.fixture
def daemons() -> Iterator[Daemons]:
    started = Daemons()
    try:
        yield started
    finally:
        for process in started.running:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=5)
            if process.stderr is not None:
                process.stderr.close()


def refused(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [MECLAW, "--root", str(root), "--daemon", *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    return done


def test_two_members_of_a_cluster_run_on_one_root_and_operators_find_one(
    cluster_root: Path, daemons: Daemons
) -> None:
    a = daemons.start(cluster_root, "--node", "a", "--api", "127.0.0.1:0")
    wait_for_line(a, READY)
    b = daemons.start(cluster_root, "--node", "b")
    wait_for_line(b, READY)
    assert [(m.node, m.pid) for m in members(cluster_root)] == [("a", a.pid), ("b", b.pid)]
    found = holder(cluster_root)  # what `meclaw dead-letters replay --root` asks
    assert found is not None
    assert (found.node, found.pid) == ("a", a.pid)
    assert found.api is not None
    assert found.api.startswith("http://127.0.0.1:")
    replay = subprocess.run(
        [MECLAW, "dead-letters", "replay", "999", "--root", str(cluster_root)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert "no daemon is running" not in replay.stderr
    assert "replay refused (404" in replay.stderr  # a's API answered: no letter #999
    assert daemons.stop(a) == 0
    assert daemons.stop(b) == 0
    assert sorted(p.name for p in cluster_root.glob("colony.db-lease*")) == ["colony.db-lease"]


def test_a_member_without_node_is_named_after_its_host_and_pid(
    cluster_root: Path, daemons: Daemons
) -> None:
    member = daemons.start(cluster_root)
    wait_for_line(member, READY)
    [found] = members(cluster_root)
    assert found.node == default_node_name(host=socket.gethostname(), pid=member.pid)
    assert found.pid == member.pid


def test_two_members_of_one_name_on_one_root_are_refused(
    cluster_root: Path, daemons: Daemons
) -> None:
    first = daemons.start(cluster_root, "--node", "eu-1")
    wait_for_line(first, READY)
    second = refused(cluster_root, "--node", "eu-1")
    assert f"node eu-1 is already running on this root ({cluster_root}, pid {first.pid})" in (
        second.stderr
    )
    assert first.poll() is None


def test_a_daemon_without_the_cluster_block_is_refused_while_members_run(
    cluster_root: Path, daemons: Daemons
) -> None:
    member = daemons.start(cluster_root, "--node", "eu-1")
    wait_for_line(member, READY)
    (cluster_root / "colony.json").write_text("{}")  # an operator drops the block
    alone = refused(cluster_root)
    assert "cluster members are running on this root" in alone.stderr
    assert f"eu-1 (pid {member.pid})" in alone.stderr


def test_a_member_is_refused_on_a_root_a_daemon_runs_alone(
    cluster_root: Path, daemons: Daemons
) -> None:
    (cluster_root / "colony.json").write_text("{}")
    alone = daemons.start(cluster_root)
    wait_for_line(alone, READY)
    (cluster_root / "colony.json").write_text(json.dumps({"cluster": {"dsn": "${COLONY_PG_DSN}"}}))
    member = refused(cluster_root, "--node", "eu-1")
    assert f"without a cluster block is already running on this root ({cluster_root}, pid " in (
        member.stderr
    )
    assert list(cluster_root.glob("colony.db-lease.*")) == []


def test_a_killed_member_is_forgotten_and_its_file_swept_by_the_next(
    cluster_root: Path, daemons: Daemons
) -> None:
    killed = daemons.start(cluster_root, "--node", "gone", "--api", "127.0.0.1:0")
    wait_for_line(killed, READY)
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=10)
    assert (cluster_root / "colony.db-lease.gone").exists()  # kill -9 cleans nothing up
    assert holder(cluster_root) is None  # but nobody mistakes it for a running member
    nxt = daemons.start(cluster_root, "--node", "next")
    wait_for_line(nxt, READY)
    assert not (cluster_root / "colony.db-lease.gone").exists()
    assert [m.node for m in members(cluster_root)] == ["next"]


def test_node_without_a_cluster_block_runs_alone_and_says_it_has_no_effect(
    make_tree: TreeFactory, daemons: Daemons
) -> None:
    root = make_tree({"main/config.json": hive({"from": ".", "to": "/colony/registry"})})
    alone = daemons.start(root, "--node", "eu-1")
    said = wait_for_line(alone, "--node")
    assert "--node eu-1 has no effect: colony.json has no cluster block" in said
    wait_for_line(alone, READY)
    assert "already running on this root" in refused(root, "--node", "eu-2").stderr
    assert daemons.stop(alone) == 0
    logged = [json.loads(line) for line in (root / "log.jsonl").read_text().splitlines()]
    [ignored] = [e for e in logged if e["event"] == "node_ignored"]
    assert ignored["node"] == "eu-1"


@pytest.mark.parametrize("name", ["", "a/b", "-a", "x" * 64])
def test_a_node_name_unsafe_as_a_file_name_is_a_usage_error(
    make_tree: TreeFactory, name: str
) -> None:
    root = make_tree({"main/config.json": hive()})
    done = subprocess.run(
        [MECLAW, "--root", str(root), "--daemon", "--node", name],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert f"--node {name!r}:" in done.stderr
    assert not (root / "colony.db").exists()
