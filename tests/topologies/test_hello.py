"""``topologies/hello`` does what its README says: the README's commands are run as written, in
a shell, from a folder laid out like the repository (a copy, so no run writes into the repo)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HELLO = REPO / "topologies" / "hello"


def readme_commands() -> list[tuple[str, str | None]]:
    """``(command, expected stdout or None)`` for each line of the README's ``sh`` blocks; a
    trailing ``# prints: X`` comment is the expected output."""
    text = (HELLO / "README.md").read_text(encoding="utf-8")
    out = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            command, _, comment = line.partition("  #")
            if command.strip():
                expected = comment.strip().removeprefix("prints: ")
                out.append((command.strip(), expected if comment.strip() != expected else None))
    return out


@pytest.mark.parametrize(("command", "expected"), readme_commands(), ids=lambda v: str(v))
def test_the_hello_readme_commands_run_as_written(
    tmp_path: Path, command: str, expected: str | None
) -> None:
    shutil.copytree(
        HELLO, tmp_path / "topologies" / "hello", ignore=shutil.ignore_patterns("*.db*", "*.jsonl")
    )
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    if expected is not None:
        assert done.stdout == expected + "\n", done.stderr


def test_printf_ada_into_meclaw_prints_the_greeting(tmp_path: Path) -> None:
    """The newcomer's first command, exactly as the README and the issue give it."""
    assert ("printf 'Ada\\n' | meclaw --root topologies/hello", "hello, Ada!") in readme_commands()
