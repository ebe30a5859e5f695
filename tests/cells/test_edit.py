"""The edit cell on real files in tmp_path: the two ops, their errors, the fence, the atomic
write and the per-file lock."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import importlib
import json
import os
import shutil
import stat
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cells.edit as edit_module
from cells.boundary import OpError
from cells.edit import EDIT, EditCell, _EditCall, find_replace, insert_at_line, lines_of
from colony.cell import ParamProblem
from colony.config.loader import load_tree
from colony.envelope import source_message
from colony.observability import list_logger
from colony.testing import ColonyHarness, spec_for
from colony.validate import validate
from tests.cells.fenced import SECRET, call, fenced_base, ok
from tests.conftest import CONTRACT, TreeFactory, hive


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """``tmp/base`` with text files, a folder and links; ``tmp/outside`` holds a secret."""
    return fenced_base(
        tmp_path,
        {"docs/a.txt": "alpha\nbeta\n", "notes.md": "one two one three one\n"},
        ("secret.txt", "a.txt"),
    )


def untouched_outside(base: Path) -> None:
    outside = base.parent / "outside"
    assert sorted(os.listdir(outside)) == ["a.txt", "secret.txt"]
    assert (outside / "secret.txt").read_text() == SECRET
    assert (outside / "a.txt").read_text() == SECRET


def make_cell(base: Path) -> EditCell:
    return EditCell(spec_for("/edit", {"base_path": str(base)}))


async def ask(base: Path | EditCell, args: Any) -> dict[str, Any]:
    cell = base if isinstance(base, EditCell) else make_cell(base)
    [emission] = await cell.handle(source_message("/edit", call(args), ttl=8))
    content: dict[str, Any] = emission.content
    return content


def error_of(content: dict[str, Any]) -> tuple[str, str, str]:
    header = content["header"]
    assert header["finish_reason"] == "error"
    assert header["matches_changed"] == 0
    assert "bytes" not in header
    [turn] = content["messages"]
    assert turn["id"] == "call-1"
    return header["operation"], header["error_code"], turn["text"]


def replace_args(path: str, find: str, replace: str, **more: Any) -> dict[str, Any]:
    return {"op": "find_replace", "path": path, "find": find, "replace": replace, **more}


def insert_args(path: str, line: int, content: str) -> dict[str, Any]:
    return {"op": "insert_at_line", "path": path, "line": line, "content": content}


def leftovers(folder: Path) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.startswith(".edit-"))


NOBODY = 65534
SHARED_GROUP = 4242
as_root_only = pytest.mark.skipif(os.geteuid() != 0, reason="dropping privileges needs root")


@pytest.fixture
def open_base() -> Iterator[Path]:
    """A base folder an unprivileged uid can reach (``tmp_path`` lies under a 0700 folder of
    root's), owned by :data:`NOBODY` so a cell running as that uid may write in it."""
    top = Path(tempfile.mkdtemp(prefix="edit-unprivileged-"))
    try:
        top.chmod(0o755)
        root = top / "base"
        root.mkdir()
        os.chown(root, NOBODY, NOBODY)
        yield root
    finally:
        shutil.rmtree(top)


def ask_as(uid: int, gid: int, groups: list[int], base: Path, args: Any) -> dict[str, Any]:
    """The cell's answer to ``args``, asked in a forked child that first drops to ``uid``,
    ``gid`` and the supplementary ``groups``: the cell as a non-root service runs it."""
    importlib.import_module("concurrent.futures.thread")  # lazy; the uid may not read it later
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 1
        try:
            os.close(reader)
            os.setgroups(groups)
            os.setgid(gid)
            os.setuid(uid)
            answer = json.dumps(asyncio.run(ask(base, args))).encode()
            status = 0
        except BaseException:
            answer = traceback.format_exc().encode()
        finally:
            while answer:
                answer = answer[os.write(writer, answer) :]
            os._exit(status)
    os.close(writer)
    with os.fdopen(reader, "rb") as answer_pipe:
        answer = answer_pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, answer.decode()
    content: dict[str, Any] = json.loads(answer)
    return content


# -- find_replace -----------------------------------------------------------------------------


async def test_find_replace_replaces_every_occurrence_and_reports_count_and_size(
    base: Path,
) -> None:
    header, text = ok(await ask(base, replace_args("notes.md", "one", "1")))
    assert (base / "notes.md").read_text() == "1 two 1 three 1\n"
    assert header == {
        "operation": "find_replace",
        "matches_changed": 3,
        "bytes": len("1 two 1 three 1\n"),
        "duration_ms": header["duration_ms"],
    }
    assert text == "3 occurrences replaced in notes.md"


async def test_find_replace_matches_do_not_overlap_and_run_left_to_right(base: Path) -> None:
    (base / "a.txt").write_text("aaaa")
    header, _ = ok(await ask(base, replace_args("a.txt", "aa", "b")))
    assert (base / "a.txt").read_text() == "bb"
    assert header["matches_changed"] == 2
    (base / "a.txt").write_text("aaa")
    ok(await ask(base, replace_args("a.txt", "aa", "x")))
    assert (base / "a.txt").read_text() == "xa"


async def test_bytes_is_the_utf8_size_of_the_file_after_the_edit(base: Path) -> None:
    header, text = ok(await ask(base, replace_args("notes.md", "two", "€")))
    assert header["bytes"] == (base / "notes.md").stat().st_size == 22
    assert text == "1 occurrence replaced in notes.md"


async def test_no_match_is_pattern_not_found_even_with_a_count_guard(base: Path) -> None:
    for guard in ({}, {"expected_matches": 2}):
        op, code, text = error_of(await ask(base, replace_args("notes.md", "four", "4", **guard)))
        assert (op, code, text) == (
            "find_replace",
            "pattern_not_found",
            '"four" not found in notes.md',
        )
    assert (base / "notes.md").read_text() == "one two one three one\n"


async def test_a_count_guard_that_differs_leaves_the_file_and_names_both_numbers(
    base: Path,
) -> None:
    before = (base / "notes.md").stat()
    result = await ask(base, replace_args("notes.md", "one", "1", expected_matches=2))
    op, code, text = error_of(result)
    assert (op, code) == ("find_replace", "unexpected_match_count")
    assert text == 'expected 2 matches of "one" in notes.md, found 3; the file is unchanged'
    after = (base / "notes.md").stat()
    assert (base / "notes.md").read_text() == "one two one three one\n"
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


async def test_a_count_guard_that_matches_edits_and_null_means_no_guard(base: Path) -> None:
    ok(await ask(base, replace_args("notes.md", "one", "1", expected_matches=3)))
    assert (base / "notes.md").read_text() == "1 two 1 three 1\n"
    ok(await ask(base, replace_args("notes.md", "1", "one", expected_matches=None)))
    assert (base / "notes.md").read_text() == "one two one three one\n"


async def test_a_long_pattern_is_cut_short_in_the_error_sentence(base: Path) -> None:
    find = "z" * 500
    _, code, text = error_of(await ask(base, replace_args("notes.md", find, "")))
    assert code == "pattern_not_found"
    assert len(text) < 100
    assert text.endswith('..." not found in notes.md')


# -- insert_at_line ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "line", "content", "after"),
    [
        ("a\nb\n", 1, "X\n", "X\na\nb\n"),
        ("a\nb\n", 2, "X", "a\nX\nb\n"),  # closed by one \n, never fused with "b"
        ("a\nb\n", 3, "X", "a\nb\nX\n"),  # lines + 1 appends
        ("a\nb\n", 2, "X\nY", "a\nX\nY\nb\n"),
        ("a\nb\n", 2, "X\n\n", "a\nX\n\nb\n"),  # a \n of its own: nothing added
        ("a\nb\n", 2, "", "a\nb\n"),  # empty content starts no line
        ("a\nb\n", 2, "\n", "a\n\nb\n"),  # a blank line is asked for with "\n"
        ("", 1, "X", "X\n"),
        ("a\nb", 2, "X", "a\nX\nb"),  # the missing final newline is left alone ...
        ("a\nb", 3, "X", "a\nbX\n"),  # ... so appending continues the last line (meclaw)
        ("a\rb\n", 2, "X", "a\rb\nX\n"),  # only \n ends a line
        ("a\r\nb\r\n", 2, "X", "a\r\nX\r\nb\r\n"),  # a CRLF file's content closes with CRLF
        ("a\r\nb\r\n", 3, "X\nY", "a\r\nb\r\nX\nY\r\n"),  # only the closing end added
        ("a\r\nb\r\n", 1, "X\n", "X\na\r\nb\r\n"),  # content with its own end: as given
        ("a\nb\r\n", 2, "X", "a\nX\nb\r\n"),  # the first line says what the file is
        ("\ufeffa\nb\n", 1, "X", "\ufeffX\na\nb\n"),  # a BOM stays first
        ("\ufeffa\r\n", 1, "X", "\ufeffX\r\na\r\n"),
        ("\ufeffa\nb\n", 3, "X", "\ufeffa\nb\nX\n"),
        ("\ufeff", 1, "X", "\ufeffX\n"),
        ("a\x0cb\n", 2, "X", "a\x0cb\nX\n"),
    ],
)
async def test_insert_at_line_goes_before_the_line_and_closes_its_content(
    base: Path, before: str, line: int, content: str, after: str
) -> None:
    (base / "f.txt").write_bytes(before.encode())
    header, text = ok(await ask(base, insert_args("f.txt", line, content)))
    assert (base / "f.txt").read_bytes() == after.encode()
    assert header["operation"] == "insert_at_line"
    assert header["matches_changed"] == 1
    assert header["bytes"] == len(after.encode())
    assert text.endswith(f" inserted at line {line} of f.txt")


