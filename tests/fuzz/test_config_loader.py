"""Fuzz the config loader: any file content is a list of diagnostics, never an exception."""

from __future__ import annotations

import json
import os
from itertools import count
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cells import BUILTIN_CELL_TYPES, implemented_cell_types
from colony.cell import param_checks
from colony.config.diagnostics import Diagnostic, Severity, render_json, render_text
from colony.validate import validate
from tests.conftest import CONTRACT, cell, hive, write_tree
from tests.fuzz.strategies import json_values, keyed

CHECKS = param_checks(implemented_cell_types())
FIXTURE_SCOPED = [HealthCheck.function_scoped_fixture]
_folders = count()


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz_config")


def check(root: Path) -> list[Diagnostic]:
    found = validate(root, cell_types=BUILTIN_CELL_TYPES, environ={}, param_checks=CHECKS)
    assert isinstance(found, list)
    for d in found:
        assert isinstance(d, Diagnostic)
        assert d.code
        assert d.message
        assert d.severity in (Severity.ERROR, Severity.WARNING)
        assert "Value error" not in d.message
    # Every report can be printed: no lone surrogate from a file or folder name reaches it.
    render_text(found, root=str(root)).encode("utf-8")
    render_json(found, root=str(root)).encode("utf-8")
    return found


def tree(base: Path, files: dict[str, Any]) -> Path:
    return write_tree(base / f"t{next(_folders)}", files)


def errors(found: list[Diagnostic]) -> list[str]:
    return [d.code for d in found if d.severity is Severity.ERROR]


