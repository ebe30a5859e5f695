"""Mutated configs never produce a traceback: only diagnostics and a verdict."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from colony.cli import app
from tests.conftest import FIXTURES

NESTED = FIXTURES / "trees" / "nested"
CONFIGS = sorted(
    p.relative_to(NESTED).as_posix()
    for p in NESTED.rglob("config.json")
    if "templates" not in p.parts
)
CONFIGS.append("colony.json")

runner = CliRunner()

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)
expressions = st.text(
    alphabet=st.sampled_from(list("hopcontext.()[]'\"=!<>&|+-*/?:, 0123456789_abhas")), max_size=40
)


def paths_of(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            out.extend(paths_of(value, (*prefix, key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out.extend(paths_of(value, (*prefix, index)))
    return out


def run_validate(root: Path) -> Any:
    result = runner.invoke(app, ["--root", str(root), "--validate", "--format", "json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert "Traceback" not in result.stdout + result.stderr
    assert result.exit_code in (0, 1), result.stdout
    report = json.loads(result.stdout)
    assert report["valid"] is (result.exit_code == 0)
    assert (report["errors"] > 0) is (result.exit_code == 1)
    for d in report["diagnostics"]:
        assert d["message"]
        assert d["code"]
    return report


def mutate(data: st.DataObject, root: Path) -> tuple[str, str]:
    rel = data.draw(st.sampled_from(CONFIGS))
    file = root / rel
    doc = json.loads(file.read_text())
    targets = paths_of(doc)
    action = data.draw(st.sampled_from(["delete", "replace", "expression", "garble"]))
    if action == "garble":
        text = file.read_text()
        cut = data.draw(st.integers(0, len(text)))
        file.write_text(text[:cut] + data.draw(st.text(max_size=5)) + text[cut:])
        return rel, action
    if action == "expression":
        doc.setdefault("params", {}).setdefault("graph", {}).setdefault("edges", []).append(
            {"from": ".", "to": ".", "condition": data.draw(expressions)}
        )
    else:
        path = data.draw(st.sampled_from(targets))
        parent: Any = doc
        for part in path[:-1]:
            parent = parent[part]
        if action == "delete":
            del parent[path[-1]]
        else:
            parent[path[-1]] = data.draw(json_values)
    file.write_text(json.dumps(doc))
    return rel, action


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_mutated_tree_gets_diagnostics_and_a_verdict_never_a_traceback(
    data: st.DataObject,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "tree"
        shutil.copytree(NESTED, root)
        mutate(data, root)
        run_validate(root)


REQUIRED = [
    ("cell",),
    ("cell", "type"),
    ("contract",),
    ("contract", "version"),
    ("contract", "settings"),
    ("contract", "consumes"),
]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([c for c in CONFIGS if c != "colony.json"]), st.sampled_from(REQUIRED))
def test_deleting_a_required_key_always_exits_1(rel: str, path: tuple[str, ...]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "tree"
        shutil.copytree(NESTED, root)
        file = root / rel
        doc = json.loads(file.read_text())
        if doc["cell"]["type"] == "hive" and path[0] == "contract":
            return  # hives need no contract
        parent = doc
        for part in path[:-1]:
            parent = parent[part]
        del parent[path[-1]]
        file.write_text(json.dumps(doc))
        report = run_validate(root)
        assert report["valid"] is False
