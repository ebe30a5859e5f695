"""Fuzz the config loader: any file content is a list of diagnostics, never an exception."""

from __future__ import annotations

import json
from itertools import count
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cells import BUILTIN_CELL_TYPES, implemented_cell_types
from colony.cell import param_checks
from colony.config.diagnostics import Diagnostic, Severity
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
