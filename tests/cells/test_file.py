"""The file cell on real files in tmp_path: operations, errors and the boundary."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cells.file import FILE, FileCell, _FileCall, _FileOpError, _perform
from colony.cell import ParamProblem
from colony.envelope import source_message
from colony.testing import ColonyHarness, spec_for
from colony.validate import validate
from tests.cells.fenced import SECRET, call, fenced_base, ok
from tests.conftest import CONTRACT, TreeFactory, hive


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """``tmp/base`` with a file, a folder and links; ``tmp/outside`` holds a secret."""
    return fenced_base(
        tmp_path, {"docs/a.txt": "alpha\n", "notes.txt": "hello, world"}, ("secret.txt",)
    )


async def ask(base: Path, args: Any) -> dict[str, Any]:
    cell = FileCell(spec_for("/files", {"base_path": str(base)}))
    [emission] = await cell.handle(source_message("/files", call(args), ttl=8))
    content: dict[str, Any] = emission.content
    return content


def error_of(content: dict[str, Any]) -> tuple[str, str, str]:
    header = content["header"]
    assert header["finish_reason"] == "error"
    [turn] = content["messages"]
    return header["operation"], header["error_code"], turn["text"]


def problems(params: Any) -> list[ParamProblem]:
    assert FILE.check_params is not None
    return FILE.check_params(params, None)


async def test_write_then_read_through_a_colony(base: Path, make_tree: TreeFactory) -> None:
    tree = {
        "main/config.json": hive({"from": ".", "to": "./fs"}, {"from": "./fs", "to": "/sink"}),
        "main/fs/config.json": {
            "cell": {"type": "file"},
            "params": {"base_path": str(base)},
            "contract": CONTRACT,
        },
    }
    async with ColonyHarness(make_tree(tree), capture=["/sink"], cell_types={"file": FILE}) as c:
        await c.send("/fs", call({"op": "write", "path": "docs/new.md", "content": "€ 5"}, "w"))
        await c.settle()
        await c.send("/fs", call({"op": "read", "path": "docs/new.md"}, "r"))
        await c.settle()
        written, read = c.captured("/sink")
    assert written.headers.hop["operation"] == "write"
    assert written.headers.hop["bytes"] == 5
    assert written.body["messages"][0] == {
        "origin": "tool",
        "type": "tool_result",
        "text": '{"written":5}',
        "id": "w",
    }
    assert read.headers.hop == {
        "operation": "read",
        "bytes": 5,
        "duration_ms": read.headers.hop["duration_ms"],
    }
    assert read.body["messages"][0]["text"] == "€ 5"
    assert (base / "docs" / "new.md").read_text() == "€ 5"


async def test_read_windows_are_byte_ranges_and_past_the_end_is_empty(base: Path) -> None:
    assert ok(await ask(base, {"op": "read", "path": "notes.txt", "offset": 7}))[1] == "world"
    header, text = ok(await ask(base, {"op": "read", "path": "notes.txt", "offset": 0, "limit": 5}))
    assert (header["bytes"], text) == (5, "hello")
    header, text = ok(await ask(base, {"op": "read", "path": "notes.txt", "offset": 99}))
    assert (header["bytes"], text) == (0, "")


async def test_base64_reads_any_bytes_and_say_their_encoding(base: Path) -> None:
    (base / "blob.bin").write_bytes(bytes(range(256)))
    header, text = ok(await ask(base, {"op": "read", "path": "blob.bin", "mode": "base64"}))
    assert header["encoding"] == "base64"
    assert header["bytes"] == 256
    assert base64.b64decode(text) == bytes(range(256))
    window = await ask(base, {"op": "read", "path": "blob.bin", "mode": "base64", "offset": 254})
    assert base64.b64decode(ok(window)[1]) == b"\xfe\xff"


async def test_a_text_read_of_bytes_that_are_not_utf8_is_io_error(base: Path) -> None:
    (base / "blob.bin").write_bytes(b"ok\xff")
    op, code, text = error_of(await ask(base, {"op": "read", "path": "blob.bin"}))
    assert (op, code) == ("read", "io_error")
    assert "not valid UTF-8" in text
    assert 'mode "base64"' in text


async def test_list_is_sorted_by_name_with_kinds_and_file_sizes(base: Path) -> None:
    header, text = ok(await ask(base, {"op": "list", "path": "."}))
    assert header["operation"] == "list"
    assert header["bytes"] == len(text.encode())
    assert json.loads(text) == [
        {"kind": "dir", "name": "docs"},
        {"kind": "file", "name": "notes.txt", "size": 12},
        {"kind": "symlink", "name": "to-docs"},
        {"kind": "symlink", "name": "to-nowhere"},
        {"kind": "symlink", "name": "to-outside"},
        {"kind": "symlink", "name": "to-secret"},
    ]
    assert text.startswith('[{"kind":"dir","name":"docs"},')  # sorted keys, compact


async def test_stat_reports_kind_size_and_modification_time(base: Path) -> None:
    os.utime(base / "notes.txt", (1_700_000_000, 1_700_000_000))
    header, text = ok(await ask(base, {"op": "stat", "path": "notes.txt"}))
    assert header["operation"] == "stat"
    assert json.loads(text) == {"kind": "file", "size": 12, "modified": 1_700_000_000}
    folder = json.loads(ok(await ask(base, {"op": "stat", "path": "docs"}))[1])
    assert (folder["kind"], folder["size"]) == ("dir", None)


async def test_a_link_that_stays_inside_the_base_is_followed(base: Path) -> None:
    assert ok(await ask(base, {"op": "read", "path": "to-docs/a.txt"}))[1] == "alpha\n"
    ok(await ask(base, {"op": "write", "path": "to-docs/b.txt", "content": "b"}))
    assert (base / "docs" / "b.txt").read_text() == "b"


async def test_write_overwrites_but_never_creates_folders(base: Path) -> None:
    ok(await ask(base, {"op": "write", "path": "notes.txt", "content": "new"}))
    assert (base / "notes.txt").read_text() == "new"
    op, code, text = error_of(await ask(base, {"op": "write", "path": "a/b/c.txt", "content": ""}))
    assert (op, code) == ("write", "not_found")
    assert text == "parent directory does not exist: a/b (write does not create directories)"
    assert not (base / "a").exists()
    result = await ask(base, {"op": "write", "path": "notes.txt/x", "content": ""})
    assert error_of(result)[1] == "not_a_directory"
    assert error_of(await ask(base, {"op": "write", "path": "docs", "content": ""}))[1] == (
        "not_a_file"
    )


@pytest.mark.parametrize(
    ("args", "code"),
    [
        ({"op": "read", "path": "missing.txt"}, "not_found"),
        ({"op": "read", "path": "docs"}, "not_a_file"),
        ({"op": "list", "path": "notes.txt"}, "not_a_directory"),
        ({"op": "list", "path": "nothing-here"}, "not_found"),
        ({"op": "stat", "path": "nothing-here"}, "not_found"),
    ],
)
async def test_what_is_missing_or_of_the_wrong_kind_says_so(
    base: Path, args: dict[str, Any], code: str
) -> None:
    op, found, _ = error_of(await ask(base, args))
    assert (op, found) == (args["op"], code)


@pytest.mark.parametrize(
    ("args", "text"),
    [
        ({"path": "x"}, "args.op missing or not a string"),
        ({"op": "delete", "path": "x"}, "unknown op: delete (use one of read, write, list, stat)"),
        ({"op": "read"}, "args.path missing or not a string"),
        ({"op": "read", "path": ""}, "args.path is empty"),
        ({"op": "write", "path": "x"}, "args.content missing or not a string (required for write)"),
        (
            {"op": "write", "path": "x", "content": "", "mode": "text"},
            "args.mode is allowed only with op read",
        ),
        ({"op": "list", "path": ".", "offset": 0}, "args.offset is allowed only with op read"),
        ({"op": "stat", "path": ".", "limit": 1}, "args.limit is allowed only with op read"),
        (
            {"op": "write", "path": "new/", "content": ""},
            "args.path of a write must name a file, not end in /",
        ),
        ({"op": "read", "path": "x", "mode": "hex"}, 'args.mode must be "text" or "base64"'),
        ({"op": "read", "path": "x", "offset": -1}, "args.offset must be an integer >= 0"),
        ({"op": "read", "path": "x", "offset": True}, "args.offset must be an integer >= 0"),
        ({"op": "read", "path": "x", "limit": 0}, "args.limit must be an integer >= 1"),
    ],
)
async def test_bad_arguments_are_invalid_input_with_operation_unknown(
    base: Path, args: dict[str, Any], text: str
) -> None:
    assert error_of(await ask(base, args)) == ("unknown", "invalid_input", text)


async def test_an_absolute_path_is_invalid_input(base: Path) -> None:
    result = error_of(await ask(base, {"op": "read", "path": str(base / "notes.txt")}))
    assert result == ("read", "invalid_input", "path must be relative, not absolute")


ESCAPES = [
    ("../outside/secret.txt", "../outside/missing.txt"),
    ("docs/../../outside/secret.txt", "docs/../../outside/missing.txt"),
    ("to-secret", "to-nowhere"),
    ("to-outside/secret.txt", "to-outside/missing.txt"),
    ("to-outside/../outside/secret.txt", "to-outside/../outside/missing.txt"),
]


@pytest.mark.parametrize(("existing", "missing"), ESCAPES)
@pytest.mark.parametrize("op", ["read", "stat", "write"])
async def test_every_escape_is_refused_alike_whether_or_not_the_target_exists(
    base: Path, existing: str, missing: str, op: str
) -> None:
    def args(path: str) -> dict[str, Any]:
        return {"op": op, "path": path, **({"content": "pwned"} if op == "write" else {})}

    first = error_of(await ask(base, args(existing)))
    second = error_of(await ask(base, args(missing)))
    assert (
        first == second == (op, "path_outside_boundary", "path resolves outside base_path boundary")
    )
    outside = base.parent / "outside"
    assert (outside / "secret.txt").read_text() == SECRET
    assert not (outside / "missing.txt").exists()


async def test_listing_a_linked_folder_outside_is_refused(base: Path) -> None:
    assert error_of(await ask(base, {"op": "list", "path": "to-outside"}))[1] == (
        "path_outside_boundary"
    )
    assert error_of(await ask(base, {"op": "list", "path": ".."}))[1] == "path_outside_boundary"


def test_base_path_is_required_absolute_and_an_existing_directory(tmp_path: Path) -> None:
    assert problems({"base_path": str(tmp_path)}) == []
    [missing_key] = problems({})
    assert (missing_key.path, missing_key.code) == (("base_path",), "missing_key")
    [relative] = problems({"base_path": "data"})
    assert relative.code == "base_path_relative"
    [absent] = problems({"base_path": str(tmp_path / "absent")})
    assert absent.code == "base_path_missing"
    assert absent.message.endswith("does not exist")
    (tmp_path / "f").write_text("")
    [not_dir] = problems({"base_path": str(tmp_path / "f")})
    assert not_dir.message.endswith("is not a directory")
    [zero] = problems({"base_path": str(tmp_path), "max_concurrency": 0})
    assert (zero.path, zero.code) == (("max_concurrency",), "out_of_range")


def test_validate_reports_a_base_path_that_does_not_exist(
    tmp_path: Path, make_tree: TreeFactory
) -> None:
    root = make_tree(
        {
            "main/config.json": hive(),
            "main/fs/config.json": {
                "cell": {"type": "file"},
                "params": {"base_path": str(tmp_path / "nope")},
                "contract": CONTRACT,
            },
        }
    )
    assert FILE.check_params is not None
    found = validate(root, cell_types={"file"}, param_checks={"file": FILE.check_params})
    assert [(d.code, d.file, d.pointer) for d in found] == [
        ("base_path_missing", "main/fs/config.json", "params.base_path")
    ]


SEGMENTS = [
    "..",
    ".",
    "",
    "docs",
    "a.txt",
    "to-secret",
    "to-outside",
    "to-docs",
    "secret.txt",
    "outside",
]


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    parts=st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=6),
    op=st.sampled_from(["read", "list", "stat", "write"]),
)
def test_no_path_ever_reaches_outside_the_base(base: Path, parts: list[str], op: str) -> None:
    relative = "/".join(parts)
    outside = base.parent / "outside"
    (outside / "only-outside").touch()  # a name no write can create inside the base
    try:
        text, _ = _perform(os.path.realpath(base), _FileCall(op, relative, content="pwned"))
    except _FileOpError:
        text = ""
    assert SECRET not in text
    assert "only-outside" not in text
    assert sorted(os.listdir(outside)) == ["only-outside", "secret.txt"]
    assert (outside / "secret.txt").read_text() == SECRET
