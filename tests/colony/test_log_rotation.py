"""``log.jsonl`` is rotated by size with a kept count, never splits a line, never rotates
stdout, and a rotation that fails never raises into the caller (the line is still written)."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from colony.observability import Rotation, SafeFileWriter, file_logger

LINE = "x" * 90  # with its newline, 91 bytes


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def test_past_its_size_the_log_moves_to_dot_one_and_a_new_file_starts(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    with path.open("a", encoding="utf-8") as stream:
        writer = SafeFileWriter(stream, max_bytes=300, keep=2)
        for n in range(5):
            writer.msg(f"{n}{LINE}")
    assert [line[0] for line in _lines(tmp_path / "log.jsonl.1")] == ["0", "1", "2"]
    assert [line[0] for line in _lines(path)] == ["3", "4"]
    assert all(len(line) == 91 for line in _lines(path))  # whole lines only


def test_only_the_kept_count_of_rotated_files_remains(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    with path.open("a", encoding="utf-8") as stream:
        writer = SafeFileWriter(stream, max_bytes=100, keep=2)
        for n in range(6):
            writer.msg(f"{n}{LINE}")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "log.jsonl",
        "log.jsonl.1",
        "log.jsonl.2",
    ]
    assert [_lines(tmp_path / name)[0][0] for name in ("log.jsonl.2", "log.jsonl.1")] == [
        "3",
        "4",
    ]
    assert _lines(path)[0][0] == "5"


def test_a_keep_of_zero_starts_the_log_afresh_without_a_rotated_file(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    with path.open("a", encoding="utf-8") as stream:
        writer = SafeFileWriter(stream, max_bytes=100, keep=0)
        for n in range(3):
            writer.msg(f"{n}{LINE}")
    assert [p.name for p in tmp_path.iterdir()] == ["log.jsonl"]
    assert _lines(path) == [f"2{LINE}"]


def test_a_rotation_that_fails_keeps_writing_to_the_full_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "log.jsonl"

    def refuse(src: object, dst: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)
    with path.open("a", encoding="utf-8") as stream:
        writer = SafeFileWriter(stream, max_bytes=100, keep=3)
        for n in range(4):
            writer.msg(f"{n}{LINE}")  # never raises
    assert len(_lines(path)) == 4
    assert writer.dropped == 0


def test_a_failed_rotation_is_tried_again_only_after_a_pause(tmp_path: Path) -> None:
    rotation = Rotation(str(tmp_path / "missing" / "log.jsonl"), 100, 1)
    assert rotation.rotate() is None
    assert "FileNotFoundError" in rotation.error
    rotation.error = ""
    assert rotation.rotate() is None
    assert rotation.error == ""  # not tried: within RETRY_S


def test_a_stream_that_is_not_its_named_file_is_never_rotated(tmp_path: Path) -> None:
    out = tmp_path / "stdout.txt"
    with out.open("w", encoding="utf-8") as raw:
        stdout = io.TextIOWrapper(io.FileIO(raw.fileno(), "w", closefd=False), encoding="utf-8")
        assert stdout.name == raw.fileno()  # like sys.stdout sent to a file: no path of its own
        writer = SafeFileWriter(stdout, max_bytes=100, keep=2)
        for n in range(3):
            writer.msg(f"{n}{LINE}")
        stdout.flush()
    assert [p.name for p in tmp_path.iterdir()] == ["stdout.txt"]


def test_the_daemon_logger_rotates_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    with path.open("a", encoding="utf-8") as stream:
        log = file_logger(stream, "info", max_bytes=400, keep=1)
        for n in range(10):
            log.info("tick", n=n)
    rotated = [json.loads(line)["n"] for line in _lines(tmp_path / "log.jsonl.1")]
    current = [json.loads(line)["n"] for line in _lines(path)]
    assert rotated + current == list(range(rotated[0], 10))
    assert current[-1] == 9


def test_a_rotation_whose_new_file_failed_keeps_the_rotated_files_and_starts_the_log_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "log.jsonl"
    (tmp_path / "log.jsonl.1").write_text("kept\n", encoding="utf-8")
    real_open = os.open
    failures = [OSError(24, "Too many open files")]

    def open_once_failing(*args: object, **kwargs: object) -> int:
        if failures:  # the renames went through; the new file fails once (EMFILE)
            raise failures.pop()
        return real_open(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", open_once_failing)
    monkeypatch.setattr(Rotation, "RETRY_S", 0.0)
    with path.open("a", encoding="utf-8") as stream:
        writer = SafeFileWriter(stream, max_bytes=100, keep=3)
        for n in range(3):
            writer.msg(f"{n}{LINE}")
    # the failed rotation moved the log aside: its lines 0 and 1 stay there, the retry starts
    # log.jsonl again without moving the rotated files once more
    assert [line[0] for line in _lines(tmp_path / "log.jsonl.1")] == ["0", "1"]
    assert _lines(tmp_path / "log.jsonl.2") == ["kept"]
    assert not (tmp_path / "log.jsonl.3").exists()
    assert _lines(path) == [f"2{LINE}"]
    assert writer.dropped == 0