async def test_the_insert_status_counts_the_lines_added(base: Path) -> None:
    assert ok(await ask(base, insert_args("notes.md", 1, "x\ny")))[1] == (
        "2 lines inserted at line 1 of notes.md"
    )
    assert ok(await ask(base, insert_args("notes.md", 1, "")))[1] == (
        "0 lines inserted at line 1 of notes.md"
    )


@pytest.mark.parametrize(("text", "line"), [("a\nb\n", 4), ("a\nb", 4), ("", 2)])
async def test_a_line_past_lines_plus_one_is_invalid_input_naming_the_range(
    base: Path, text: str, line: int
) -> None:
    (base / "f.txt").write_text(text)
    op, code, sentence = error_of(await ask(base, insert_args("f.txt", line, "X")))
    assert (op, code) == ("insert_at_line", "invalid_input")
    lines = line - 2
    assert sentence == (
        f"args.line {line} is out of range: f.txt has {lines} line{'' if lines == 1 else 's'}, "
        f"so line must be 1..{lines + 1}"
    )
    assert (base / "f.txt").read_text() == text


# -- bad arguments ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "text"),
    [
        ({"path": "x"}, "args.op missing or not a string"),
        ({"op": 3, "path": "x"}, "args.op missing or not a string"),
        (
            {"op": "patch", "path": "x"},
            "unknown op: patch (use one of find_replace, insert_at_line)",
        ),
        ({"op": "find_replace", "find": "a", "replace": "b"}, "args.path missing or not a string"),
        (replace_args("", "a", "b"), "args.path is empty"),
        (replace_args("a\x00b", "a", "b"), "args.path contains a NUL byte"),
        (replace_args("docs/", "a", "b"), "args.path of an edit must name a file, not end in /"),
        (
            {"op": "find_replace", "path": "x", "replace": "b"},
            "args.find missing or not a string (required for find_replace)",
        ),
        (replace_args("x", "", "b"), "args.find is empty"),
        (
            {"op": "find_replace", "path": "x", "find": "a"},
            "args.replace missing or not a string (required for find_replace)",
        ),
        (
            {"op": "find_replace", "path": "x", "find": "a", "replace": 1},
            "args.replace missing or not a string (required for find_replace)",
        ),
        (
            replace_args("x", "a", "b", expected_matches=0),
            "args.expected_matches must be an integer >= 1 or null",
        ),
        (
            replace_args("x", "a", "b", expected_matches=-1),
            "args.expected_matches must be an integer >= 1 or null",
        ),
        (
            replace_args("x", "a", "b", expected_matches=1.5),
            "args.expected_matches must be an integer >= 1 or null",
        ),
        (
            replace_args("x", "a", "b", expected_matches=True),
            "args.expected_matches must be an integer >= 1 or null",
        ),
        (
            replace_args("x", "a", "b", expected_matches="2"),
            "args.expected_matches must be an integer >= 1 or null",
        ),
        (
            {**insert_args("x", 1, "c"), "expected_matches": 1},
            "args.expected_matches is allowed only with op find_replace",
        ),
        (insert_args("x", 0, "c"), "args.line missing or not an integer >= 1"),
        (insert_args("x", True, "c"), "args.line missing or not an integer >= 1"),
        (
            {"op": "insert_at_line", "path": "x", "content": "c"},
            "args.line missing or not an integer >= 1",
        ),
        (
            {"op": "insert_at_line", "path": "x", "line": 1},
            "args.content missing or not a string (required for insert_at_line)",
        ),
    ],
)
async def test_bad_edit_arguments_are_invalid_input_naming_the_argument(
    base: Path, args: dict[str, Any], text: str
) -> None:
    assert error_of(await ask(base, args)) == ("unknown", "invalid_input", text)


