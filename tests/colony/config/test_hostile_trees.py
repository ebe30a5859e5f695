"""Trees a red team made: each is a diagnostic naming the file and the fix, never a crash, a
hang or an endless read; and what boot refuses, validate reports as an error (they share the
loader, so the harness boot is checked alongside)."""

from __future__ import annotations

import json
import os
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from cells import BUILTIN_CELL_TYPES, implemented_cell_types
from colony.cell import param_checks
from colony.config import reading
from colony.config.diagnostics import Diagnostic, Severity
from colony.config.loader import LoadResult, load_tree
from colony.errors import ConfigError
from colony.testing import ColonyHarness
from tests.conftest import CONTRACT, TreeFactory, cell, hive

CHECKS = param_checks(implemented_cell_types())


def load(root: Path, environ: dict[str, str] | None = None) -> LoadResult:
    return load_tree(
        root, cell_types=BUILTIN_CELL_TYPES, environ=environ or {}, param_checks=CHECKS
    )


def errors(result: LoadResult) -> list[tuple[str, str | None]]:
    return [(d.code, d.file) for d in result.diagnostics if d.severity is Severity.ERROR]


def the_error(result: LoadResult) -> Diagnostic:
    [d] = [d for d in result.diagnostics if d.severity is Severity.ERROR]
    assert d.hint, d
    assert result.tree is None
    return d


def with_child(make_tree: TreeFactory, child: Any = None) -> Path:
    files: dict[str, Any] = {"main/config.json": hive()}
    if child is not None:
        files["main/w/config.json"] = child
    return make_tree(files)


# -- what sits at a file's path -----------------------------------------------------------


def test_a_config_that_is_a_fifo_is_reported_not_waited_on(make_tree: TreeFactory) -> None:
    root = with_child(make_tree)
    (root / "main/w").mkdir()
    os.mkfifo(root / "main/w/config.json")
    d = the_error(load(root))
    assert (d.code, d.file) == ("not_a_file", "main/w/config.json")
    assert "FIFO" in d.message


@pytest.mark.parametrize("name", ["colony.json", "main/w/config.json", ".env"])
def test_a_file_that_is_dev_zero_is_reported_not_read_forever(
    make_tree: TreeFactory, name: str
) -> None:
    root = with_child(make_tree)
    (root / "main/w").mkdir()
    os.symlink("/dev/zero", root / name)
    d = the_error(load(root))
    assert d.file == name
    assert "device" in d.message


@pytest.mark.parametrize("name", ["colony.json", "main/w/config.json", ".env"])
def test_a_file_that_is_a_folder_is_an_error_in_validate_as_at_boot(
    make_tree: TreeFactory, name: str
) -> None:
    root = with_child(make_tree)
    (root / name).mkdir(parents=True)
    d = the_error(load(root))
    assert d.file == name
    assert "folder" in d.message


def test_a_config_larger_than_the_cap_is_refused_without_reading_it_all(
    make_tree: TreeFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reading, "MAX_CONFIG_BYTES", 1000)
    root = with_child(make_tree, cell("bash", {"x": "y" * 2000}))
    d = the_error(load(root))
    assert (d.code, d.file) == ("file_too_large", "main/w/config.json")


def test_a_folder_symlink_loop_is_a_warning_and_the_tree_still_loads(
    make_tree: TreeFactory,
) -> None:
    root = with_child(make_tree, cell("bash"))
    os.symlink("b", root / "main/a")
    os.symlink("a", root / "main/b")
    result = load(root)
    assert result.ok
    assert {(d.code, d.file) for d in result.diagnostics} == {
        ("unreadable_folder", "main/a"),
        ("unreadable_folder", "main/b"),
    }


def test_a_config_json_that_is_a_symlink_loop_is_an_error(make_tree: TreeFactory) -> None:
    root = with_child(make_tree)
    (root / "main/w").mkdir()
    os.symlink("config.json", root / "main/w/config.json")
    d = the_error(load(root))
    assert (d.code, d.file) == ("unreadable_file", "main/w/config.json")
    assert "loop" in d.message


def test_folders_nested_deeper_than_pythons_recursion_limit_load(tmp_path: Path) -> None:
    root = tmp_path / "deep"
    (root / "main").mkdir(parents=True)
    (root / "main/config.json").write_text('{"cell": {"type": "hive"}}')
    levels = [root / "main"]
    try:
        for _ in range(1100):  # os.makedirs recurses once per level: make them one by one
            levels.append(levels[-1] / "d")
            os.mkdir(levels[-1])
        (levels[-1] / "config.json").write_text('{"cell": {"type": "hive"}}')
        result = load(root)
        assert result.tree is not None
        assert len(result.tree.hives) == 2
    finally:
        # shutil.rmtree (and so pytest's clean-up of old temporary folders) also recurses
        # once per level: leave nothing this deep behind.
        (levels[-1] / "config.json").unlink(missing_ok=True)
        for folder in reversed(levels[1:]):
            if folder.exists():
                folder.rmdir()


