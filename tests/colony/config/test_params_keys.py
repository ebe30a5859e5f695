"""Params keys a cell type does not read: meclaw ignores them, so they warn here, never refuse.

Every cell type's params parser in meclaw reads the keys it knows and skips the rest (only
nested blocks such as ``sandbox`` are closed). A tree written for meclaw may carry such keys
(``params.command`` on a bash stand-in, a note for the author): it must load, with a warning
that ``--validate-strict`` turns into an error.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cells import BUILTIN_CELL_TYPES, implemented_cell_types
from colony.cell import PydanticCheck, param_checks
from colony.config.diagnostics import Severity
from colony.config.loader import LoadResult, load_tree
from colony.testing import ColonyHarness
from tests.conftest import FIXTURES, TreeFactory, cell, hive

CHECKS = param_checks(implemented_cell_types())
ALARM_LANE = FIXTURES / "trees" / "alarm-lane"


def valid_params(cell_type: str, tmp_path: Path) -> dict[str, Any]:
    """Params each type accepts, so the only finding is about the extra key."""
    every: dict[str, dict[str, Any]] = {
        "bash": {},
        "code": {"runner": "python3", "script_inline": "print('[]')"},
        "edit": {"base_path": str(tmp_path)},
        "file": {"base_path": str(tmp_path)},
        "llm": {"model": "m"},
        "mcp": {"transport": "stdio", "command": "true"},
        "proxy": {"bot_token": "123:abc", "emit_to": "/x"},
        "store": {"schema": {"t": {"c": "text"}}},
        "subcolony": {"root": str(tmp_path)},
        "timer": {},
        "web_fetch": {},
        "web_search": {"endpoint": "http://127.0.0.1:9/search"},
    }
    return every[cell_type]


def load(root: Path, environ: dict[str, str] | None = None) -> LoadResult:
    return load_tree(
        root, cell_types=BUILTIN_CELL_TYPES, environ=environ or {}, param_checks=CHECKS
    )


def test_every_cell_type_has_valid_params_in_this_test(tmp_path: Path) -> None:
    for cell_type in BUILTIN_CELL_TYPES:  # a new type must be added to valid_params
        valid_params(cell_type, tmp_path)


@pytest.mark.parametrize("cell_type", sorted(BUILTIN_CELL_TYPES - {"code"}))
def test_a_params_key_the_cell_type_does_not_read_is_a_warning_never_a_refusal(
    make_tree: TreeFactory, tmp_path: Path, cell_type: str
) -> None:
    params = {**valid_params(cell_type, tmp_path), "commnad": "true"}
    root = make_tree({"main/config.json": hive(), "main/w/config.json": cell(cell_type, params)})
    result = load(root)
    assert result.ok, result.diagnostics
    [d] = result.diagnostics
    assert (d.severity, d.code, d.file, d.pointer) == (
        Severity.WARNING,
        "unknown_param",
        "main/w/config.json",
        "params.commnad",
    )
    assert "commnad" in d.message
    assert "ignored" in d.message
    assert d.hint is not None


def test_a_code_cells_extra_params_are_script_knobs_and_raise_no_warning(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    params = {**valid_params("code", tmp_path), "window_turns": 8}
    root = make_tree({"main/config.json": hive(), "main/w/config.json": cell("code", params)})
    result = load(root)
    assert result.ok
    assert result.diagnostics == []


def test_an_ignored_key_close_to_a_known_one_suggests_it(make_tree: TreeFactory) -> None:
    root = make_tree(
        {"main/config.json": hive(), "main/w/config.json": cell("bash", {"max_byte": 10})}
    )
    [d] = load(root).diagnostics
    assert d.hint is not None
    assert d.hint.startswith("did you mean 'max_bytes'?")


def test_a_known_key_with_a_bad_value_is_still_an_error(make_tree: TreeFactory) -> None:
    params = {"max_bytes": 0, "command": "true"}
    root = make_tree({"main/config.json": hive(), "main/w/config.json": cell("bash", params)})
    result = load(root)
    assert not result.ok
    assert sorted((d.severity.value, d.code, d.pointer) for d in result.diagnostics) == [
        ("error", "out_of_range", "params.max_bytes"),
        ("warning", "unknown_param", "params.command"),
    ]


def test_an_ignored_key_whose_value_came_from_a_variable_is_named_by_its_key(
    make_tree: TreeFactory,
) -> None:
    params = {"command": "true", "marker": "${MARK}"}
    root = make_tree({"main/config.json": hive(), "main/w/config.json": cell("bash", params)})
    result = load(root, environ={"MARK": "s3cr3t-mark"})
    assert result.ok
    marker = [d for d in result.diagnostics if d.pointer == "params.marker"]
    [d] = marker
    assert (d.severity, d.code) == (Severity.WARNING, "unknown_param")
    assert "'marker'" in d.message
    assert "value" not in d.message
    assert "s3cr3t" not in repr(result.diagnostics)


def test_a_bad_substituted_value_names_the_key_and_never_the_value(make_tree: TreeFactory) -> None:
    params = {"base_path": "${BASE}"}
    root = make_tree({"main/config.json": hive(), "main/w/config.json": cell("file", params)})
    result = load(root, environ={"BASE": "relative/s3cr3t"})
    [d] = result.diagnostics
    assert (d.severity, d.pointer) == (Severity.ERROR, "params.base_path")
    assert "base_path" in d.message
    assert "s3cr3t" not in repr(result.diagnostics)


def test_the_alarm_lane_tree_in_meclaws_shape_loads_with_one_warning_per_ignored_key() -> None:
    result = load(ALARM_LANE)
    assert result.ok, result.diagnostics
    assert sorted((d.severity.value, d.code, d.file, d.pointer) for d in result.diagnostics) == [
        ("warning", "unknown_param", "main/receipt/config.json", "params.command"),
        ("warning", "unknown_param", "main/rejects/config.json", "params.command"),
        ("warning", "unknown_param", "main/ring/config.json", "params.command"),
        ("warning", "unknown_param", "main/ring/config.json", "params.marker"),
    ]


SCHEDULE = "0190a3f2-0000-7000-8000-0000000000a1"


def call(op: dict[str, Any]) -> dict[str, Any]:
    text = {"name": "alarm", "arguments": op}
    return {
        "messages": [
            {"origin": "assistant", "type": "tool_call", "id": "c1", "text": json.dumps(text)}
        ]
    }


async def test_cells_whose_params_carry_ignored_keys_boot_and_run() -> None:
    add = {
        "op": "add",
        "schedule_id": SCHEDULE,
        "schedule_name": "wake-up",
        "at": "2099-01-01T09:00:00Z",
        "emit_to": "/ring",
        "emit_body": {"messages": [{"origin": "user", "type": "text", "text": "up"}]},
    }
    async with ColonyHarness(ALARM_LANE) as colony:
        await colony.send("/router", call(add))
        await colony.settle()
        await colony.send("/router", call({"op": "trigger", "schedule_id": SCHEDULE}))
        await colony.settle()
        log = await colony.message_log()
        reached = {entry.to_path for entry in log}
        assert {"/alarm", "/receipt", "/ring"} <= reached
        acks = [e for e in log if e.to_path == "/receipt"]
        assert all(e.headers["hop"]["msg_type"] == "timer_op_ack" for e in acks)


@pytest.mark.parametrize("cell_type", sorted(BUILTIN_CELL_TYPES))
def test_each_cell_types_params_model_accepts_the_keys_the_loader_only_warns_about(
    tmp_path: Path, cell_type: str
) -> None:
    # The cell builds its params with this model at boot: a key the loader let through with
    # a warning must not stop the cell there.
    check = implemented_cell_types()[cell_type].check_params
    assert isinstance(check, PydanticCheck)
    check.model.model_validate({**valid_params(cell_type, tmp_path), "commnad": "true"})


def test_the_daemon_boots_a_tree_with_ignored_params_and_names_each_once(tmp_path: Path) -> None:
    root = tmp_path / "lane"
    shutil.copytree(ALARM_LANE, root)
    exe = Path(sys.executable).with_name("meclaw")
    daemon = subprocess.Popen(
        [str(exe), "--root", str(root), "--daemon"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    try:
        assert daemon.stderr is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = daemon.stderr.readline()
            if not line:
                break
            lines.append(line)
            if "colony running" in line:
                break
        assert any("colony running" in line for line in lines), lines
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.communicate(timeout=30)  # reads the rest and closes the pipe
    warnings = [line for line in lines if "warning[unknown_param]" in line]
    assert len(warnings) == 4
    assert any("main/ring/config.json at params.marker: 'marker'" in w for w in warnings)
