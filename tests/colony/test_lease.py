"""One daemon per root: the lease and what its refusal says."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from colony.lease import LeaseHeldError, RootLease


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
