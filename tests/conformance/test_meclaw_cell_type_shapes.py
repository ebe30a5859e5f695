"""meclaw trees that use ``mcp``, ``edit`` or ``subcolony`` validate here unchanged.

meclaw's snapshot has no tree under ``tests/fixtures/`` or ``examples/`` that declares one of
these three types; its own tests write such cells inline. The configs below have the shapes
those tests use (key for key: ``cell.timeout: -1`` on an mcp cell, an http endpoint with both
timeouts, a stdio command that does not exist, an edit cell with ``max_concurrency``, and the
subcolony parent of meclaw's ``subcolony-echo`` demo with every timeout set), written here in a
tree of our own. ``subcolony-echo`` itself (a child colony of code cells) is
``fixtures/trees/subcolony-echo``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from colony.cli import app
from tests.conftest import FIXTURES, TreeFactory, hive

CONTRACT = {"version": "0.1.0", "settings": {}, "consumes": {}}
CHILD = FIXTURES / "trees" / "subcolony-echo"


def shapes(base: Path) -> dict[str, Any]:
    return {
        "main/config.json": hive(
            {"from": "./child", "to": "./sink"}, {"from": "./edit", "to": "./sink"}
        ),
        "main/mcp_http/config.json": {
            "cell": {"type": "mcp", "timeout": -1},
            "params": {
                "endpoint": "http://127.0.0.1:1/mcp",
                "external_timeout_ms": 500,
                "query_timeout_ms": 1000,
            },
            "contract": CONTRACT,
        },
        "main/mcp_stdio/config.json": {
            "cell": {"type": "mcp", "timeout": -1},
            "params": {
                "transport": "stdio",
                "command": "/nonexistent/mcp-server",
                "external_timeout_ms": 500,
                "query_timeout_ms": 1000,
            },
            "contract": CONTRACT,
        },
        "main/edit/config.json": {
            "cell": {"type": "edit"},
            "params": {"base_path": str(base), "max_concurrency": 1},
            "contract": CONTRACT,
        },
        "main/child/config.json": {
            "cell": {"type": "subcolony"},
            "params": {
                "root": str(CHILD),
                "command": "meclaw",
                "boot_timeout_ms": 20000,
                "request_timeout_ms": 20000,
                "external_timeout_ms": 5000,
                "query_timeout_ms": 1000,
                "kill_grace_ms": 1000,
            },
            "contract": CONTRACT,
        },
        "main/sink/config.json": {
            "cell": {"type": "code"},
            "params": {"runner": "python3", "script_inline": "print('[]')"},
            "contract": CONTRACT,
        },
    }


def test_meclaw_shaped_mcp_edit_and_subcolony_cells_validate_strictly(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    root = make_tree(shapes(tmp_path))
    result = CliRunner().invoke(app, ["--root", str(root), "--validate-strict"])
    assert result.exit_code == 0, result.output
    assert "valid (0 error(s), 0 warning(s))" in result.output


def test_the_subcolony_echo_child_tree_validates_strictly() -> None:
    result = CliRunner().invoke(app, ["--root", str(CHILD), "--validate-strict"])
    assert result.exit_code == 0, result.output
