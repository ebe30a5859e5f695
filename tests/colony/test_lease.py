"""Who runs on a root: one daemon alone, or cluster members; the lease and its refusals."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from colony.lease import Holder, LeaseHeldError, RootLease, holder, members


def test_the_lease_refusal_says_already_running_on_this_root_and_names_the_pid(
    tmp_path: Path,
) -> None:
    with RootLease(tmp_path), pytest.raises(LeaseHeldError) as refused:
        RootLease(tmp_path).acquire()
    text = str(refused.value)
    assert "already running on this root" in text
    assert f"pid {os.getpid()}" in text
    assert str(tmp_path) in text


def test_a_released_lease_can_be_taken_again(tmp_path: Path) -> None:
    with RootLease(tmp_path):
        pass
    with RootLease(tmp_path):
        pass


# -- cluster members ----------------------------------------------------------------------------


def test_members_of_a_cluster_share_a_root(tmp_path: Path) -> None:
    with RootLease(tmp_path, member="a"), RootLease(tmp_path, member="b"):
        assert [m.node for m in members(tmp_path)] == ["a", "b"]
        assert {m.pid for m in members(tmp_path)} == {os.getpid()}


def test_a_daemon_alone_is_refused_while_members_run_naming_them(tmp_path: Path) -> None:
    with RootLease(tmp_path, member="a"), pytest.raises(LeaseHeldError) as refused:
        RootLease(tmp_path).acquire()
    text = str(refused.value)
    assert "cluster members are running on this root" in text
    assert f"a (pid {os.getpid()})" in text
    assert "cluster block" in text


def test_a_member_is_refused_while_a_daemon_runs_alone(tmp_path: Path) -> None:
    with RootLease(tmp_path), pytest.raises(LeaseHeldError) as refused:
        RootLease(tmp_path, member="a").acquire()
    text = str(refused.value)
    assert "without a cluster block is already running on this root" in text
    assert f"pid {os.getpid()}" in text
    assert members(tmp_path) == []  # the refused member left no file behind


def test_two_members_of_one_name_are_refused(tmp_path: Path) -> None:
    with RootLease(tmp_path, member="a"), pytest.raises(LeaseHeldError) as refused:
        RootLease(tmp_path, member="a").acquire()
    assert "node a is already running on this root" in str(refused.value)
    assert "its own --node" in str(refused.value)


def test_a_refused_member_leaves_the_root_to_a_daemon_alone(tmp_path: Path) -> None:
    with RootLease(tmp_path, member="a"), pytest.raises(LeaseHeldError):
        RootLease(tmp_path, member="a").acquire()
    # The refused one let go of its shared lock: once the member stops, the root is free.
    with RootLease(tmp_path):
        pass


def test_a_stopped_member_deletes_its_file_and_frees_the_root(tmp_path: Path) -> None:
    with RootLease(tmp_path, member="a"):
        assert (tmp_path / "colony.db-lease.a").exists()
    assert not (tmp_path / "colony.db-lease.a").exists()
    with RootLease(tmp_path):
        pass


def test_holder_finds_a_member_that_serves_an_api(tmp_path: Path) -> None:
    with RootLease(tmp_path, member="a"), RootLease(tmp_path, member="b") as b:
        first = holder(tmp_path)
        assert first is not None
        assert (first.node, first.api) == ("a", None)
        b.announce(api="http://127.0.0.1:7800")
        assert holder(tmp_path) == Holder(os.getpid(), "http://127.0.0.1:7800", "b")
    assert holder(tmp_path) is None


def test_holder_still_finds_a_daemon_alone(tmp_path: Path) -> None:
    with RootLease(tmp_path) as lease:
        lease.announce(api="http://127.0.0.1:7799")
        assert holder(tmp_path) == Holder(os.getpid(), "http://127.0.0.1:7799", None)


def test_the_file_of_a_dead_member_is_ignored_then_swept_by_the_next(tmp_path: Path) -> None:
    # A member killed with -9 leaves its file, unlocked.
    dead = tmp_path / "colony.db-lease.gone"
    dead.write_text(json.dumps({"pid": 999_999, "node": "gone", "api": "http://127.0.0.1:1"}))
    assert holder(tmp_path) is None
    assert members(tmp_path) == []
    with RootLease(tmp_path, member="a"):
        assert not dead.exists()
        assert [m.node for m in members(tmp_path)] == ["a"]
