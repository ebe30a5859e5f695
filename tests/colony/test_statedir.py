"""Where a colony's state goes (colony/statedir.py): the tree by default, ``--state-dir``
otherwise, and a clear refusal of a folder that cannot hold it."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from colony.statedir import StateDir, StateDirError


def test_without_a_state_dir_everything_stays_in_the_tree(tmp_path: Path) -> None:
    state = StateDir.of(tmp_path)
    assert not state.separate
    assert state.colony_db == tmp_path / "colony.db"
    assert state.log_file == tmp_path / "log.jsonl"
    assert state.lease == tmp_path
    folder = tmp_path / "main" / "agent"
    assert state.cell("/agent", folder) == folder


def test_a_state_dir_that_is_the_root_however_spelled_is_the_default(tmp_path: Path) -> None:
    (tmp_path / "tree").mkdir()
    spelled = tmp_path / "tree" / ".." / "tree"
    assert not StateDir.of(tmp_path / "tree", spelled).separate


def test_a_separate_state_dir_mirrors_the_cell_paths_under_cells(tmp_path: Path) -> None:
    state = StateDir.of(tmp_path / "tree", tmp_path / "state")
    assert state.separate
    assert state.colony_db == tmp_path / "state" / "colony.db"
    assert state.log_file == tmp_path / "state" / "log.jsonl"
    assert state.lease == tmp_path / "state"
    assert state.cell("/support/agent", tmp_path / "tree" / "main" / "support" / "agent") == (
        tmp_path / "state" / "cells" / "support" / "agent"
    )
    assert state.cell("/x", None) is None  # a cell made in code keeps its state in memory


def test_prepare_makes_a_missing_state_dir_private_to_its_user(tmp_path: Path) -> None:
    state = StateDir.of(tmp_path, tmp_path / "deep" / "state")
    state.prepare()
    assert (tmp_path / "deep" / "state").is_dir()
    assert stat.S_IMODE((tmp_path / "deep" / "state").stat().st_mode) == 0o700
    assert list((tmp_path / "deep" / "state").iterdir()) == []  # the probe leaves nothing


def test_a_state_dir_that_is_a_file_is_refused_with_the_fix(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("")
    with pytest.raises(StateDirError) as refused:
        StateDir.of(tmp_path, tmp_path / "taken").prepare()
    assert str(refused.value) == (
        f"--state-dir {tmp_path / 'taken'}: not a folder; name a folder (it is made if missing)"
    )


def test_a_state_dir_that_cannot_be_made_is_refused_naming_why(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(StateDirError) as refused:
        StateDir.of(tmp_path, tmp_path / "file" / "state").prepare()
    text = str(refused.value)
    assert text.startswith(f"--state-dir {tmp_path / 'file' / 'state'}: cannot write there (")
    assert "can write" in text


def test_prepare_without_a_state_dir_writes_nothing_into_the_tree(tmp_path: Path) -> None:
    before = tmp_path.stat().st_mtime_ns
    StateDir.of(tmp_path).prepare()
    assert tmp_path.stat().st_mtime_ns == before
    assert list(tmp_path.iterdir()) == []