@settings(max_examples=150, deadline=None, suppress_health_check=FIXTURE_SCOPED)
@given(raw=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_any_bytes_as_config_json_give_diagnostics_never_an_exception(
    base: Path, raw: bytes
) -> None:
    root = tree(base, {"main/config.json": hive({"from": ".", "to": "./w"})})
    (root / "main/w").mkdir()
    (root / "main/w/config.json").write_bytes(raw)
    found = check(root)
    try:
        json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        assert "invalid_json" in errors(found)


@settings(max_examples=100, deadline=None, suppress_health_check=FIXTURE_SCOPED)
@given(raw=st.binary(max_size=120) | st.text(max_size=120).map(str.encode))
def test_any_bytes_as_colony_json_give_diagnostics_never_an_exception(
    base: Path, raw: bytes
) -> None:
    root = tree(base, {"main/config.json": hive()})
    (root / "colony.json").write_bytes(raw)
    check(root)


@settings(max_examples=100, deadline=None, suppress_health_check=FIXTURE_SCOPED)
@given(text=st.text(max_size=120))
def test_any_text_as_env_file_gives_diagnostics_never_an_exception(base: Path, text: str) -> None:
    root = tree(base, {"main/config.json": hive()})
    (root / ".env").write_text(text, encoding="utf-8")
    check(root)


def test_an_env_file_that_is_not_utf8_gives_a_diagnostic_not_an_exception(base: Path) -> None:
    root = tree(base, {"main/config.json": hive()})
    (root / ".env").write_bytes(b"\x80")
    assert "env_file_invalid" in errors(check(root))


cell_docs = st.fixed_dictionaries(
    {},
    optional={
        "cell": keyed(
            ["type", "name", "enabled", "description"],
            st.sampled_from([*sorted(BUILTIN_CELL_TYPES), "hive", "nope"]) | json_values,
        ),
        "contract": keyed([*CONTRACT, "emits", "ingress"]),
        "params": json_values,
    },
)
edges = keyed(
    ["from", "to", "condition", "modifier", "restore_ttl"],
    st.sampled_from([".", "./w", "/", "/w", "..", "has(hop.x)", "${X}", "hop.a + 1"]) | json_values,
)
hive_docs = st.builds(
    lambda e, extra: {"cell": {"type": "hive"}, "params": {"graph": {"edges": e}, **extra}},
    st.lists(edges, max_size=3) | json_values,
    keyed(["graph", "ttl", "modifiers"]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=FIXTURE_SCOPED)
@given(root_doc=hive_docs | json_values, child=cell_docs)
def test_any_json_tree_gives_diagnostics_never_an_exception(
    base: Path, root_doc: Any, child: dict[str, Any]
) -> None:
    check(tree(base, {"main/config.json": root_doc, "main/w/config.json": child}))


@settings(max_examples=100, deadline=None, suppress_health_check=FIXTURE_SCOPED)
@given(
    cell_type=st.sampled_from(sorted(BUILTIN_CELL_TYPES)),
    params=keyed(
        [
            "runner",
            "script_inline",
            "script_path",
            "schema",
            "provider",
            "model",
            "base_url",
            "path",
            "target",
            "interval",
            "url",
        ]
    ),
)
def test_any_params_of_every_cell_type_give_diagnostics_never_an_exception(
    base: Path, cell_type: str, params: dict[str, Any]
) -> None:
    check(tree(base, {"main/config.json": hive(), "main/w/config.json": cell(cell_type, params)}))


# -- hostile files: what sits at a path, and JSON no value can hold ---------------------------

HOSTILE_KINDS = ["folder", "fifo", "dev_zero", "loop", "dangling", "huge_depth", "text"]
HOSTILE_PLACES = {
    "colony.json": None,
    ".env": None,
    "main/config.json": None,
    "main/w/config.json": None,
    "main/w/seed/t.jsonl": cell("store"),
    "main/w/seed/system.jsonl": cell("llm", {"model": "m"}),
}
"""Where a hostile file goes; the value is the cell config ``main/w`` needs to read it."""

json_fragments = st.sampled_from(
    [
        "[" * 5000,
        "{" * 200 + "}" * 200,
        "9" * 5000,
        "NaN",
        "-Infinity",
        "1e400",
        '"\\ud800"',
        '{"\\udfff": 1}',
        '"\\ud83d\\ude00"',
        "null",
        "{}",
        '{"cell": {"type": "hive"}}',
        '{"cell": {"type": "bash"}, "params": {"x": ',
        "\x00",
        "${X}",
        "A=1",
    ]
)
hostile_texts = st.lists(json_fragments | st.text(max_size=20), min_size=1, max_size=4).map("".join)


def _place(root: Path, rel: str, kind: str, text: str) -> None:
    target = root / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_dir() and not target.is_symlink():
        import shutil

        shutil.rmtree(target)
    elif os.path.lexists(target):
        target.unlink()
    if kind == "folder":
        target.mkdir()
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "dev_zero":
        os.symlink("/dev/zero", target)
    elif kind == "loop":
        os.symlink(target.name, target)
    elif kind == "dangling":
        os.symlink("nowhere", target)
    elif kind == "huge_depth":
        target.write_text("[" * 100_000)
    else:
        target.write_text(text, encoding="utf-8", errors="surrogatepass")


@settings(max_examples=120, deadline=None, suppress_health_check=FIXTURE_SCOPED)
@given(
    place=st.sampled_from(sorted(HOSTILE_PLACES)),
    kind=st.sampled_from(HOSTILE_KINDS),
    text=hostile_texts,
)
def test_no_file_at_any_path_makes_the_loader_raise_hang_or_read_forever(
    base: Path, place: str, kind: str, text: str
) -> None:
    files: dict[str, Any] = {"main/config.json": hive({"from": ".", "to": "./w"})}
    files["main/w/config.json"] = HOSTILE_PLACES[place] or cell("bash")
    root = tree(base, files)
    _place(root, place, kind, text)
    found = check(root)
    if kind in ("folder", "fifo", "dev_zero", "huge_depth") and place.endswith(".json"):
        assert errors(found), (place, kind)


@settings(max_examples=60, deadline=None, suppress_health_check=FIXTURE_SCOPED)
@given(names=st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=4))
def test_any_folder_names_give_diagnostics_never_an_exception(base: Path, names: list[str]) -> None:
    root = tree(base, {"main/config.json": hive()})
    for name in names:
        safe = name.replace("/", "_").replace("\x00", "_")
        if safe in (".", ".."):
            continue
        try:
            folder = root / "main" / safe
            folder.mkdir(exist_ok=True)
        except (OSError, UnicodeEncodeError):
            continue
        (folder / "config.json").write_text(json.dumps(cell("bash")))
    check(root)
