"""``meclaw --root DIR --validate``: exit codes, output formats, and never a traceback."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from colony.cli import app
from tests.conftest import CONTRACT, FIXTURES, MINIMAL_PARAMS, TreeFactory, cell, hive

runner = CliRunner(env={"MECLAW_TEST_UNSET": None})


def meclaw(*args: str) -> Any:
    result = runner.invoke(app, list(args))
    # Anything but a clean exit is a bug: the CLI must never let an exception escape.
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def with_cell(doc: dict[str, Any]) -> dict[str, Any]:
    return {"main/config.json": hive(), "main/w/config.json": doc}


def edge_tree(edge: dict[str, Any]) -> dict[str, Any]:
    return {"main/config.json": hive(edge), "main/a/config.json": cell("code")}


def drop(doc: dict[str, Any], key: str) -> dict[str, Any]:
    doc = json.loads(json.dumps(doc))
    del doc["contract"][key]
    return doc


ERROR_TREES: dict[str, tuple[dict[str, Any], str]] = {
    "invalid json": ({"main/config.json": '{"cell": {"type": "hive"},}'}, "invalid_json"),
    "unknown key": (with_cell(cell("code", restart_limt=1)), "unknown_key"),
    "unknown cell type": (with_cell(cell("llm2")), "unknown_cell_type"),
    "no contract": (
        with_cell({"cell": {"type": "code"}, "params": MINIMAL_PARAMS["code"]}),
        "contract_incomplete",
    ),
    "no contract version": (with_cell(drop(cell("code"), "version")), "contract_incomplete"),
    "no contract settings": (with_cell(drop(cell("code"), "settings")), "contract_incomplete"),
    "no contract consumes": (with_cell(drop(cell("code"), "consumes")), "contract_incomplete"),
    "mailbox size zero": (with_cell(cell("code", mailbox_size=0)), "mailbox_size_zero"),
    "bad emits type": (
        with_cell(
            {
                "cell": {"type": "code"},
                "params": MINIMAL_PARAMS["code"],
                "contract": {**CONTRACT, "emits": {"body": {"x": {"type": "text"}}}},
            }
        ),
        "invalid_emits_type",
    ),
    "condition syntax": (
        edge_tree({"from": ".", "to": "a", "condition": "hop.x =="}),
        "condition_syntax",
    ),
    "modifier syntax": (
        edge_tree({"from": ".", "to": "a", "modifier": {"set_hop": {"k": "'unclosed"}}}),
        "modifier_syntax",
    ),
    "restore_ttl without condition": (
        edge_tree({"from": ".", "to": "a", "modifier": {"restore_ttl": True}}),
        "restore_ttl_unconditional",
    ),
    "missing variable": (
        with_cell(cell("llm", {"model": "m", "api_key": "${MECLAW_TEST_UNSET}"})),
        "env_var_missing",
    ),
    "unsupported substitution": (
        with_cell(cell("llm", {"model": "m", "api_key": "${A:=b}"})),
        "unsupported_substitution",
    ),
    "no root": ({"readme.md": "nothing here"}, "no_root"),
    "several roots": ({"a/config.json": hive(), "b/config.json": hive()}, "multiple_roots"),
    "bad colony.json": (
        {"colony.json": {"schema_version": 7}, "main/config.json": hive()},
        "schema_version_unsupported",
    ),
    "cluster dsn variable unset": (
        {"colony.json": {"cluster": {"dsn": "${MECLAW_TEST_UNSET}"}}, "main/config.json": hive()},
        "env_var_missing",
    ),
    "cluster dsn empty": (
        {"colony.json": {"cluster": {"dsn": ""}}, "main/config.json": hive()},
        "cluster_dsn_empty",
    ),
    "cluster dsn of another database": (
        {"colony.json": {"cluster": {"dsn": "mysql://h/db"}}, "main/config.json": hive()},
        "cluster_dsn_invalid",
    ),
    "cluster partition_by unreadable": (
        {
            "colony.json": {"cluster": {"dsn": "postgresql://h/db", "partition_by": "chat_id"}},
            "main/config.json": hive(),
        },
        "cluster_partition_by_invalid",
    ),
    "cluster lease too short": (
        {
            "colony.json": {"cluster": {"dsn": "postgresql://h/db", "lease_ms": 500}},
            "main/config.json": hive(),
        },
        "out_of_range",
    ),
}


@pytest.mark.parametrize("name", sorted(ERROR_TREES))
def test_each_kind_of_error_exits_1_and_names_its_code(make_tree: TreeFactory, name: str) -> None:
    files, code = ERROR_TREES[name]
    root = make_tree(files)
    result = meclaw("--root", str(root), "--validate")
    assert result.exit_code == 1
    assert f"error[{code}]" in result.stderr
    assert result.stderr.rstrip().endswith("invalid (1 error(s), 0 warning(s))")


WARNING_TREES: dict[str, tuple[dict[str, Any], str]] = {
    "dangling endpoint": (
        {"main/config.json": hive({"from": ".", "to": "/sink"})},
        "dangling_endpoint",
    ),
    "unknown colony endpoint": (
        {"main/config.json": hive({"from": ".", "to": "/colony/events"})},
        "colony_endpoint_unknown",
    ),
}


@pytest.mark.parametrize("name", sorted(WARNING_TREES))
def test_a_warning_exits_0_and_1_under_validate_strict(make_tree: TreeFactory, name: str) -> None:
    files, code = WARNING_TREES[name]
    root = make_tree(files)
    plain = meclaw("--root", str(root), "--validate")
    assert plain.exit_code == 0
    assert f"warning[{code}]" in plain.stderr
    strict = meclaw("--root", str(root), "--validate", "--validate-strict")
    assert strict.exit_code == 1
    assert f"error[{code}]" in strict.stderr


def test_validate_strict_alone_implies_validate(make_tree: TreeFactory) -> None:
    root = make_tree(WARNING_TREES["dangling endpoint"][0])
    assert meclaw("--root", str(root), "--validate-strict").exit_code == 1


def test_a_valid_tree_exits_0_and_says_so() -> None:
    result = meclaw("--root", str(FIXTURES / "trees" / "nested"), "--validate")
    assert result.exit_code == 0
    assert result.stderr.rstrip().endswith("valid (0 error(s), 0 warning(s))")


def test_three_mistakes_in_three_files_are_reported_in_one_run() -> None:
    result = meclaw("--root", str(FIXTURES / "trees" / "three-mistakes"), "--validate")
    assert result.exit_code == 1
    for code in ("unknown_key", "unknown_cell_type", "mailbox_size_zero"):
        assert f"error[{code}]" in result.stderr
    assert "invalid (3 error(s), 0 warning(s))" in result.stderr


def test_text_diagnostics_name_file_line_json_path_and_fix() -> None:
    root = FIXTURES / "trees" / "three-mistakes"
    result = meclaw("--root", str(root), "--validate")
    prefix = os.path.relpath(root).replace(os.sep, "/")
    assert (
        f"{prefix}/main/config.json:11:11: error[unknown_key] at "
        "params.graph.edges[0].conditon: unknown key 'conditon'" in result.stderr
    )
    assert "    fix: did you mean 'condition'?" in result.stderr


def test_json_format_prints_one_object_on_stdout() -> None:
    result = meclaw(
        "--root", str(FIXTURES / "trees" / "three-mistakes"), "--validate", "--format", "json"
    )
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["valid"] is False
    assert doc["errors"] == 3
    first = doc["diagnostics"][0]
    assert first == {
        "severity": "error",
        "code": "unknown_key",
        "file": "main/config.json",
        "path": "params.graph.edges[0].conditon",
        "line": 11,
        "column": 11,
        "message": "unknown key 'conditon'",
        "hint": "did you mean 'condition'? Keys allowed here: from, to, condition, modifier.",
        "related": [],
    }


def test_github_format_prints_annotations_pointing_at_repository_files() -> None:
    root = FIXTURES / "trees" / "dangling"
    result = meclaw("--root", str(root), "--validate", "--format", "github")
    assert result.exit_code == 0
    prefix = os.path.relpath(root).replace(os.sep, "/")
    [annotation] = [line for line in result.stdout.splitlines() if line.startswith("::")]
    assert annotation.startswith(
        f"::warning file={prefix}/main/config.json,line=10,col=11,title=meclaw dangling_endpoint::"
    )


def test_a_root_that_does_not_exist_is_a_usage_error(tmp_path: Path) -> None:
    result = meclaw("--root", str(tmp_path / "nope"), "--validate")
    assert result.exit_code == 2
    assert "no such folder" in result.stderr


def test_an_env_file_that_does_not_exist_is_a_usage_error(make_tree: TreeFactory) -> None:
    root = make_tree({"main/config.json": hive()})
    result = meclaw("--root", str(root), "--validate", "--env", str(root / "missing.env"))
    assert result.exit_code == 2


def test_an_env_path_that_is_a_folder_or_fifo_is_named_as_not_a_regular_file(
    make_tree: TreeFactory,
) -> None:
    root = make_tree({"main/config.json": hive()})
    os.mkfifo(root / "pipe.env")
    for env in (root / "main", root / "pipe.env"):
        result = meclaw("--root", str(root), "--validate", "--env", str(env))
        assert result.exit_code == 2
        assert "not a regular file" in result.stderr


@pytest.mark.parametrize("args", [["--bogus"], ["--validate", "--format", "xml"]])
def test_unknown_flags_and_values_are_usage_errors(make_tree: TreeFactory, args: list[str]) -> None:
    root = make_tree({"main/config.json": hive()})
    assert meclaw("--root", str(root), *args).exit_code == 2


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_mtime_ns, p.stat().st_size)
        for p in sorted(root.rglob("*"))
    }


def test_validate_creates_locks_and_writes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    shutil.copytree(FIXTURES / "trees" / "nested", root)
    before = snapshot(root)
    assert meclaw("--root", str(root), "--validate").exit_code == 0
    assert meclaw("--root", str(root), "--validate-strict", "--format", "json").exit_code == 0
    assert snapshot(root) == before


def test_validate_checks_a_cluster_block_without_connecting_to_its_database(
    make_tree: TreeFactory,
) -> None:
    # A listening socket the DSN points at: validate must leave it without a single caller.
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        port = server.getsockname()[1]
        dsn = f"postgresql://meclaw@127.0.0.1:{port}/colony?connect_timeout=2"
        root = make_tree({"colony.json": {"cluster": {"dsn": dsn}}, "main/config.json": hive()})
        result = meclaw("--root", str(root), "--validate")
        assert result.exit_code == 0, result.stderr
        with pytest.raises(BlockingIOError):
            server.accept()
    assert "valid (0 error(s), 0 warning(s))" in result.stderr


def test_a_bad_cluster_block_is_reported_with_file_line_key_and_fix(
    make_tree: TreeFactory,
) -> None:
    root = make_tree(
        {
            "colony.json": {"cluster": {"dsn": "${MECLAW_TEST_UNSET}", "partitions": 0}},
            "main/config.json": hive(),
        }
    )
    result = meclaw("--root", str(root), "--validate")
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert any(
        "colony.json:3:5:" in line
        and "error[env_var_missing] at cluster.dsn: ${MECLAW_TEST_UNSET} has no value" in line
        for line in lines
    ), result.stderr
    assert any("error[out_of_range] at cluster.partitions" in line for line in lines)
    assert "fix: use a value at least 1." in result.stderr


def test_meclaws_dangling_sink_fixture_shape_warns_and_fails_only_under_strict(
    make_tree: TreeFactory,
) -> None:
    # meclaw's own fixtures route finished turns to /sink and /park, cells its tests spawn
    # at runtime: --validate cannot see them.
    root = make_tree(
        {
            "main/config.json": hive(
                {"from": ".", "to": "./loop"},
                {"from": "./loop", "to": "/sink", "condition": "has(hop.done)"},
                {"from": "./loop", "to": "/park", "condition": "!has(hop.done)"},
            ),
            "main/loop/config.json": cell("code"),
        }
    )
    assert meclaw("--root", str(root), "--validate").exit_code == 0
    assert meclaw("--root", str(root), "--validate", "--validate-strict").exit_code == 1


def test_the_installed_command_reports_without_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    (bad / "main").mkdir(parents=True)
    (bad / "main" / "config.json").write_text('{"cell": ')
    exe = Path(sys.executable).with_name("meclaw")
    for args, code in (
        (["--root", str(bad), "--validate"], 1),
        (["--root", str(FIXTURES / "trees" / "nested"), "--validate"], 0),
        (["--root", str(tmp_path / "absent"), "--validate"], 2),
        (["--version"], 0),
    ):
        done = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == code, (args, done.stderr)
        assert "Traceback" not in done.stderr + done.stdout


PARAM_ERRORS: dict[str, tuple[dict[str, Any], str, str]] = {
    "code without a script": (cell("code", {"runner": "python3"}), "script_choice", "params"),
    "code with two scripts": (
        cell("code", {"script_inline": "print(1)", "script": "a.py"}),
        "script_choice",
        "params",
    ),
    "code script file missing": (
        cell("code", {"script": "missing.py"}),
        "script_missing",
        "params.script",
    ),
    "code runner unknown": (
        cell("code", {"runner": "ruby", "script_inline": "x"}),
        "invalid_value",
        "params.runner",
    ),
    "code timeout zero": (
        cell("code", {"script_inline": "x", "external_timeout_ms": 0}),
        "out_of_range",
        "params.external_timeout_ms",
    ),
    "store without schema": (cell("store", {}), "missing_key", "params.schema"),
    "store bad column type": (
        cell("store", {"schema": {"t": {"c": "varchar"}}}),
        "invalid_value",
        "params.schema.t.c",
    ),
    "store bad table name": (
        cell("store", {"schema": {"sqlite_x": {"c": "text"}}}),
        "invalid_identifier",
        "params.schema",
    ),
    "nested unknown key (llm transcript)": (
        cell("llm", {"model": "m", "transcript": {"stor": "memory"}}),
        "unknown_key",
        "params.transcript.stor",
    ),
}


@pytest.mark.parametrize("name", sorted(PARAM_ERRORS))
def test_bad_params_of_implemented_cell_types_fail_validate(
    make_tree: TreeFactory, name: str
) -> None:
    doc, code, pointer = PARAM_ERRORS[name]
    root = make_tree(with_cell(doc))
    result = meclaw("--root", str(root), "--validate", "--format", "json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert [(d["code"], d["path"]) for d in report["diagnostics"]] == [(code, pointer)]


def test_a_broken_store_seed_fails_validate_naming_the_line(make_tree: TreeFactory) -> None:
    files = with_cell(cell("store", {"schema": {"t": {"c": "text"}}}))
    files["main/w/seed/t.jsonl"] = '{"schema": {"c": "text"}}\n{"c": "ok"}\n{"c": \n'
    result = meclaw("--root", str(make_tree(files)), "--validate")
    assert result.exit_code == 1
    assert "error[invalid_seed]" in result.stderr
    assert "seed/t.jsonl: line 3" in result.stderr
    files["main/w/seed/t.jsonl"] = '{"c": "no header"}\n'
    result = meclaw("--root", str(make_tree(files)), "--validate")
    assert "first line must be" in result.stderr


def test_an_unknown_llm_param_is_a_warning_naming_the_closest_key(make_tree: TreeFactory) -> None:
    root = make_tree(with_cell(cell("llm", {"model": "m", "max_token": 100})))
    plain = meclaw("--root", str(root), "--validate", "--format", "json")
    assert plain.exit_code == 0
    [d] = json.loads(plain.stdout)["diagnostics"]
    assert (d["severity"], d["code"], d["path"]) == ("warning", "unknown_param", "params.max_token")
    assert d["hint"].startswith("did you mean 'max_tokens'?")
    assert meclaw("--root", str(root), "--validate-strict").exit_code == 1


def test_a_postgres_transcript_store_without_any_dsn_fails_validate(
    make_tree: TreeFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LLM_TRANSCRIPT_PG_DSN", raising=False)
    root = make_tree(with_cell(cell("llm", {"model": "m", "transcript": {"store": "postgres"}})))
    result = meclaw("--root", str(root), "--validate", "--format", "json")
    assert result.exit_code == 1
    [d] = json.loads(result.stdout)["diagnostics"]
    assert (d["severity"], d["code"], d["path"]) == (
        "error",
        "transcript_dsn_missing",
        "params.transcript.postgres.dsn",
    )
    assert "LLM_TRANSCRIPT_PG_DSN" in d["message"]
    assert '"${COLONY_PG_DSN}"' in d["hint"]


def test_a_postgres_transcript_store_in_a_cluster_uses_the_clusters_database(
    make_tree: TreeFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LLM_TRANSCRIPT_PG_DSN", raising=False)
    files = with_cell(cell("llm", {"model": "m", "transcript": {"store": "postgres"}}))
    files["colony.json"] = {"cluster": {"dsn": "postgresql://db.example/colony"}}
    root = make_tree(files)
    result = meclaw("--root", str(root), "--validate", "--format", "json")
    assert result.exit_code == 0, result.stdout
    assert json.loads(result.stdout)["diagnostics"] == []


@pytest.mark.parametrize(
    ("postgres", "environ"),
    [
        ({"dsn": "${MECLAW_TEST_PG_DSN}"}, {"MECLAW_TEST_PG_DSN": "postgresql://db/x"}),
        ({}, {"LLM_TRANSCRIPT_PG_DSN": "postgresql://db/x"}),
    ],
    ids=["a dsn param from a variable", "the environment fallback"],
)
def test_a_postgres_transcript_store_with_a_dsn_validates_without_connecting(
    make_tree: TreeFactory,
    monkeypatch: pytest.MonkeyPatch,
    postgres: dict[str, str],
    environ: dict[str, str],
) -> None:
    monkeypatch.delenv("LLM_TRANSCRIPT_PG_DSN", raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    transcript = {"store": "postgres", "postgres": postgres}
    root = make_tree(with_cell(cell("llm", {"model": "m", "transcript": transcript})))
    result = meclaw("--root", str(root), "--validate")
    assert result.exit_code == 0, result.stderr


def test_meclaws_bash_stand_ins_with_params_command_validate_and_fail_only_under_strict() -> None:
    # Shaped like meclaw's gh81 remind-lane fixture: bash cells carrying a params.command the
    # bash cell does not read, and a params.marker filled from .env.
    root = str(FIXTURES / "trees" / "alarm-lane")
    plain = meclaw("--root", root, "--validate", "--format", "json")
    assert plain.exit_code == 0, plain.stdout
    report = json.loads(plain.stdout)
    assert {(d["severity"], d["code"]) for d in report["diagnostics"]} == {
        ("warning", "unknown_param")
    }
    assert "params.marker" in {d["path"] for d in report["diagnostics"]}
    strict = meclaw("--root", root, "--validate-strict")
    assert strict.exit_code == 1
    assert "error[unknown_param] at params.marker: 'marker' is not a param" in strict.stderr


def test_an_llm_without_a_model_fails_validate(make_tree: TreeFactory) -> None:
    result = meclaw("--root", str(make_tree(with_cell(cell("llm", {"api_key": ""})))), "--validate")
    assert result.exit_code == 1
    assert "error[missing_key] at params.model" in result.stderr


@pytest.mark.parametrize(("provider", "name"), [("gemini", "9lives"), ("anthropic", "get.weather")])
def test_a_seeded_tool_the_provider_cannot_carry_fails_validate_naming_tool_and_provider(
    make_tree: TreeFactory, provider: str, name: str
) -> None:
    files = with_cell(cell("llm", {"provider": provider, "model": "m"}))
    tool = json.dumps({"name": name, "description": "d", "parameters": {"type": "object"}})
    files["main/w/seed/system.jsonl"] = (
        '{"schema": {"slot_path": "text", "value": "json"}}\n'
        + json.dumps({"slot_path": f"tools.{name.replace('.', '_')}", "value": {"text": tool}})
        + "\n"
    )
    result = meclaw("--root", str(make_tree(files)), "--validate")
    assert result.exit_code == 1
    assert "error[tool_unsupported]" in result.stderr
    assert provider in result.stderr
    assert name in result.stderr


def test_a_hostile_tree_is_reported_by_the_installed_command_never_an_internal_error(
    tmp_path: Path,
) -> None:
    root = tmp_path / "hostile"
    (root / "main/w").mkdir(parents=True)
    (root / "main/config.json").write_text('{"cell": {"type": "hive"}}')
    os.mkfifo(root / "main/w/config.json")
    os.symlink("/dev/zero", root / "colony.json")
    (root / ".env").mkdir()
    exe = Path(sys.executable).with_name("meclaw")
    done = subprocess.run(
        [str(exe), "--root", str(root), "--validate"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1, done.stderr
    assert "internal error" not in done.stderr
    assert "Traceback" not in done.stderr
    for name in ("main/w/config.json", "colony.json", ".env"):
        assert f"{name}: error[" in done.stderr


def test_a_root_one_level_too_deep_asks_did_you_mean_its_parent(tmp_path: Path) -> None:
    colony = tmp_path / "colony"
    shutil.copytree(FIXTURES / "trees" / "nested", colony)
    result = meclaw("--root", str(colony / "main"), "--validate")
    assert result.exit_code == 1
    assert f"did you mean --root {colony}?" in result.stderr


def test_a_root_one_level_too_high_asks_did_you_mean_the_colony_below(tmp_path: Path) -> None:
    colony = tmp_path / "projects" / "colony"
    shutil.copytree(FIXTURES / "trees" / "nested", colony)
    (tmp_path / "projects" / "notes").mkdir()
    result = meclaw("--root", str(tmp_path / "projects"), "--validate")
    assert result.exit_code == 1
    assert "error[no_root]" in result.stderr
    assert f"did you mean --root {colony}?" in result.stderr


def test_a_relative_root_gets_a_relative_suggestion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(FIXTURES / "trees" / "nested", tmp_path / "colony")
    monkeypatch.chdir(tmp_path)
    result = meclaw("--root", "colony/main", "--validate")
    assert "did you mean --root colony?" in result.stderr
    result = meclaw("--root", ".", "--validate")
    assert "did you mean --root colony?" in result.stderr


DOCUMENTED_CODES = [
    *(code for _, code in ERROR_TREES.values()),
    *(code for _, code in WARNING_TREES.values()),
    "not_a_file",
    "file_too_large",
    "unreadable_file",
    "invalid_unicode",
    "invalid_folder_name",
    "path_collision",
    "reserved_path",
    "context_unreachable",
    "hop_unreachable",
    "interpreter_missing",
    "unknown_param",
    "unreadable_folder",
    "root_is_a_node",
    "runner_missing",
    "colony_db_unusable",
    "transcript_dsn_missing",
]


@pytest.mark.parametrize("code", sorted(set(DOCUMENTED_CODES)))
def test_every_validate_code_is_documented(code: str) -> None:
    assert f"`{code}`" in (FIXTURES.parent / "docs" / "validate.md").read_text()


@pytest.mark.parametrize(
    "content", [b"this is not a database at all" * 10, b"SQLite format 3\x00" + b"\x01" * 50]
)
def test_validate_reports_a_colony_db_the_boot_would_refuse_and_writes_nothing(
    make_tree: TreeFactory, content: bytes
) -> None:
    root = make_tree({"main/config.json": hive()})
    (root / "colony.db").write_bytes(content)
    before = sorted(p.name for p in root.iterdir())
    checked = meclaw("--root", str(root), "--validate")
    assert checked.exit_code == 1
    assert "error[colony_db_unusable]" in checked.stderr
    assert "colony.db" in checked.stderr
    assert sorted(p.name for p in root.iterdir()) == before  # validate wrote nothing
    exe = str(Path(sys.executable).with_name("meclaw"))
    booted = subprocess.run(
        [exe, "--root", str(root), "--daemon"], capture_output=True, text=True, timeout=30
    )
    assert booted.returncode == 1
    assert "cannot boot" in booted.stderr
    assert "colony.db" in booted.stderr
    assert "Traceback" not in checked.stderr + booted.stderr
