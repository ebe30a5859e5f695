"""Loading a colony tree: discovery, schema, contracts, expressions, endpoints."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cells import BUILTIN_CELL_TYPES
from colony.config.diagnostics import Diagnostic, Severity
from colony.config.loader import LoadResult, load_tree
from tests.conftest import CONTRACT, FIXTURES, TreeFactory, cell, hive


def load(root: Path, **kwargs: object) -> LoadResult:
    return load_tree(root, cell_types=BUILTIN_CELL_TYPES, environ={}, **kwargs)  # type: ignore[arg-type]


def found(result: LoadResult) -> list[tuple[str, str, str | None, str]]:
    return [(d.severity.value, d.code, d.file, d.pointer) for d in result.diagnostics]


def only(result: LoadResult) -> Diagnostic:
    assert len(result.diagnostics) == 1, found(result)
    return result.diagnostics[0]


# -- discovery -------------------------------------------------------------------------------


def test_the_single_top_level_folder_with_a_config_is_the_root_and_loses_its_name(
    make_tree: TreeFactory,
) -> None:
    root = make_tree({"main/config.json": hive(), "main/worker/config.json": cell("code")})
    result = load(root)
    assert result.tree is not None
    assert set(result.tree.hives) == {"/"}
    assert set(result.tree.cells) == {"/worker"}
    assert result.tree.root_dir == root / "main"


def test_templates_staging_blobs_and_dot_folders_are_not_root_candidates(
    make_tree: TreeFactory,
) -> None:
    broken = {"cell": {"type": "no-such-type"}}
    root = make_tree(
        {
            "main/config.json": hive(),
            "templates/t/config.json": broken,
            ".staging/x/config.json": broken,
            "blobs/config.json": broken,
            ".hidden/config.json": broken,
        }
    )
    assert load(root).diagnostics == []


def test_a_root_without_any_node_folder_is_an_error(make_tree: TreeFactory) -> None:
    root = make_tree({"notes.txt": "hello", "empty/readme.md": "x"})
    d = only(load(root))
    assert (d.severity, d.code, d.file) == (Severity.ERROR, "no_root", None)


def test_two_top_level_node_folders_are_an_error_naming_both(make_tree: TreeFactory) -> None:
    root = make_tree({"a/config.json": hive(), "b/config.json": hive()})
    d = only(load(root))
    assert d.code == "multiple_roots"
    assert "a/, b/" in d.message


def test_nodes_are_found_at_any_depth_and_plain_folders_pass_through(
    make_tree: TreeFactory,
) -> None:
    root = make_tree(
        {
            "main/config.json": hive(),
            "main/group/inner/config.json": hive(),
            "main/group/inner/deep/leaf/config.json": cell("bash"),
            "main/worker/seed/data.jsonl": "{}",
            "main/worker/config.json": cell("store"),
        }
    )
    result = load(root)
    assert result.tree is not None
    assert set(result.tree.hives) == {"/", "/group/inner"}
    assert set(result.tree.cells) == {"/group/inner/deep/leaf", "/worker"}


def test_a_symlink_cycle_does_not_hang_the_loader(make_tree: TreeFactory) -> None:
    root = make_tree({"main/config.json": hive(), "main/a/config.json": cell("code")})
    os.symlink(root / "main", root / "main" / "a" / "loop")
    assert load(root).ok


# -- JSON and schema -------------------------------------------------------------------------


def test_invalid_json_is_reported_with_line_and_column(make_tree: TreeFactory) -> None:
    root = make_tree({"main/config.json": '{\n  "cell": {"type": "hive"},\n  oops\n}'})
    d = only(load(root))
    assert (d.code, d.file, d.line, d.column) == ("invalid_json", "main/config.json", 3, 3)


def test_a_config_that_is_not_an_object_is_an_error(make_tree: TreeFactory) -> None:
    root = make_tree({"main/config.json": "[1, 2]"})
    assert only(load(root)).code == "wrong_type"


def test_an_unknown_key_in_the_cell_block_is_refused_with_the_closest_valid_key(
    make_tree: TreeFactory,
) -> None:
    root = make_tree(
        {"main/config.json": hive(), "main/w/config.json": cell("code", mailbox_sise=3)}
    )
    d = only(load(root))
    assert (d.code, d.file, d.pointer) == ("unknown_key", "main/w/config.json", "cell.mailbox_sise")
    assert d.hint is not None
    assert d.hint.startswith("did you mean 'mailbox_size'?")
    assert d.line == 4


def test_unknown_top_level_keys_of_a_cell_are_kept_not_refused(make_tree: TreeFactory) -> None:
    doc = cell("code", {"anything": [1, {"goes": True}]})
    doc["description"] = "kept"
    doc["x-notes"] = {"a": 1}
    root = make_tree({"main/config.json": hive(), "main/w/config.json": doc})
    result = load(root)
    assert result.tree is not None
    config = result.tree.cells["/w"].config
    assert config.model_extra == {"description": "kept", "x-notes": {"a": 1}}
    assert config.params == {"anything": [1, {"goes": True}]}


@pytest.mark.parametrize(
    ("where", "doc", "pointer"),
    [
        ("hive params", {"cell": {"type": "hive"}, "params": {"grahp": {}}}, "params.grahp"),
        (
            "graph",
            {"cell": {"type": "hive"}, "params": {"graph": {"nodes": []}}},
            "params.graph.nodes",
        ),
        (
            "edge",
            hive({"from": "a", "to": "b", "conditon": "true"}),
            "params.graph.edges[0].conditon",
        ),
        (
            "modifier",
            hive({"from": "a", "to": "b", "modifier": {"set_contex": {}}}),
            "params.graph.edges[0].modifier.set_contex",
        ),
    ],
)
def test_unknown_keys_are_refused_wherever_meclaw_refuses_them(
    make_tree: TreeFactory, where: str, doc: dict[str, object], pointer: str
) -> None:
    root = make_tree(
        {
            "main/config.json": doc,
            "main/a/config.json": cell("code"),
            "main/b/config.json": cell("code"),
        }
    )
    d = only(load(root))
    assert (d.code, d.pointer) == ("unknown_key", pointer), where


def test_unknown_keys_in_a_contract_are_tolerated_as_meclaw_drops_them(
    make_tree: TreeFactory,
) -> None:
    doc = cell("code")
    doc["contract"] = {**CONTRACT, "capabilities": ["x"], "tools": []}
    root = make_tree({"main/config.json": hive(), "main/w/config.json": doc})
    assert load(root).diagnostics == []


@pytest.mark.parametrize(
    ("typo", "pointer"), [("parmas", "parmas"), ("contract.emit", "contract.emit")]
)
def test_a_key_that_looks_like_a_misspelt_known_key_is_a_warning(
    make_tree: TreeFactory, typo: str, pointer: str
) -> None:
    doc = cell("code")
    if typo.startswith("contract."):
        doc["contract"][typo.split(".")[1]] = {}
    else:
        doc[typo] = {}
    root = make_tree({"main/config.json": hive(), "main/w/config.json": doc})
    result = load(root)
    d = only(result)
    assert (d.severity, d.code, d.pointer) == (Severity.WARNING, "suspicious_key", pointer)
    assert result.ok


def test_a_value_of_the_wrong_type_names_the_expected_type(make_tree: TreeFactory) -> None:
    root = make_tree({"main/config.json": hive(), "main/w/config.json": cell("code", timeout="5")})
    d = only(load(root))
    assert (d.code, d.pointer, d.message) == (
        "wrong_type",
        "cell.timeout",
        "expected an integer, got a string",
    )


def test_a_missing_cell_type_is_an_error(make_tree: TreeFactory) -> None:
    root = make_tree(
        {"main/config.json": hive(), "main/w/config.json": {"cell": {}, "contract": CONTRACT}}
    )
    d = only(load(root))
    assert (d.code, d.pointer) == ("missing_key", "cell.type")


def test_an_unknown_cell_type_is_refused_listing_the_known_ones(make_tree: TreeFactory) -> None:
    root = make_tree({"main/config.json": hive(), "main/w/config.json": cell("webfetch")})
    d = only(load(root))
    assert (d.code, d.pointer) == ("unknown_cell_type", "cell.type")
    assert d.hint is not None
    assert "did you mean 'web_fetch'?" in d.hint
    known = "bash, code, edit, file, hive, llm, mcp, proxy, store, subcolony, timer, web_fetch, web_search"
    assert known in d.hint


def test_a_meclaw_type_this_daemon_lacks_is_named_as_such(make_tree: TreeFactory) -> None:
    root = make_tree({"main/config.json": hive(), "main/w/config.json": cell("vault")})
    assert "meclaw cell type this daemon does not implement" in only(load(root)).message


def test_every_later_cell_type_is_accepted_already(make_tree: TreeFactory) -> None:
    files: dict[str, object] = {"main/config.json": hive()}
    for name in BUILTIN_CELL_TYPES:
        files[f"main/{name}/config.json"] = cell(name)
    assert load(make_tree(files)).diagnostics == []


def test_a_template_reference_in_a_live_tree_is_an_error(make_tree: TreeFactory) -> None:
    root = make_tree(
        {
            "main/config.json": hive(),
            "main/a/config.json": cell("code", template="agent"),
            "main/b/config.json": cell("ref"),
        }
    )
    assert [(d.code, d.pointer) for d in load(root).diagnostics] == [
        ("template_reference", "cell.template"),
        ("template_reference", "cell.type"),
    ]


def test_mailbox_size_zero_is_an_error_with_a_fix(make_tree: TreeFactory) -> None:
    root = make_tree(
        {"main/config.json": hive(), "main/w/config.json": cell("code", mailbox_size=0)}
    )
    d = only(load(root))
    assert (d.code, d.pointer) == ("mailbox_size_zero", "cell.mailbox_size")
    assert d.hint is not None
    assert "mailbox_default_capacity" in d.hint


@pytest.mark.parametrize("part", ["version", "settings", "consumes"])
def test_each_missing_contract_part_of_a_cell_is_an_error(
    make_tree: TreeFactory, part: str
) -> None:
    doc = cell("code")
    del doc["contract"][part]
    root = make_tree({"main/config.json": hive(), "main/w/config.json": doc})
    d = only(load(root))
    assert (d.code, d.pointer) == ("contract_incomplete", f"contract.{part}")


def test_a_cell_without_a_contract_is_an_error_but_a_hive_needs_none(
    make_tree: TreeFactory,
) -> None:
    root = make_tree({"main/config.json": hive(), "main/w/config.json": {"cell": {"type": "code"}}})
    d = only(load(root))
    assert (d.code, d.file, d.pointer) == ("contract_incomplete", "main/w/config.json", "contract")


def test_an_empty_contract_version_is_an_error(make_tree: TreeFactory) -> None:
    doc = cell("code")
    doc["contract"]["version"] = ""
    root = make_tree({"main/config.json": hive(), "main/w/config.json": doc})
    assert only(load(root)).code == "contract_incomplete"


def test_a_bad_emits_type_token_is_an_error_naming_the_valid_ones(make_tree: TreeFactory) -> None:
    doc = cell("code")
    doc["contract"]["emits"] = {"hop": {"route": {"type": "strnig"}}}
    root = make_tree({"main/config.json": hive(), "main/w/config.json": doc})
    d = only(load(root))
    assert (d.code, d.pointer) == ("invalid_emits_type", "contract.emits.hop.route.type")
    assert "'strnig'" in d.message
    assert "string" in d.message


def test_an_ingress_may_only_mint_the_standard_context_keys(make_tree: TreeFactory) -> None:
    doc = cell("proxy")
    doc["contract"]["ingress"] = {"context": ["chat_id", "iter"]}
    root = make_tree({"main/config.json": hive(), "main/w/config.json": doc})
    d = only(load(root))
    assert (d.code, d.pointer) == ("invalid_ingress_key", "contract.ingress.context")


# -- colony.json -----------------------------------------------------------------------------


def test_an_absent_colony_json_means_every_default(make_tree: TreeFactory) -> None:
    result = load(make_tree({"main/config.json": hive()}))
    assert result.tree is not None
    assert result.tree.colony.message_default_ttl == 64
    assert result.tree.colony.mailbox_default_capacity == 1000
    assert result.tree.colony.ttl_notice is False


@pytest.mark.parametrize(
    ("colony", "code", "pointer"),
    [
        ({"schema_version": 2}, "schema_version_unsupported", "schema_version"),
        ({"message_default_tll": 9}, "unknown_key", "message_default_tll"),
        ({"watchdog_threshold": 0}, "out_of_range", "watchdog_threshold"),
        ({"watchdog_period_ms": 0}, "out_of_range", "watchdog_period_ms"),
        ({"watchdog_on_trip": "panic"}, "invalid_value", "watchdog_on_trip"),
        ({"message_default_ttl": -1}, "out_of_range", "message_default_ttl"),
        ({"ttl_notice": "yes"}, "wrong_type", "ttl_notice"),
        ({"log_default_level": "loud"}, "invalid_log_level", "log_default_level"),
    ],
)
def test_a_bad_colony_json_is_an_error(
    make_tree: TreeFactory, colony: dict[str, object], code: str, pointer: str
) -> None:
    root = make_tree({"colony.json": colony, "main/config.json": hive()})
    d = only(load(root))
    assert (d.code, d.file, d.pointer) == (code, "colony.json", pointer)


def test_a_colony_json_that_is_not_json_is_an_error(make_tree: TreeFactory) -> None:
    root = make_tree({"colony.json": "{ not valid json", "main/config.json": hive()})
    d = only(load(root))
    assert (d.code, d.file, d.line) == ("invalid_json", "colony.json", 1)


# -- edges -----------------------------------------------------------------------------------


def test_edge_endpoints_resolve_against_the_declaring_hive(make_tree: TreeFactory) -> None:
    root = make_tree(
        {
            "main/config.json": hive({"from": ".", "to": "./box"}, {"from": "box", "to": "/sink"}),
            "main/box/config.json": hive(
                {"from": ".", "to": "relay"},
                {"from": "./relay", "to": "../sink"},
                {"from": "relay", "to": "../../../sink"},
            ),
            "main/box/relay/config.json": cell("code"),
            "main/sink/config.json": cell("code"),
        }
    )
    result = load(root)
    assert result.tree is not None
    assert [(e.scope, e.index, e.from_path, e.to_path) for e in result.tree.edges] == [
        ("/", 0, "/", "/box"),
        ("/", 1, "/box", "/sink"),
        ("/box", 0, "/box", "/box/relay"),
        ("/box", 1, "/box/relay", "/sink"),
        ("/box", 2, "/box/relay", "/sink"),
    ]


def test_a_condition_that_does_not_parse_is_an_error_with_its_position(
    make_tree: TreeFactory,
) -> None:
    root = make_tree(
        {
            "main/config.json": hive({"from": ".", "to": "a", "condition": "hop.route == 'x' &&"}),
            "main/a/config.json": cell("code"),
        }
    )
    d = only(load(root))
    assert (d.code, d.file, d.pointer) == (
        "condition_syntax",
        "main/config.json",
        "params.graph.edges[0].condition",
    )
    assert "column" in d.message
    assert d.related[0] == "hop.route == 'x' &&"
    assert d.related[1].strip() == "^"


def test_a_modifier_expression_that_does_not_parse_is_an_error_naming_its_key(
    make_tree: TreeFactory,
) -> None:
    edge = {"from": ".", "to": "a", "modifier": {"set_context": {"iter": "int(context.iter) +"}}}
    root = make_tree({"main/config.json": hive(edge), "main/a/config.json": cell("code")})
    d = only(load(root))
    assert (d.code, d.pointer) == (
        "modifier_syntax",
        "params.graph.edges[0].modifier.set_context.iter",
    )


def test_restore_ttl_without_a_condition_is_an_error(make_tree: TreeFactory) -> None:
    edge = {"from": ".", "to": "a", "modifier": {"restore_ttl": True}}
    root = make_tree({"main/config.json": hive(edge), "main/a/config.json": cell("code")})
    d = only(load(root))
    assert (d.code, d.pointer) == (
        "restore_ttl_unconditional",
        "params.graph.edges[0].modifier.restore_ttl",
    )


def test_a_non_boolean_restore_ttl_is_an_error(make_tree: TreeFactory) -> None:
    edge = {"from": ".", "to": "a", "condition": "true", "modifier": {"restore_ttl": "yes"}}
    root = make_tree({"main/config.json": hive(edge), "main/a/config.json": cell("code")})
    assert only(load(root)).code == "wrong_type"


def test_an_endpoint_that_resolves_to_nothing_is_a_warning_not_an_error(
    make_tree: TreeFactory,
) -> None:
    root = make_tree({"main/config.json": hive({"from": ".", "to": "/sink"})})
    result = load(root)
    d = only(result)
    assert (d.severity, d.code, d.pointer) == (
        Severity.WARNING,
        "dangling_endpoint",
        "params.graph.edges[0].to",
    )
    assert result.ok


def test_a_dangling_endpoint_suggests_the_closest_existing_path(make_tree: TreeFactory) -> None:
    root = make_tree(
        {
            "main/config.json": hive({"from": ".", "to": "./colector"}),
            "main/collector/config.json": cell("code"),
        }
    )
    d = only(load(root))
    assert d.hint is not None
    assert d.hint.startswith("did you mean /collector?")


def test_colony_endpoints_resolve_but_unknown_ones_warn(make_tree: TreeFactory) -> None:
    root = make_tree(
        {
            "main/config.json": hive(
                {"from": ".", "to": "/colony/mutations"},
                {"from": ".", "to": "/colony/dead_letters"},
                {"from": ".", "to": "/colony"},
            )
        }
    )
    assert [(d.severity.value, d.code) for d in load(root).diagnostics] == [
        ("warning", "colony_endpoint_unknown"),
        ("warning", "colony_endpoint_invalid"),
    ]


def test_an_expression_that_does_not_type_check_is_a_warning(make_tree: TreeFactory) -> None:
    from colony.expressions import make_engine

    root = make_tree(
        {
            "main/config.json": hive({"from": ".", "to": "a", "condition": "hopp.x == 1"}),
            "main/a/config.json": cell("code"),
        }
    )
    result = load(root, engine=make_engine("cel-expr-python"))
    d = only(result)
    assert (d.severity, d.code) == (Severity.WARNING, "expression_type")
    assert result.ok


# -- substitution ----------------------------------------------------------------------------


def test_a_missing_variable_is_an_error_naming_the_key_and_never_the_values(
    make_tree: TreeFactory,
) -> None:
    root = make_tree(
        {
            ".env": "PRESENT=hunter2\n",
            "main/config.json": hive(),
            "main/w/config.json": cell("llm", {"api_key": "${MISSING}", "other": "${PRESENT}"}),
        }
    )
    result = load(root)
    d = only(result)
    assert (d.code, d.pointer) == ("env_var_missing", "params.api_key")
    assert "hunter2" not in repr(result.diagnostics)


def test_substituted_values_reach_the_loaded_config(make_tree: TreeFactory) -> None:
    root = make_tree(
        {
            ".env": "MODEL=small\n",
            "main/config.json": hive(),
            "main/w/config.json": cell(
                "llm", {"model": "${MODEL}", "url": "${URL:-http://127.0.0.1:9}"}
            ),
        }
    )
    result = load(root)
    assert result.tree is not None
    assert result.tree.cells["/w"].config.params == {"model": "small", "url": "http://127.0.0.1:9"}


def test_the_env_flag_points_at_another_file(make_tree: TreeFactory, tmp_path: Path) -> None:
    other = tmp_path / "elsewhere.env"
    other.write_text("KEY=from-flag\n")
    root = make_tree(
        {"main/config.json": hive(), "main/w/config.json": cell("llm", {"k": "${KEY}"})}
    )
    assert not load(root).ok
    result = load(root, env_file=other)
    assert result.tree is not None
    assert result.tree.cells["/w"].config.params == {"k": "from-flag"}


def test_a_broken_env_file_is_an_error_naming_its_line(make_tree: TreeFactory) -> None:
    root = make_tree({".env": "A=1\nBROKEN\n", "main/config.json": hive()})
    d = only(load(root))
    assert (d.code, d.file, d.line) == ("env_file_invalid", ".env", 2)


def test_a_substituted_value_of_the_wrong_kind_is_reported_without_echoing_it(
    make_tree: TreeFactory,
) -> None:
    root = make_tree(
        {".env": "T=s3cr3t-type\n", "main/config.json": hive(), "main/w/config.json": cell("${T}")}
    )
    result = load(root)
    d = only(result)
    assert d.code == "unknown_cell_type"
    assert "s3cr3t" not in repr(result.diagnostics)


# -- whole trees -----------------------------------------------------------------------------


def test_three_independent_mistakes_are_all_reported() -> None:
    result = load(FIXTURES / "trees" / "three-mistakes")
    assert found(result) == [
        ("error", "unknown_key", "main/config.json", "params.graph.edges[0].conditon"),
        ("error", "unknown_cell_type", "main/a/config.json", "cell.type"),
        ("error", "mailbox_size_zero", "main/b/config.json", "cell.mailbox_size"),
    ]
    assert result.tree is None


def test_the_nested_fixture_in_meclaws_format_loads_cleanly() -> None:
    result = load(FIXTURES / "trees" / "nested")
    assert result.diagnostics == []
    tree = result.tree
    assert tree is not None
    assert tree.colony.message_default_ttl == 48
    assert set(tree.hives) == {"/", "/tools", "/tools/deep"}
    assert tree.cells["/planner"].config.params["model"] == "tiny-test-model"
    assert tree.cells["/prep"].config.params["note"] == "literal ${NOT_A_VAR} stays literal"
    assert len(tree.edges) == 11
    restoring = [e for e in tree.edges if e.modifier is not None and e.modifier.restore_ttl]
    assert [(e.from_path, e.to_path) for e in restoring] == [("/tools", "/planner")]
