"""``colony.json`` ``cluster``: several daemons on one colony, checked before anyone connects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cells import BUILTIN_CELL_TYPES
from colony.config.diagnostics import Diagnostic
from colony.config.loader import LoadResult, load_tree
from colony.config.models import ClusterConfig
from tests.conftest import TreeFactory, hive

DSN = "postgresql://meclaw@127.0.0.1:5432/colony"


def load(root: Path, environ: dict[str, str] | None = None) -> LoadResult:
    return load_tree(root, cell_types=BUILTIN_CELL_TYPES, environ=environ or {})


def tree(make_tree: TreeFactory, colony: Any, **files: Any) -> Path:
    return make_tree({"colony.json": colony, "main/config.json": hive(), **files})


def only(result: LoadResult) -> Diagnostic:
    assert len(result.diagnostics) == 1, [(d.code, d.pointer) for d in result.diagnostics]
    return result.diagnostics[0]


def test_without_a_cluster_block_the_colony_runs_alone(make_tree: TreeFactory) -> None:
    result = load(tree(make_tree, {"schema_version": 1}))
    assert result.tree is not None
    assert result.tree.colony.cluster is None


def test_a_cluster_block_with_only_a_dsn_takes_every_default(make_tree: TreeFactory) -> None:
    result = load(tree(make_tree, {"cluster": {"dsn": DSN}}))
    assert result.tree is not None
    assert result.tree.colony.cluster == ClusterConfig(
        dsn=DSN, partitions=16, lease_ms=10_000, partition_by="trace_id"
    )


def test_every_key_of_the_block_is_read(make_tree: TreeFactory) -> None:
    block = {"dsn": DSN, "partitions": 64, "lease_ms": 2500, "partition_by": "context.chat_id"}
    result = load(tree(make_tree, {"cluster": block}))
    assert result.tree is not None
    assert result.tree.colony.cluster == ClusterConfig(**block)


def test_the_dsn_comes_from_the_environment_or_the_env_file(make_tree: TreeFactory) -> None:
    root = tree(
        make_tree, {"cluster": {"dsn": "${COLONY_PG_DSN}"}}, **{".env": f"COLONY_PG_DSN={DSN}\n"}
    )
    from_file = load(root).tree
    assert from_file is not None
    assert from_file.colony.cluster is not None
    assert from_file.colony.cluster.dsn == DSN
    exported = load(root, {"COLONY_PG_DSN": "host=10.0.0.9 dbname=colony"}).tree
    assert exported is not None
    assert exported.colony.cluster is not None
    assert exported.colony.cluster.dsn == "host=10.0.0.9 dbname=colony"


def test_an_unset_dsn_variable_is_the_one_error_and_names_the_variable(
    make_tree: TreeFactory,
) -> None:
    d = only(load(tree(make_tree, {"cluster": {"dsn": "${COLONY_PG_DSN}"}})))
    assert (d.code, d.file, d.pointer) == ("env_var_missing", "colony.json", "cluster.dsn")
    assert "${COLONY_PG_DSN}" in d.message
    assert d.hint is not None
    assert "${COLONY_PG_DSN:-default}" in d.hint


def test_a_dsn_variable_set_empty_is_an_empty_dsn(make_tree: TreeFactory) -> None:
    root = tree(make_tree, {"cluster": {"dsn": "${COLONY_PG_DSN}"}}, **{".env": "COLONY_PG_DSN=\n"})
    d = only(load(root))
    assert (d.code, d.pointer) == ("cluster_dsn_empty", "cluster.dsn")
    assert d.hint is not None
    assert "${...} variable" in d.hint


def test_a_bad_substituted_dsn_is_explained_without_showing_it(make_tree: TreeFactory) -> None:
    root = tree(make_tree, {"cluster": {"dsn": "${COLONY_PG_DSN}"}})
    result = load(root, {"COLONY_PG_DSN": "mysql://meclaw:hunter2@db/colony"})
    d = only(result)
    assert (d.code, d.pointer) == ("cluster_dsn_invalid", "cluster.dsn")
    assert "scheme is not postgresql://" in d.message
    assert "hunter2" not in repr(result.diagnostics)


def test_a_dsn_written_in_the_file_is_not_shown_either(make_tree: TreeFactory) -> None:
    result = load(tree(make_tree, {"cluster": {"dsn": "postgresql://u:hunter2 x@db/c"}}))
    d = only(result)
    assert (d.code, d.pointer) == ("cluster_dsn_invalid", "cluster.dsn")
    assert "hunter2" not in repr(result.diagnostics)


def test_only_the_cluster_block_of_colony_json_is_substituted(make_tree: TreeFactory) -> None:
    # meclaw substitutes nothing in colony.json; its own keys stay as written.
    d = only(load(tree(make_tree, {"log_default_level": "${LEVEL}"}), {"LEVEL": "debug"}))
    assert (d.code, d.pointer) == ("invalid_log_level", "log_default_level")


@pytest.mark.parametrize(
    ("block", "code", "pointer", "fix"),
    [
        ({}, "missing_key", "cluster.dsn", '"dsn": "${COLONY_PG_DSN}"'),
        ({"dsn": ""}, "cluster_dsn_empty", "cluster.dsn", "COLONY_PG_DSN=postgresql://"),
        ({"dsn": "  "}, "cluster_dsn_empty", "cluster.dsn", "COLONY_PG_DSN=postgresql://"),
        ({"dsn": 5432}, "wrong_type", "cluster.dsn", "as a string"),
        ({"dsn": "mysql://h/db"}, "cluster_dsn_invalid", "cluster.dsn", "postgresql://user@host"),
        ({"dsn": "host=h database=c"}, "cluster_dsn_invalid", "cluster.dsn", "'dbname'"),
        ({"dsn": DSN, "partitions": 0}, "out_of_range", "cluster.partitions", "at least 1"),
        ({"dsn": DSN, "partitions": 4097}, "out_of_range", "cluster.partitions", "at most 4096"),
        ({"dsn": DSN, "partitions": "16"}, "wrong_type", "cluster.partitions", "an integer"),
        ({"dsn": DSN, "lease_ms": 999}, "out_of_range", "cluster.lease_ms", "at least 1000"),
        ({"dsn": DSN, "lease_ms": 3_600_001}, "out_of_range", "cluster.lease_ms", "at most"),
        (
            {"dsn": DSN, "partition_by": "hop.chat_id"},
            "cluster_partition_by_invalid",
            "cluster.partition_by",
            "context.chat_id",
        ),
        (
            {"dsn": DSN, "partition_by": "context..chat_id"},
            "cluster_partition_by_invalid",
            "cluster.partition_by",
            "context.<key>",
        ),
        ({"dsn": DSN, "partitons": 8}, "unknown_key", "cluster.partitons", "'partitions'"),
        ({"dsn": DSN, "node": "a"}, "unknown_key", "cluster.node", "meclaw --node NAME"),
    ],
)
def test_a_bad_cluster_block_names_the_key_what_is_wrong_and_the_fix(
    make_tree: TreeFactory, block: dict[str, Any], code: str, pointer: str, fix: str
) -> None:
    d = only(load(tree(make_tree, {"cluster": block})))
    assert (d.code, d.file, d.pointer) == (code, "colony.json", pointer)
    assert d.line is not None
    assert d.hint is not None
    assert fix in d.hint


def test_a_cluster_block_that_is_not_an_object_is_refused(make_tree: TreeFactory) -> None:
    d = only(load(tree(make_tree, {"cluster": DSN})))
    assert (d.code, d.pointer) == ("wrong_type", "cluster")


def test_a_null_cluster_block_is_no_cluster(make_tree: TreeFactory) -> None:
    result = load(tree(make_tree, {"cluster": None}))
    assert result.tree is not None
    assert result.tree.colony.cluster is None


def test_the_dsn_never_shows_in_the_configs_repr() -> None:
    config = ClusterConfig(dsn="postgresql://meclaw:hunter2@db/colony")
    assert "hunter2" not in repr(config)
    assert "hunter2" not in str(config)


def test_a_cluster_with_at_most_once_delivery_is_refused(make_tree: TreeFactory) -> None:
    root = tree(
        make_tree,
        {"cluster": {"dsn": "postgresql://db.example/colony"}, "delivery": "at_most_once"},
    )
    found = only(load(root))
    assert found.code == "cluster_needs_journal"
    assert "at_least_once" in found.message