# -- what a file holds ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"cell": {"type": "bash", "mailbox_size": ' + "9" * 5000 + "}}", "digits"),
        ("[" * 100_000, "nested"),
        ("[" * 129 + "]" * 129, "nested"),
        ('{"cell": {"type": "bash"}, "params": {"x": NaN}}', "NaN"),
        ('{"cell": {"type": "bash"}, "params": {"x": 1e400}}', "too large"),
    ],
)
@pytest.mark.parametrize("name", ["colony.json", "main/w/config.json"])
def test_json_no_value_can_hold_is_a_diagnostic_naming_the_file(
    make_tree: TreeFactory, text: str, said: str, name: str
) -> None:
    root = with_child(make_tree, cell("bash"))
    (root / name).write_text(text)
    d = the_error(load(root))
    assert (d.code, d.file) == ("invalid_json", name)
    assert said in d.message


def test_json_nested_as_deep_as_meclaw_allows_still_loads(make_tree: TreeFactory) -> None:
    deep: Any = "leaf"
    for _ in range(120):
        deep = {"k": deep}
    root = with_child(make_tree, cell("code", {"script_inline": "print('[]')", "knob": deep}))
    assert load(root).ok


@pytest.mark.parametrize(
    ("where", "pointer"),
    [
        ({"condition": 'hop.a == "\\ud800"'}, "params.graph.edges[0].condition"),
        ({"modifier": {"set_hop": {"k": '"\\udfff"'}}}, "params.graph.edges[0].modifier.set_hop.k"),
    ],
)
def test_a_lone_surrogate_in_a_cel_string_is_a_diagnostic_not_an_internal_error(
    make_tree: TreeFactory, where: dict[str, Any], pointer: str
) -> None:
    edge = {"from": ".", "to": "./w", **where}
    text = json.dumps(hive(edge)).replace("\\\\u", "\\u")  # the escape, not a backslash
    root = make_tree({"main/config.json": text, "main/w/config.json": cell("bash")})
    d = the_error(load(root))
    assert (d.code, d.file, d.pointer) == ("invalid_unicode", "main/config.json", pointer)
    assert d.line == 1


def test_a_variable_whose_value_is_not_utf8_is_an_error_that_shows_no_value(
    make_tree: TreeFactory,
) -> None:
    root = with_child(make_tree, cell("bash", {"external_timeout_ms": 5, "tag": "${TAG}"}))
    result = load(root, environ={"TAG": "s3cr3t\udcff"})
    d = the_error(result)
    assert (d.code, d.pointer) == ("invalid_unicode", "params.tag")
    assert "s3cr3t" not in repr(result.diagnostics)


@pytest.mark.parametrize("name", ["colony.json", "main/config.json", "main/w/config.json"])
def test_a_config_holding_null_is_an_error_not_a_silently_missing_node(
    make_tree: TreeFactory, name: str
) -> None:
    root = with_child(make_tree, cell("bash"))
    (root / name).write_text("null")
    d = the_error(load(root))
    assert (d.code, d.file) == ("wrong_type", name)
    assert "got null" in d.message


def test_an_env_file_that_is_not_utf8_names_the_line(make_tree: TreeFactory) -> None:
    root = make_tree({"main/config.json": hive()})
    (root / ".env").write_bytes(b"A=1\nB=\xff\n")
    d = the_error(load(root))
    assert (d.code, d.file, d.line) == ("env_file_invalid", ".env", 2)


# -- names ----------------------------------------------------------------------------------


NFC = unicodedata.normalize("NFC", "café")
NFD = unicodedata.normalize("NFD", "café")


def test_an_edge_written_in_nfc_reaches_a_folder_named_in_nfd(make_tree: TreeFactory) -> None:
    root = make_tree(
        {
            "main/config.json": hive({"from": ".", "to": f"./{NFC}"}),
            f"main/{NFD}/config.json": cell("bash"),
        }
    )
    result = load(root)
    assert result.diagnostics == []
    assert result.tree is not None
    assert set(result.tree.cells) == {f"/{NFC}"}
    assert [e.to_path for e in result.tree.edges] == [f"/{NFC}"]
    result = load(
        make_tree(
            {
                "main/config.json": hive({"from": ".", "to": f"./{NFD}"}),
                f"main/{NFC}/config.json": cell("bash"),
            }
        )
    )
    assert result.diagnostics == []


