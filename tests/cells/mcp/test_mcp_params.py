"""The mcp cell's params: what --validate says, meclaw's shapes, runtime of a bad command."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from cells.mcp import MCP
from cells.mcp.wire import listing, provider_key
from colony.cell import ParamProblem
from colony.testing import ColonyHarness
from tests.cells.mcp.servers import call, until
from tests.conftest import TreeFactory, hive


def problems(params: Any) -> list[ParamProblem]:
    assert MCP.check_params is not None
    return MCP.check_params(params, None)


def test_meclaws_http_and_stdio_shapes_are_valid() -> None:
    base = {"external_timeout_ms": 500, "query_timeout_ms": 1000}
    assert problems({"endpoint": "http://127.0.0.1:1/mcp", **base}) == []
    assert problems({"transport": "stdio", "command": "/nonexistent/mcp-server", **base}) == []
    assert problems({"command": "srv", "args": ["-v"], "env": {"A": "1"}, "cwd": "/"}) == []
    assert problems({"endpoint": "http://h/mcp", "auth": {"bearer": ""}}) == []


@pytest.mark.parametrize(
    ("params", "code", "words"),
    [
        ({"endpoint": "http://h/mcp", "command": "srv"}, "endpoint_and_command", "exclusive"),
        ({"endpoint": ""}, "endpoint_required", "must not be empty"),
        ({"transport": "stdio", "command": ""}, "command_required", "must not be empty"),
        ({}, "endpoint_required", "required"),
        ({"transport": "stdio", "endpoint": "http://h/mcp"}, "command_required", "required"),
        ({"command": "srv", "auth": {"bearer": "x"}}, "key_for_other_transport", "auth"),
        ({"endpoint": "http://h/mcp", "kill_grace_ms": 5}, "key_for_other_transport", "stdio"),
        ({"endpoint": "ftp://h/mcp"}, "invalid_endpoint", "http://"),
        ({"endpoint": "http://h/mcp", "external_timeout_ms": 0}, "out_of_range", ""),
        ({"endpoint": "http://h/mcp", "tool": " "}, "empty_tool", "tool"),
    ],
)
def test_bad_params_are_refused_with_a_fix(params: dict[str, Any], code: str, words: str) -> None:
    [problem] = problems(params)
    assert problem.code == code
    assert not problem.warning
    assert words in problem.message


def test_an_unknown_key_is_a_warning_naming_the_closest_param() -> None:
    [problem] = problems({"endpoint": "http://h/mcp", "extrnal_timeout_ms": 5})
    assert (problem.code, problem.warning) == ("unknown_param", True)
    assert "did you mean 'external_timeout_ms'?" in (problem.hint or "")


def test_a_sandbox_is_accepted_with_a_warning_that_it_is_not_enforced() -> None:
    [problem] = problems({"command": "srv", "sandbox": {"trust": "restricted"}})
    assert (problem.code, problem.warning) == ("sandbox_not_enforced", True)


def test_the_provider_key_is_the_path_with_underscores() -> None:
    assert provider_key("/main/mcp") == "main_mcp"
    tools = listing("/main/mcp", [{"name": "a_b", "inputSchema": {"type": "object"}}], 3)
    assert list(tools.message["system"]["tools"]["main_mcp"]) == ["$replace", "a_b"]


async def test_a_command_that_does_not_exist_fails_the_cell_past_its_restarts(
    make_tree: TreeFactory,
) -> None:
    tree = {
        "main/config.json": hive({"from": "./mcp", "to": "/sink"}),
        "main/mcp/config.json": {
            "cell": {"type": "mcp", "timeout": -1},
            "params": {
                "transport": "stdio",
                "command": "/nonexistent/mcp-server",
                "external_timeout_ms": 500,
                "query_timeout_ms": 1000,
            },
            "contract": {"version": "0.1.0", "settings": {}, "consumes": {}},
        },
    }
    async with ColonyHarness(make_tree(tree), capture=["/sink"]) as colony:
        runner = colony.colony.runners["/mcp"]
        await until(lambda: runner.state.value == "failed")
        failed = colony.logs("mcp_server_start_failed")
        assert failed
        assert "/nonexistent/mcp-server" in failed[0]["error"]
        status = colony.colony.events.io.task("/mcp", "mcp_server")
        assert status.last_error_kind == "start"
        await colony.send("/mcp", call("echo", {"text": "x"}))
        await colony.settle()
        assert await colony.dead_letters("cell_inactive")


def test_loading_the_cell_types_does_not_import_the_mcp_sdk() -> None:
    # Every daemon and every --validate loads the cell types; the SDK costs ~0.8 s of start-up
    # and is wanted only where an mcp cell is built.
    code = (
        "import sys; from cells import implemented_cell_types; implemented_cell_types(); "
        "print(sorted(m for m in ('mcp', 'starlette', 'opentelemetry') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"