async def test_a_null_count_guard_on_an_insert_is_no_guard(base: Path) -> None:
    ok(await ask(base, {**insert_args("notes.md", 1, "top"), "expected_matches": None}))
    assert (base / "notes.md").read_text().startswith("top\n")


async def test_a_body_without_a_tool_call_is_answered_not_raised(base: Path) -> None:
    [emission] = await make_cell(base).handle(source_message("/edit", {"messages": []}, ttl=8))
    header = emission.content["header"]
    assert (header["operation"], header["error_code"]) == ("unknown", "invalid_input")
    assert emission.content["messages"][0]["text"] == "no tool_call turn in messages[]"


# -- what is missing or of the wrong kind -----------------------------------------------------


@pytest.mark.parametrize(
    ("path", "code", "text"),
    [
        ("missing.md", "not_found", "path not found: missing.md"),
        ("nowhere/x.md", "not_found", "path not found: nowhere/x.md"),
        ("docs", "not_a_file", "docs is a directory"),
        (".", "not_a_file", ". is a directory"),
        ("notes.md/x", "not_a_directory", "a parent of notes.md/x is not a directory"),
    ],
)
async def test_an_edit_of_what_is_missing_or_no_file_says_so(
    base: Path, path: str, code: str, text: str
) -> None:
    for args in (replace_args(path, "a", "b"), insert_args(path, 1, "x")):
        assert error_of(await ask(base, args)) == (args["op"], code, text)