def test_two_folders_whose_names_differ_only_in_normalization_are_an_error(
    make_tree: TreeFactory,
) -> None:
    root = make_tree(
        {
            "main/config.json": hive(),
            f"main/{NFD}/config.json": cell("bash"),
            f"main/{NFC}/config.json": cell("bash"),
        }
    )
    d = the_error(load(root))
    assert d.code == "path_collision"
    assert f"/{NFC}" in d.message


@pytest.mark.parametrize("folder", ["main/colony", "main/colony/plain/x"])
def test_a_node_at_the_colony_endpoints_path_is_an_error(
    make_tree: TreeFactory, folder: str
) -> None:
    root = make_tree({"main/config.json": hive(), f"{folder}/config.json": cell("bash")})
    d = the_error(load(root))
    assert (d.code, d.file) == ("reserved_path", f"{folder}/config.json")


def test_a_folder_named_colony_below_another_node_is_fine(make_tree: TreeFactory) -> None:
    root = make_tree({"main/config.json": hive(), "main/a/colony/config.json": cell("bash")})
    assert load(root).ok


def test_a_folder_name_that_is_not_utf8_is_an_error(make_tree: TreeFactory) -> None:
    root = with_child(make_tree)
    bad = os.path.join(os.fsencode(root / "main"), b"caf\xe9")
    os.makedirs(bad)
    with open(os.path.join(bad, b"config.json"), "w") as stream:
        stream.write('{"cell": {"type": "hive"}}')
    d = the_error(load(root))
    assert d.code == "invalid_folder_name"
    assert d.file is not None
    d.file.encode("utf-8")  # printable: the bad byte is shown as an escape


# -- code cells -----------------------------------------------------------------------------


def test_a_forking_code_cell_whose_interpreter_does_not_exist_is_an_error(
    make_tree: TreeFactory,
) -> None:
    params = {"script_inline": "print('[]')", "interpreter": "/nonexistent/python3"}
    d = the_error(load(with_child(make_tree, cell("code", params))))
    assert (d.code, d.pointer) == ("interpreter_missing", "params.interpreter")


def test_a_spawning_code_cell_whose_interpreter_does_not_exist_is_a_warning(
    make_tree: TreeFactory,
) -> None:
    params = {"script_inline": "x", "interpreter": "/nonexistent/python3", "isolation": "spawn"}
    result = load(with_child(make_tree, cell("code", params)))
    assert result.ok
    assert [(d.severity, d.code) for d in result.diagnostics] == [
        (Severity.WARNING, "interpreter_missing")
    ]


# -- the boot agrees ------------------------------------------------------------------------


def _hostile(root: Path, case: str) -> None:
    if case == "fifo":
        (root / "main/w").mkdir()
        os.mkfifo(root / "main/w/config.json")
    elif case == "null":
        (root / "main/w").mkdir()
        (root / "main/w/config.json").write_text("null")
    elif case == "folder":
        (root / "main/w/config.json").mkdir(parents=True)
    elif case == "colony":
        (root / "main/colony").mkdir()
        (root / "main/colony/config.json").write_text(
            '{"cell": {"type": "bash"}, "contract": {"version": "1", "settings": {}, '
            '"consumes": {}}}'
        )
    elif case == "interpreter":
        (root / "main/w").mkdir()
        doc = {
            "cell": {"type": "code"},
            "params": {"script_inline": "x", "interpreter": "/nonexistent/python3"},
            "contract": CONTRACT,
        }
        (root / "main/w/config.json").write_text(json.dumps(doc))


@pytest.mark.parametrize("case", ["fifo", "null", "folder", "colony", "interpreter"])
async def test_what_validate_refuses_the_boot_refuses_with_the_same_diagnostic(
    tmp_path: Path, case: str
) -> None:
    # The harness boots a tree already in its workdir as it stands (a FIFO cannot be copied).
    root = tmp_path / "colony"
    (root / "main").mkdir(parents=True)
    (root / "main/config.json").write_text('{"cell": {"type": "hive"}}')
    _hostile(root, case)
    [expected] = errors(load(root))
    with pytest.raises(ConfigError) as refused:
        async with ColonyHarness(root, workdir=tmp_path):
            pass
    assert f"error[{expected[0]}]" in str(refused.value)


def test_validate_and_the_daemon_know_the_same_cell_types() -> None:
    # --validate checks cell types against BUILTIN_CELL_TYPES; the daemon loads with the types
    # it implements. Were they to differ, boot would refuse trees validate passes.
    assert set(implemented_cell_types()) == BUILTIN_CELL_TYPES
