"""What the file and edit cell tests share: a base folder fenced from an outside one holding a
secret, reached by links, and the shapes of a call and of a good reply."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

SECRET = "outside-secret-contents"


def fenced_base(tmp_path: Path, files: Mapping[str, str], outside: tuple[str, ...]) -> Path:
    """``tmp/base`` with ``files`` (relative path → text) and the links ``to-secret``,
    ``to-nowhere`` (a dangling one), ``to-outside`` and ``to-docs``; ``tmp/outside`` holds
    :data:`SECRET` in each of ``outside``."""
    root = tmp_path / "base"
    (root / "docs").mkdir(parents=True)
    for rel, text in files.items():
        (root / rel).write_text(text)
    away = tmp_path / "outside"
    away.mkdir()
    for name in outside:
        (away / name).write_text(SECRET)
    (root / "to-secret").symlink_to(away / "secret.txt")
    (root / "to-nowhere").symlink_to(away / "missing.txt")
    (root / "to-outside").symlink_to(away)
    (root / "to-docs").symlink_to(root / "docs")
    return root


def call(args: Any, call_id: str = "call-1") -> dict[str, Any]:
    """A body carrying one tool call whose text is ``args`` as JSON."""
    turn = {"origin": "assistant", "type": "tool_call", "id": call_id, "text": json.dumps(args)}
    return {"messages": [turn]}


def ok(content: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """A good reply's header and text (it answers ``call-1`` with no error code)."""
    header = content["header"]
    assert "error_code" not in header, content
    assert isinstance(header["duration_ms"], int)
    [turn] = content["messages"]
    assert (turn["origin"], turn["type"], turn["id"]) == ("tool", "tool_result", "call-1")
    return header, turn["text"]