async def test_a_fifo_is_not_a_file_and_the_edit_does_not_wait_for_a_writer(base: Path) -> None:
    os.mkfifo(base / "pipe")
    result = await asyncio.wait_for(ask(base, replace_args("pipe", "a", "b")), 5)
    assert error_of(result) == ("find_replace", "not_a_file", "pipe is not a regular file")


async def test_a_file_that_is_not_utf8_is_io_error_naming_it(base: Path) -> None:
    (base / "blob.bin").write_bytes(b"ok\n\xff\xfe")
    op, code, text = error_of(await ask(base, replace_args("blob.bin", "ok", "no")))
    assert (op, code) == ("find_replace", "io_error")
    assert text == "blob.bin is not valid UTF-8 (byte 3); edit works on text files"
    assert (base / "blob.bin").read_bytes() == b"ok\n\xff\xfe"


def spy_on_opens(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every ``os.open`` from now on, as (path, flags)."""
    opened: list[tuple[str, int]] = []
    real_open = os.open

    def spy(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        opened.append((os.fspath(path), flags))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    return opened


async def test_the_file_is_opened_read_only_and_only_once_it_is_known_to_be_regular(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    os.mkfifo(base / "pipe")
    odd = ["pipe"]
    with contextlib.suppress(PermissionError):  # a container may forbid device nodes
        os.mknod(base / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        odd.append("null")
    cell = make_cell(base)
    opened = spy_on_opens(monkeypatch)
    for name in odd:
        result = error_of(await ask(cell, replace_args(name, "a", "b")))
        assert result == ("find_replace", "not_a_file", f"{name} is not a regular file")
    ok(await ask(cell, replace_args("notes.md", "one", "1")))
    [(_, flags)] = [(path, flags) for path, flags in opened if path in [*odd, "notes.md"]]
    assert flags & os.O_ACCMODE == os.O_RDONLY  # no close-after-write for watchers to see
    assert flags & os.O_NOFOLLOW
    assert (base / "notes.md").read_text() == "1 two 1 three 1\n"


@as_root_only
def test_a_file_a_non_root_cell_may_not_write_is_refused_not_replaced(open_base: Path) -> None:
    locked = open_base / "locked.md"
    locked.write_text("one\n")
    locked.chmod(0o644)  # root's: readable by the cell, not writable; its folder is the cell's
    before = locked.stat()
    answer = ask_as(NOBODY, NOBODY, [], open_base, replace_args("locked.md", "one", "1"))
    assert error_of(answer) == (
        "find_replace",
        "io_error",
        "permission denied: locked.md (an edit must read and write it)",
    )
    assert locked.read_text() == "one\n"
    assert locked.stat().st_ino == before.st_ino
    assert leftovers(open_base) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes a read-only file anyway")
async def test_a_file_the_cell_may_not_write_is_refused_not_replaced(base: Path) -> None:
    (base / "notes.md").chmod(0o444)
    _op, code, text = error_of(await ask(base, replace_args("notes.md", "one", "1")))
    assert (code, text) == (
        "io_error",
        "permission denied: notes.md (an edit must read and write it)",
    )
    assert (base / "notes.md").read_text() == "one two one three one\n"


# -- the fence --------------------------------------------------------------------------------


async def test_an_absolute_edit_path_is_invalid_input(base: Path) -> None:
    result = error_of(await ask(base, replace_args(str(base / "notes.md"), "one", "1")))
    assert result == ("find_replace", "invalid_input", "path must be relative, not absolute")
    assert (base / "notes.md").read_text() == "one two one three one\n"


EDIT_ESCAPES = [
    ("../outside/secret.txt", "../outside/missing.txt"),
    ("docs/../../outside/secret.txt", "docs/../../outside/missing.txt"),
    ("to-secret", "to-nowhere"),
    ("to-outside/secret.txt", "to-outside/missing.txt"),
    ("to-outside/../outside/secret.txt", "to-outside/../outside/missing.txt"),
]


@pytest.mark.parametrize(("existing", "missing"), EDIT_ESCAPES)
@pytest.mark.parametrize("op", ["find_replace", "insert_at_line"])
async def test_every_edit_escape_is_refused_alike_whether_or_not_the_target_exists(
    base: Path, existing: str, missing: str, op: str
) -> None:
    def args(path: str) -> dict[str, Any]:
        if op == "find_replace":
            return replace_args(path, "secret", "pwned")
        return insert_args(path, 1, "pwned")

    first = error_of(await ask(base, args(existing)))
    second = error_of(await ask(base, args(missing)))
    assert (
        first == second == (op, "path_outside_boundary", "path resolves outside base_path boundary")
    )
    untouched_outside(base)


async def test_a_link_inside_the_base_edits_its_target_and_stays_a_link(base: Path) -> None:
    ok(await ask(base, replace_args("to-docs/a.txt", "beta", "gamma")))
    assert (base / "docs" / "a.txt").read_text() == "alpha\ngamma\n"
    (base / "link.txt").symlink_to("docs/a.txt")
    ok(await ask(base, insert_args("link.txt", 1, "zero")))
    assert (base / "link.txt").is_symlink()
    assert (base / "docs" / "a.txt").read_text() == "zero\nalpha\ngamma\n"
    assert leftovers(base) == leftovers(base / "docs") == []


def swap_after_the_check(monkeypatch: pytest.MonkeyPatch, swap: Callable[[], None]) -> None:
    checked = edit_module._checked

    def racing(base_path: str, edit: _EditCall) -> str:
        real = checked(base_path, edit)
        swap()  # what a concurrent bash call in the same colony could do at this instant
        return real

    monkeypatch.setattr(edit_module, "_checked", racing)


@pytest.mark.parametrize(
    "args", [replace_args("docs/a.txt", "secret", "pwned"), insert_args("docs/a.txt", 1, "x")]
)
async def test_a_middle_folder_swapped_for_a_link_out_after_the_check_is_not_followed(
    base: Path, monkeypatch: pytest.MonkeyPatch, args: dict[str, Any]
) -> None:
    def swap() -> None:
        os.rename(base / "docs", base / "docs-old")
        (base / "docs").symlink_to(base.parent / "outside")

    swap_after_the_check(monkeypatch, swap)
    _op, code, text = error_of(await ask(base, args))
    assert (code, text) in {
        ("io_error", "docs/a.txt: too many levels of symbolic links"),
        ("not_a_directory", "a parent of docs/a.txt is not a directory"),
    }
    untouched_outside(base)


async def test_the_file_swapped_for_a_link_out_after_the_check_is_not_followed(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def swap() -> None:
        (base / "notes.md").unlink()
        (base / "notes.md").symlink_to(base.parent / "outside" / "secret.txt")

    swap_after_the_check(monkeypatch, swap)
    _op, code, text = error_of(await ask(base, replace_args("notes.md", "secret", "pwned")))
    assert (code, text) == ("io_error", "notes.md: too many levels of symbolic links")
    untouched_outside(base)
    assert (base / "notes.md").is_symlink()


# -- the atomic write -------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o754, 0o4755])
async def test_an_edit_keeps_the_permission_bits_whatever_the_umask(base: Path, mode: int) -> None:
    (base / "notes.md").chmod(mode)
    old = os.umask(0o077)
    try:
        ok(await ask(base, replace_args("notes.md", "one", "1")))
    finally:
        os.umask(old)
    assert stat.S_IMODE((base / "notes.md").stat().st_mode) == mode


@as_root_only
def test_a_cell_that_may_not_keep_the_owner_still_keeps_a_group_it_belongs_to(
    open_base: Path,
) -> None:
    shared = open_base / "shared.txt"
    shared.write_text("one\n")
    os.chown(shared, 0, SHARED_GROUP)
    shared.chmod(0o664)
    header, _ = ok(
        ask_as(NOBODY, NOBODY, [SHARED_GROUP], open_base, replace_args("shared.txt", "one", "1"))
    )
    assert header["matches_changed"] == 1
    after = shared.stat()
    assert shared.read_text() == "1\n"
    assert (after.st_uid, after.st_gid) == (NOBODY, SHARED_GROUP)  # the owner is the cell's
    assert stat.S_IMODE(after.st_mode) == 0o664
    assert leftovers(open_base) == []


async def test_an_edit_replaces_the_file_by_rename_so_an_open_reader_keeps_the_old_text(
    base: Path,
) -> None:
    with (base / "notes.md").open() as reader:
        ok(await ask(base, replace_args("notes.md", "one", "1")))
        assert reader.read() == "one two one three one\n"
    assert (base / "notes.md").read_text() == "1 two 1 three 1\n"


async def test_a_reader_polling_during_many_edits_sees_only_whole_files(base: Path) -> None:
    size = 256 * 1024
    states = {"A" * size, "B" * size}
    (base / "big.txt").write_text("A" * size)
    seen: set[int] = set()
    torn: list[int] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            text = (base / "big.txt").read_text()
            if text not in states:
                torn.append(len(text))
            seen.add(len(text))

    reader = threading.Thread(target=poll)
    reader.start()
    cell = make_cell(base)
    try:
        for n in range(60):
            find, replace = ("A", "B") if n % 2 == 0 else ("B", "A")
            header, _ = ok(await ask(cell, replace_args("big.txt", find, replace)))
            assert header["matches_changed"] == size
    finally:
        stop.set()
        reader.join()
    assert torn == []
    assert seen == {size}
    assert leftovers(base) == []


@pytest.fixture
def failing(monkeypatch: pytest.MonkeyPatch) -> Callable[[str, int, int], None]:
    """Make the ``nth`` call (1-based) of ``os.<name>`` fail with ``error``."""

    def arm(name: str, nth: int, error: int) -> None:
        real = getattr(os, name)
        calls = 0

        def flaky(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == nth:
                raise OSError(error, os.strerror(error))
            return real(*args, **kwargs)

        monkeypatch.setattr(os, name, flaky)

    return arm


@pytest.mark.parametrize(
    ("name", "nth", "error", "reason"),
    [
        ("write", 1, errno.ENOSPC, "no space left on device"),
        ("fsync", 1, errno.EIO, "input/output error"),
        ("fchmod", 1, errno.EPERM, "operation not permitted"),
        ("rename", 1, errno.EROFS, "read-only file system"),
    ],
)
async def test_a_write_that_fails_midway_leaves_the_original_and_no_temp_file(
    base: Path,
    failing: Callable[[str, int, int], None],
    name: str,
    nth: int,
    error: int,
    reason: str,
) -> None:
    cell = make_cell(base)
    before = (base / "notes.md").stat()
    failing(name, nth, error)
    op, code, text = error_of(await ask(cell, replace_args("notes.md", "one", "1")))
    assert (op, code) == ("find_replace", "io_error")
    assert text == f"write failed: {reason} (notes.md); the file is unchanged"
    assert (base / "notes.md").read_text() == "one two one three one\n"
    assert (base / "notes.md").stat().st_ino == before.st_ino
    assert leftovers(base) == []


async def test_a_folder_that_refuses_the_temp_file_leaves_the_original(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = os.open

    def no_create(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_CREAT:
            raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))
        return real_open(path, flags, *args, **kwargs)

    cell = make_cell(base)
    monkeypatch.setattr(os, "open", no_create)
    _op, code, text = error_of(await ask(cell, insert_args("notes.md", 1, "x")))
    assert (code, text) == (
        "io_error",
        "write failed: disk quota exceeded (notes.md); the file is unchanged",
    )
    assert (base / "notes.md").read_text() == "one two one three one\n"
    assert leftovers(base) == []


async def test_a_failed_folder_sync_after_the_rename_is_a_result_marked_not_durable(
    base: Path, failing: Callable[[str, int, int], None]
) -> None:
    events: list[dict[str, Any]] = []
    cell = make_cell(base)
    cell.log = list_logger(events)
    failing("fsync", 2, errno.EIO)  # the first syncs the new file, the second its folder
    header, text = ok(await ask(cell, replace_args("notes.md", "one", "1")))
    assert header == {
        "operation": "find_replace",
        "matches_changed": 3,  # the edit happened: a retry must not make it again
        "bytes": len("1 two 1 three 1\n"),
        "durable": False,
        "duration_ms": header["duration_ms"],
    }
    assert text == (
        "3 occurrences replaced in notes.md; syncing the folder failed (input/output error), "
        "so the edit may not survive a crash"
    )
    assert (base / "notes.md").read_text() == "1 two 1 three 1\n"
    assert leftovers(base) == []
    [line] = [event for event in events if event["level"] != "debug"]
    assert line["level"] == "warning"
    assert {key: line[key] for key in ("event", "cell", "operation", "path", "reason")} == {
        "event": "edit_not_durable",
        "cell": "/edit",
        "operation": "find_replace",
        "path": "notes.md",
        "reason": "folder fsync failed: input/output error",
    }


async def test_a_durable_edit_carries_no_durable_key(base: Path) -> None:
    header, _ = ok(await ask(base, insert_args("notes.md", 1, "x")))
    assert "durable" not in header


# -- one file, many calls ---------------------------------------------------------------------


class Overlap:
    """How many reads of files ran at once, at most."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0
        self.lock = threading.Lock()


@pytest.fixture
def slow_reads(monkeypatch: pytest.MonkeyPatch) -> Overlap:
    """Widen the read-modify-write window: without the lock, overlapping edits lose one."""
    read = edit_module._read
    overlap = Overlap()

    def slow(folder: int, name: str, shown: str) -> tuple[str, os.stat_result]:
        with overlap.lock:
            overlap.now += 1
            overlap.most = max(overlap.most, overlap.now)
        try:
            found = read(folder, name, shown)
            time.sleep(0.05)
            return found
        finally:
            with overlap.lock:
                overlap.now -= 1

    monkeypatch.setattr(edit_module, "_read", slow)
    return overlap


async def test_concurrent_edits_of_one_file_all_land(base: Path, slow_reads: Overlap) -> None:
    (base / "docs" / "list.txt").write_text("".join(f"item{n}\n" for n in range(6)))
    cell = make_cell(base)
    spellings = ["docs/list.txt", "to-docs/list.txt", "docs/../docs/list.txt"]
    results = await asyncio.gather(
        *(ask(cell, replace_args(spellings[n % 3], f"item{n}\n", f"done{n}\n")) for n in range(6))
    )
    for result in results:
        assert ok(result)[0]["matches_changed"] == 1
    assert (base / "docs" / "list.txt").read_text() == "".join(f"done{n}\n" for n in range(6))
    assert slow_reads.most == 1
    assert len(cell.locks) == 0  # the table holds only files in flight


async def test_edits_of_different_files_do_not_wait_for_each_other(
    base: Path, slow_reads: Overlap
) -> None:
    for n in range(4):
        (base / f"f{n}.txt").write_text("x\n")
    cell = make_cell(base)
    await asyncio.gather(*(ask(cell, replace_args(f"f{n}.txt", "x", "y")) for n in range(4)))
    assert slow_reads.most > 1
    assert all((base / f"f{n}.txt").read_text() == "y\n" for n in range(4))


async def test_a_cancelled_edit_holds_its_file_until_its_thread_ends(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    entered: list[str] = []
    started = asyncio.Event()
    loop = asyncio.get_running_loop()
    edit = edit_module._edit

    def gated(base_path: str, real: str, job: _EditCall) -> edit_module._Done:
        entered.append(job.find)
        loop.call_soon_threadsafe(started.set)
        if job.find == "one":
            release.wait(5)
        return edit(base_path, real, job)

    monkeypatch.setattr(edit_module, "_edit", gated)
    cell = make_cell(base)
    first = asyncio.ensure_future(ask(cell, replace_args("notes.md", "one", "1")))
    await started.wait()
    first.cancel()
    second = asyncio.ensure_future(ask(cell, replace_args("notes.md", "two", "2")))
    await asyncio.sleep(0.05)
    assert entered == ["one"]  # the second waits: the first's thread still runs
    release.set()
    ok(await second)
    with pytest.raises(asyncio.CancelledError):
        await first
    assert (base / "notes.md").read_text() == "1 2 1 three 1\n"


async def test_an_edit_cancelled_twice_still_holds_its_file_until_its_thread_ends(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    finished = threading.Event()
    started = asyncio.Event()
    loop = asyncio.get_running_loop()
    edit = edit_module._edit

    def gated(base_path: str, real: str, job: _EditCall) -> edit_module._Done:
        loop.call_soon_threadsafe(started.set)
        release.wait(5)
        try:
            return edit(base_path, real, job)
        finally:
            finished.set()

    monkeypatch.setattr(edit_module, "_edit", gated)
    cell = make_cell(base)
    first = asyncio.ensure_future(ask(cell, replace_args("notes.md", "one", "1")))
    await started.wait()
    first.cancel()
    await asyncio.sleep(0.1)
    first.cancel()  # the backstop, or a shutdown, asking again
    await asyncio.sleep(0.1)
    assert not first.done()  # still waiting for the thread ...
    assert len(cell.locks) == 1  # ... and holding the file for it
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert finished.is_set()  # the cancellation came out only after the thread ended
    assert len(cell.locks) == 0
    assert (base / "notes.md").read_text() == "1 two 1 three 1\n"


# -- properties -------------------------------------------------------------------------------

TEXTS = st.text(alphabet="ab\n€x", max_size=40)


@settings(max_examples=300)
@given(text=TEXTS, find=st.text(alphabet="ab\n€", min_size=1, max_size=3), replace=TEXTS)
def test_find_replace_is_str_replace_and_counts_str_count(
    text: str, find: str, replace: str
) -> None:
    job = _EditCall("find_replace", "f", find=find, replace=replace)
    if text.count(find) == 0:
        with pytest.raises(OpError) as raised:
            find_replace(text, job)
        assert raised.value.code == "pattern_not_found"
        return
    new, count, _ = find_replace(text, job)
    assert (new, count) == (text.replace(find, replace), text.count(find))


@settings(max_examples=300)
@given(text=TEXTS, content=TEXTS, data=st.data())
def test_insert_at_line_splices_whole_lines_into_the_line_list(
    text: str, content: str, data: st.DataObject
) -> None:
    lines = lines_of(text)
    line = data.draw(st.integers(1, len(lines) + 1))
    new, count, _ = insert_at_line(
        text, _EditCall("insert_at_line", "f", line=line, content=content)
    )
    closed = content if not content or content.endswith("\n") else content + "\n"
    assert count == 1
    assert "".join(lines) == text
    assert new == "".join(lines[: line - 1]) + closed + "".join(lines[line - 1 :])
    if text.endswith("\n") or not text or line <= len(lines):
        assert lines_of(new) == lines[: line - 1] + lines_of(closed) + lines[line - 1 :]
    else:  # after a last line without \n: the content continues that line
        assert lines_of(new) == lines[:-1] + lines_of(lines[-1] + closed)
    with pytest.raises(OpError):
        insert_at_line(text, _EditCall("insert_at_line", "f", line=len(lines) + 2, content="x"))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.text(max_size=60), find=st.text(min_size=1, max_size=3), replace=st.text(max_size=5))
def test_find_replace_through_the_file_writes_what_str_replace_gives(
    base: Path, text: str, find: str, replace: str
) -> None:
    (base / "p.txt").write_text(text, encoding="utf-8", newline="")
    result = asyncio.run(ask(base, replace_args("p.txt", find, replace)))
    if find not in text:
        assert result["header"]["error_code"] == "pattern_not_found"
        assert (base / "p.txt").read_bytes() == text.encode("utf-8")
        return
    header, _ = ok(result)
    written = (base / "p.txt").read_bytes()
    assert written == text.replace(find, replace).encode("utf-8")
    assert header["matches_changed"] == text.count(find)
    assert header["bytes"] == len(written)


# -- params, validate and a colony ------------------------------------------------------------


def edit_problems(params: Any) -> list[ParamProblem]:
    assert EDIT.check_params is not None
    return EDIT.check_params(params, None)


def test_edit_base_path_must_be_absolute_and_an_existing_directory(tmp_path: Path) -> None:
    assert EDIT.name == "edit"
    assert EDIT.default_max_concurrency == 8
    assert edit_problems({"base_path": str(tmp_path), "max_concurrency": 1}) == []
    [missing_key] = edit_problems({})
    assert (missing_key.path, missing_key.code) == (("base_path",), "missing_key")
    [relative] = edit_problems({"base_path": "work"})
    assert relative.code == "base_path_relative"
    [absent] = edit_problems({"base_path": str(tmp_path / "absent")})
    assert (absent.code, absent.message) == (
        "base_path_missing",
        f"base_path {tmp_path / 'absent'} does not exist",
    )
    [zero] = edit_problems({"base_path": str(tmp_path), "max_concurrency": 0})
    assert (zero.path, zero.code) == (("max_concurrency",), "out_of_range")


@pytest.mark.parametrize(
    ("base_path", "code"), [("nope", "base_path_missing"), ("work/files", "base_path_relative")]
)
def test_validate_reports_a_bad_edit_base_path_cleanly(
    tmp_path: Path, make_tree: TreeFactory, base_path: str, code: str
) -> None:
    given_path = str(tmp_path / base_path) if code == "base_path_missing" else base_path
    root = make_tree(
        {
            "main/config.json": hive(),
            "main/ed/config.json": {
                "cell": {"type": "edit"},
                "params": {"base_path": given_path},
                "contract": CONTRACT,
            },
        }
    )
    assert EDIT.check_params is not None
    found = validate(root, cell_types={"edit"}, param_checks={"edit": EDIT.check_params})
    assert [(d.code, d.file, d.pointer) for d in found] == [
        (code, "main/ed/config.json", "params.base_path")
    ]


def meclaw_edit_cell(base: Path) -> dict[str, Any]:
    """An edit cell's config.json as meclaw's own trees write it."""
    return {
        "cell": {"type": "edit"},
        "params": {"base_path": str(base), "max_concurrency": 1},
        "contract": {"version": "0.1.0", "settings": {}, "consumes": {}},
    }


def test_a_meclaw_edit_cell_config_loads_without_findings(
    base: Path, make_tree: TreeFactory
) -> None:
    root = make_tree({"main/config.json": hive(), "main/ed/config.json": meclaw_edit_cell(base)})
    assert EDIT.check_params is not None
    result = load_tree(
        root, cell_types={"edit"}, environ={}, param_checks={"edit": EDIT.check_params}
    )
    assert result.ok
    assert result.diagnostics == []


async def test_a_colony_routes_a_tool_call_to_an_edit_cell(
    base: Path, make_tree: TreeFactory
) -> None:
    tree = {
        "main/config.json": hive({"from": ".", "to": "./ed"}, {"from": "./ed", "to": "/sink"}),
        "main/ed/config.json": meclaw_edit_cell(base),
    }
    async with ColonyHarness(make_tree(tree), capture=["/sink"], cell_types={"edit": EDIT}) as c:
        await c.send("/ed", call(replace_args("notes.md", "one", "1"), "r"))
        await c.settle()
        await c.send("/ed", call(insert_args("notes.md", 2, "two"), "i"))
        await c.settle()
        replaced, inserted = c.captured("/sink")
    assert replaced.headers.hop["operation"] == "find_replace"
    assert replaced.headers.hop["matches_changed"] == 3
    assert replaced.body["messages"][0] == {
        "origin": "tool",
        "type": "tool_result",
        "text": "3 occurrences replaced in notes.md",
        "id": "r",
    }
    assert inserted.headers.hop["bytes"] == len("1 two 1 three 1\ntwo\n")
    assert inserted.body["messages"][0]["id"] == "i"
    assert (base / "notes.md").read_text() == "1 two 1 three 1\ntwo\n"
