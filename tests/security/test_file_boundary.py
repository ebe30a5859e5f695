"""Issue 10 item 6: ``file`` refuses every escape. tests/cells/test_file.py pins ``..``,
absolute paths, links out (existing or dangling, last or middle component) and a property over
random paths; these add the spellings and races it does not cover."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

import cells.file as file_module
from cells.file import FileCell
from colony.envelope import source_message
from colony.testing import spec_for

SECRET = "outside-secret-contents"


@pytest.fixture
def base(tmp_path: Path) -> Path:
    root = tmp_path / "base"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.txt").write_text("alpha\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    (outside / "a.txt").write_text(SECRET)
    (root / "loop").symlink_to(root / "loop")
    (root / "hop1").symlink_to(root / "hop2")
    (root / "hop2").symlink_to(outside)
    return root


async def ask(base: Path, args: dict[str, Any]) -> tuple[str, str]:
    cell = FileCell(spec_for("/files", {"base_path": str(base)}))
    turn = {"origin": "assistant", "type": "tool_call", "id": "c1", "text": json.dumps(args)}
    [emission] = await cell.handle(source_message("/files", {"messages": [turn]}, ttl=8))
    header = emission.content["header"]
    return header.get("error_code", ""), emission.content["messages"][0]["text"]


def untouched(base: Path) -> None:
    outside = base.parent / "outside"
    assert sorted(os.listdir(outside)) == ["a.txt", "secret.txt"]
    assert (outside / "secret.txt").read_text() == SECRET


@pytest.mark.parametrize(
    "path",
    [
        "hop1/secret.txt",  # a chain of links whose last hop leaves
        "docs/../hop1/secret.txt",
        "./../outside/secret.txt",
        "docs/./../../outside/secret.txt",
        "docs//..//..//outside/secret.txt",
        "../base/../outside/secret.txt",
        "hop1",
    ],
)
@pytest.mark.parametrize("op", ["read", "stat", "list", "write"])
async def test_more_spellings_of_a_way_out_are_refused(base: Path, path: str, op: str) -> None:
    args: dict[str, Any] = {"op": op, "path": path}
    if op == "write":
        args["content"] = "pwned"
    code, text = await ask(base, args)
    assert code in ("path_outside_boundary", "not_a_directory", "not_a_file"), (code, text)
    assert SECRET not in text
    assert "secret.txt" not in text
    untouched(base)


@pytest.mark.parametrize("path", ["loop", "loop/x", "docs\x00/../../outside/secret.txt", "~"])
@pytest.mark.parametrize("op", ["read", "write"])
async def test_loops_nul_bytes_and_tildes_never_leave_the_base(
    base: Path, path: str, op: str
) -> None:
    args: dict[str, Any] = {"op": op, "path": path}
    if op == "write":
        args["content"] = "pwned"
    code, text = await ask(base, args)
    assert SECRET not in text
    untouched(base)
    if path == "~" and op == "write":
        assert code == ""
        assert (base / "~").read_text() == "pwned"  # a plain name inside the base
    else:
        assert code != "", text


async def test_a_folder_swapped_for_a_link_out_after_the_check_is_not_followed(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked = file_module._resolve

    def racing(base_path: str, relative: str, *, for_write: bool) -> str:
        real = checked(base_path, relative, for_write=for_write)
        # What a concurrent bash call in the same colony could do at this instant.
        os.rename(base / "docs", base / "docs-old")
        (base / "docs").symlink_to(base.parent / "outside")
        return real

    monkeypatch.setattr(file_module, "_resolve", racing)
    _code, text = await ask(base, {"op": "read", "path": "docs/a.txt"})
    assert SECRET not in text
