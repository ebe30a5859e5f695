"""``meclaw graph``: the topology as Graphviz DOT, drawn from the tree without any secrets."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from cells import BUILTIN_CELL_TYPES
from colony.cli import app
from colony.dot import _quote, load_for_picture, to_dot
from tests.conftest import FIXTURES, TreeFactory, cell, hive

runner = CliRunner()


def picture(root: Path) -> str:
    loaded = load_for_picture(root, cell_types=BUILTIN_CELL_TYPES)
    assert loaded.tree is not None, loaded.diagnostics
    return to_dot(loaded.tree)


def unquote(token: str) -> str:
    """Read back one DOT double-quoted string (the escapes :func:`_quote` writes)."""
    assert token.startswith('"')
    assert token.endswith('"')
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), token[1:-1])


def cluster_of(dot: str, node: str) -> str:
    """The innermost cluster whose body declares ``node`` (by walking the brace nesting)."""
    stack: list[str] = []
    for line in dot.splitlines():
        text = line.strip()
        if text.startswith("subgraph "):
            stack.append(unquote(text.split(" ")[1]))
        elif text == "}":
            if stack:
                stack.pop()
        elif text.startswith(f'"{node}" [') and stack:
            return stack[-1]
    raise AssertionError(f"{node} is not declared inside a cluster")


def test_every_cell_is_drawn_inside_the_cluster_of_its_hive() -> None:
    dot = picture(FIXTURES / "trees" / "tool-loop")
    assert cluster_of(dot, "/brain") == "cluster_/"
    for tool in ("/tools/calc", "/tools/collector", "/tools/dispatcher"):
        assert cluster_of(dot, tool) == "cluster_/tools"
        declared = [x for x in dot.splitlines() if x.strip().startswith(f'"{tool}" [')]
        assert len(declared) == 1
    assert '"/tools/calc" [label="calc\\ncode"];' in dot
    assert dot.count("{") == dot.count("}")


def test_an_edge_is_labelled_with_its_condition_and_what_its_modifier_does() -> None:
    dot = picture(FIXTURES / "trees" / "tool-loop")
    line = next(x for x in dot.splitlines() if x.strip().startswith('"/tools/collector" ->'))
    label = unquote(re.search(r'label=("(?:[^"\\]|\\.)*")', line).group(1))  # type: ignore[union-attr]
    assert label.splitlines() == [
        "has(hop.route) && hop.route == 'back' && int(context.iter) < 8",
        "context.thread = hop.thread",
        "context.iter = string(int(context.iter) + 1)",
        "restore_ttl",
    ]
    assert "style=bold" in line  # a restoring edge stands out
    assert '"/tools" -> "/tools/dispatcher";' in dot  # no condition, no label


def test_an_endpoint_the_tree_does_not_hold_is_drawn_dashed() -> None:
    dot = picture(FIXTURES / "trees" / "tool-loop")
    assert '"/sink" [style=dashed, label="sink\\n(not in the tree)"];' in dot


def test_the_picture_needs_no_variables_and_never_prints_a_value(make_tree: TreeFactory) -> None:
    llm: dict[str, Any] = cell(
        "llm", {"provider": "openai", "model": "m", "api_key": "${SECRET_KEY}"}
    )
    root = make_tree(
        {
            "main/config.json": hive(
                {"from": ".", "to": "./brain", "condition": 'hop.kind == "ask"'}
            ),
            "main/brain/config.json": llm,
            ".env": "SECRET_KEY=hunter2-very-secret\n",
        }
    )
    dot = picture(root)
    assert "hunter2" not in dot
    assert '"/brain" [label="brain\\nllm"];' in dot
    (root / ".env").unlink()  # and without any value at all, the picture is still drawn
    assert picture(root) == dot


def test_mcp_and_subcolony_cells_are_drawn_apart_naming_what_they_reach(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    root = make_tree(
        {
            "main/config.json": hive(
                {"from": "./search", "to": "./child"}, {"from": "./child", "to": "./fix"}
            ),
            "main/search/config.json": cell("mcp", {"command": "${MCP_SERVER}"}),
            "main/remote/config.json": cell(
                "mcp", {"transport": "streamable_http", "endpoint": "${MCP_URL}"}
            ),
            "main/child/config.json": cell("subcolony", {"root": "${HOME}/colonies/echo/"}),
            "main/fix/config.json": cell("edit", {"base_path": str(tmp_path)}),
        }
    )
    dot = picture(root)
    assert '"/search" [shape=component, label="search\\nmcp\\nMCP over stdio"];' in dot
    assert '"/remote" [shape=component, label="remote\\nmcp\\nMCP over streamable_http"];' in dot
    assert '"/child" [shape=box3d, label="child\\nsubcolony\\nchild colony: echo"];' in dot
    assert '"/fix" [label="fix\\nedit"];' in dot
    assert '"/search" -> "/child";' in dot


def test_double_quotes_in_a_condition_are_escaped(make_tree: TreeFactory) -> None:
    root = make_tree(
        {
            "main/config.json": hive({"from": ".", "to": "./a", "condition": 'hop.k == "x\\\\y"'}),
            "main/a/config.json": cell("code"),
        }
    )
    line = next(x for x in picture(root).splitlines() if '-> "/a"' in x)
    assert unquote(line.split("label=", 1)[1].rstrip("];")) == 'hop.k == "x\\\\y"'


@given(st.text())
def test_any_text_survives_quoting(text: str) -> None:
    quoted = _quote(text)
    assert "\n" not in quoted
    assert unquote(quoted) == text


def test_meclaw_graph_prints_dot_and_exits_zero() -> None:
    result = runner.invoke(app, ["graph", "--root", str(FIXTURES / "trees" / "tool-loop")])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("digraph colony {")


def test_meclaw_graph_on_a_broken_tree_names_the_file_and_exits_one() -> None:
    result = runner.invoke(app, ["graph", "--root", str(FIXTURES / "trees" / "three-mistakes")])
    assert result.exit_code == 1
    assert "main/config.json" in result.stderr
    assert "conditon" in result.stderr
    assert "digraph" not in result.stdout
