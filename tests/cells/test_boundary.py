"""The base_path fence shared by the file and edit cells (cells/boundary.py)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

import cells.edit as edit_module
import cells.file as file_module
from cells import boundary
from cells.boundary import OpError, climbs_out, inside, open_parent, open_under, resolve
from cells.edit import EDIT
from cells.file import FILE
from colony.cell import PydanticCheck


@pytest.fixture
def fenced(tmp_path: Path) -> Path:
    root = tmp_path / "base"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f.txt").write_text("in")
    (tmp_path / "base-sibling").mkdir()
    (tmp_path / "base-sibling" / "f.txt").write_text("out")
    (root / "up").symlink_to(tmp_path / "base-sibling")
    (root / "across").symlink_to(root / "a" / "b")
    return Path(os.path.realpath(root))


@pytest.mark.parametrize(
    ("relative", "out"),
    [
        ("..", True),
        ("../base/x", True),  # out first, even if it would come back in
        ("a/../..", True),
        ("a/./../../x", True),
        ("a/..", False),
        ("a/b/../../c", False),
        ("./a//b/..", False),
        ("...", False),  # a name, not a climb
        ("a..b", False),
    ],
)
def test_a_climb_above_the_start_is_seen_without_the_file_system(relative: str, out: bool) -> None:
    assert climbs_out(relative) is out


def test_a_sibling_whose_name_extends_the_base_is_not_inside_it() -> None:
    assert inside("/srv/base", "/srv/base")
    assert inside("/srv/base/x", "/srv/base")
    assert not inside("/srv/base-sibling/x", "/srv/base")
    assert inside("/x", "/")


@pytest.mark.parametrize("for_write", [False, True])
def test_resolve_follows_links_that_stay_inside_and_refuses_those_that_leave(
    fenced: Path, for_write: bool
) -> None:
    base = str(fenced)
    assert resolve(base, "across/f.txt", for_write=for_write) == str(fenced / "a/b/f.txt")
    for way_out in ("up/f.txt", "up/new.txt", "../base-sibling/f.txt", "a/../../x"):
        with pytest.raises(OpError) as raised:
            resolve(base, way_out, for_write=for_write)
        assert (raised.value.code, str(raised.value)) == ("path_outside_boundary", boundary.OUTSIDE)
    with pytest.raises(OpError) as absolute:
        resolve(base, str(fenced / "a"), for_write=for_write)
    assert absolute.value.code == "invalid_input"


def test_a_write_resolves_only_its_parent_unless_the_name_is_a_link(fenced: Path) -> None:
    base = str(fenced)
    assert resolve(base, "a/b/new.txt", for_write=True) == str(fenced / "a/b/new.txt")
    (fenced / "a" / "link.txt").symlink_to(fenced / "a" / "b" / "f.txt")
    assert resolve(base, "a/link.txt", for_write=True) == str(fenced / "a/b/f.txt")


def test_open_parent_walks_to_the_folder_and_names_the_last_component(fenced: Path) -> None:
    folder, name = open_parent(str(fenced), str(fenced / "a" / "b" / "f.txt"))
    try:
        assert name == "f.txt"
        assert os.fstat(folder).st_ino == (fenced / "a" / "b").stat().st_ino
    finally:
        os.close(folder)
    folder, name = open_parent(str(fenced), str(fenced))
    try:
        assert name == ""
        assert os.fstat(folder).st_ino == fenced.stat().st_ino
    finally:
        os.close(folder)


def test_the_walk_refuses_a_middle_folder_that_became_a_link(fenced: Path) -> None:
    checked = resolve(str(fenced), "a/b/f.txt", for_write=False)
    os.rename(fenced / "a", fenced / "a-old")
    (fenced / "a").symlink_to(fenced.parent / "base-sibling")
    before = set(os.listdir("/proc/self/fd"))
    for walk in (
        lambda: open_parent(str(fenced), checked),
        lambda: open_under(str(fenced), checked, os.O_RDONLY),
    ):
        with pytest.raises(OSError, match=r"Too many levels|Not a directory") as raised:
            walk()
        assert raised.value.errno in (errno.ELOOP, errno.ENOTDIR)
    assert set(os.listdir("/proc/self/fd")) == before  # the walk closed what it opened


def test_file_and_edit_share_one_fence_and_one_params_check() -> None:
    file_check = FILE.check_params
    edit_check = EDIT.check_params
    assert isinstance(file_check, PydanticCheck)
    assert isinstance(edit_check, PydanticCheck)
    # The very objects of cells/boundary.py, not copies that answer alike today and drift later.
    assert file_check._extra is edit_check._extra is boundary.check_base
    assert issubclass(file_check.model, boundary.BasePathParams)
    assert issubclass(edit_check.model, boundary.BasePathParams)
    file_uses, edit_uses = vars(file_module), vars(edit_module)  # what each module's code calls
    assert file_uses["resolve"] is edit_uses["resolve"] is boundary.resolve
    assert file_uses["_open_under"] is boundary.open_under
    assert edit_uses["open_parent"] is boundary.open_parent
    assert file_uses["_failure"] is edit_uses["failure"] is boundary.failure
    assert file_uses["OpError"] is edit_uses["OpError"] is boundary.OpError
    for params in ({"base_path": "rel"}, {"base_path": "/nonexistent/dir"}, {}):
        assert file_check(params, None) == edit_check(params, None)
