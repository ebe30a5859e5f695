"""Required headers no route brings are refused at load, as meclaw refuses them at boot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cells import BUILTIN_CELL_TYPES
from colony.cli import app
from colony.config.diagnostics import Severity
from colony.config.loader import LoadResult, load_tree
from colony.errors import ConfigError
from colony.testing import ColonyHarness
from tests.conftest import CONTRACT, TreeFactory, cell, hive


def load(root: Path) -> LoadResult:
    return load_tree(root, cell_types=BUILTIN_CELL_TYPES, environ={})


def needing(
    context: dict[str, Any] | None = None,
    hop: dict[str, Any] | None = None,
    **contract: Any,
) -> dict[str, Any]:
    """A bash cell whose contract requires these context / hop keys."""
    doc = cell("bash")
    consumes: dict[str, Any] = {}
    if context:
        consumes["context"] = {k: {"type": "string", **v} for k, v in context.items()}
    if hop:
        consumes["hop"] = {k: {"type": "string", **v} for k, v in hop.items()}
    doc["contract"] = {**CONTRACT, "consumes": consumes, **contract}
    return doc


def findings(result: LoadResult) -> list[tuple[str, str | None, str]]:
    return [(d.code, d.file, d.pointer) for d in result.diagnostics]


# -- context ---------------------------------------------------------------------------------


def test_a_required_context_key_no_route_sets_is_an_error_naming_file_key_route_and_fix(
    make_tree: TreeFactory,
) -> None:
    root = make_tree(
        {
            "main/config.json": hive({"from": "./entry", "to": "./worker"}),
            "main/entry/config.json": cell("bash"),
            "main/worker/config.json": needing({"thread": {}}),
        }
    )
    result = load(root)
    assert result.tree is None
    [d] = result.diagnostics
    assert (d.severity, d.code, d.file, d.pointer) == (
        Severity.ERROR,
        "context_unreachable",
        "main/worker/config.json",
        "contract.consumes.context.thread",
    )
    assert d.line is not None
    assert "'thread'" in d.message
    assert "/entry → /worker" in d.message  # the route that lacks it
    assert d.hint is not None
    assert '"set_context": {"thread"' in d.hint
    assert "ingress" not in d.hint  # not a standard key: an ingress cannot mint it


def test_a_set_context_on_any_route_into_the_cell_provides_the_key(
    make_tree: TreeFactory,
) -> None:
    root = make_tree(
        {
            "main/config.json": hive(
                {"from": "./entry", "to": "./middle", "modifier": {"set_context": {"t": "'1'"}}},
                {"from": "./middle", "to": "./worker"},
                {"from": "./other", "to": "./worker"},  # lacks it: presence on some path is enough
            ),
            "main/entry/config.json": cell("bash"),
            "main/middle/config.json": cell("bash"),
            "main/other/config.json": cell("bash"),
            "main/worker/config.json": needing({"t": {}}),
        }
    )
    assert load(root).diagnostics == []


def test_an_ingress_declaration_provides_a_standard_key_to_the_cell_and_downstream(
    make_tree: TreeFactory,
) -> None:
    root = make_tree(
        {
            "main/config.json": hive({"from": "./capture", "to": "./worker"}),
            "main/capture/config.json": needing({"turn_id": {}}, ingress={"context": ["turn_id"]}),
            "main/worker/config.json": needing({"turn_id": {}}),
        }
    )
    assert load(root).diagnostics == []


def test_context_sent_from_outside_does_not_provide_a_required_key(
    make_tree: TreeFactory,
) -> None:
    # Any path can be posted to, so what a sender may put on a message proves nothing: the
    # cell where messages enter says which standard keys they carry (contract.ingress).
    root = make_tree(
        {
            "main/config.json": hive({"from": "./capture", "to": "./worker"}),
            "main/capture/config.json": needing({"turn_id": {}}),
            "main/worker/config.json": cell("bash"),
        }
    )
    [d] = load(root).diagnostics
    assert (d.code, d.file) == ("context_unreachable", "main/capture/config.json")
    assert "no edge leads to this cell" in d.message
    assert d.hint is not None
    assert '"ingress": {"context": ["turn_id"]}' in d.hint


def test_a_delete_context_on_the_only_route_severs_the_key(make_tree: TreeFactory) -> None:
    root = make_tree(
        {
            "main/config.json": hive(
                {"from": "./a", "to": "./b", "modifier": {"set_context": {"t": "'1'"}}},
                {"from": "./b", "to": "./worker", "modifier": {"delete_context": ["t"]}},
            ),
            "main/a/config.json": cell("bash"),
            "main/b/config.json": cell("bash"),
            "main/worker/config.json": needing({"t": {}}),
        }
    )
    [d] = load(root).diagnostics
    assert d.code == "context_unreachable"
    assert "deletes it" in d.message


def test_a_key_that_is_not_required_and_an_inactive_cell_are_not_judged(
    make_tree: TreeFactory,
) -> None:
    # /group/idle sits in a hive the edges reach but is no edge's end: inactive (it takes
    # no messages), so its contract binds nothing, as in meclaw.
    root = make_tree(
        {
            "main/config.json": hive({"from": "./a", "to": "./group/optional"}),
            "main/a/config.json": cell("bash"),
            "main/group/config.json": hive(),
            "main/group/optional/config.json": needing({"t": {"required": False}}),
            "main/group/idle/config.json": needing({"t": {}}),
        }
    )
    assert load(root).diagnostics == []


def test_a_cell_no_edge_touches_is_active_and_judged(make_tree: TreeFactory) -> None:
    root = make_tree({"main/config.json": hive(), "main/alone/config.json": needing({"t": {}})})
    assert [d.code for d in load(root).diagnostics] == ["context_unreachable"]


def test_a_header_finding_waits_until_the_tree_loads_whole(make_tree: TreeFactory) -> None:
    root = make_tree(
        {
            "main/config.json": hive({"from": "./broken", "to": "./worker"}),
            "main/broken/config.json": '{"cell": ',
            "main/worker/config.json": needing({"t": {}}),
        }
    )
    assert [d.code for d in load(root).diagnostics] == ["invalid_json"]


# -- hop -------------------------------------------------------------------------------------


def test_every_edge_into_a_cell_must_bring_a_required_hop_key(make_tree: TreeFactory) -> None:
    emitting = cell("bash")
    emitting["contract"] = {**CONTRACT, "emits": {"hop": {"op": {"type": "string"}}}}
    root = make_tree(
        {
            "main/config.json": hive(
                {"from": "./emits", "to": "./worker"},
                {"from": "./sets", "to": "./worker", "modifier": {"set_hop": {"op": "'x'"}}},
                {"from": "./silent", "to": "./worker"},
            ),
            "main/emits/config.json": emitting,
            "main/sets/config.json": cell("bash"),
            "main/silent/config.json": cell("bash"),
            "main/worker/config.json": needing(hop={"op": {}}),
        }
    )
    [d] = load(root).diagnostics
    assert (d.code, d.file, d.pointer) == (
        "hop_unreachable",
        "main/worker/config.json",
        "contract.consumes.hop.op",
    )
    assert "/silent → /worker" in d.message
    assert "/emits" not in d.message


def test_a_hive_passes_a_hop_key_through_and_the_root_hive_provides_vacuously(
    make_tree: TreeFactory,
) -> None:
    root = make_tree(
        {
            "main/config.json": hive(
                {"from": ".", "to": "./group", "modifier": {"set_hop": {"op": "'x'"}}},
                {"from": ".", "to": "./direct"},
            ),
            "main/group/config.json": hive({"from": ".", "to": "./worker"}),
            "main/group/worker/config.json": needing(hop={"op": {}}),
            "main/direct/config.json": needing(hop={"op": {}}),
        }
    )
    assert load(root).diagnostics == []


def test_a_required_hop_key_with_no_edge_into_the_cell_is_an_error(
    make_tree: TreeFactory,
) -> None:
    root = make_tree(
        {
            "main/config.json": hive({"from": "./worker", "to": "./next"}),
            "main/worker/config.json": needing(hop={"op": {}}),
            "main/next/config.json": cell("bash"),
        }
    )
    [d] = load(root).diagnostics
    assert d.code == "hop_unreachable"
    assert "no edge leads to this cell" in d.message


# -- validate and boot agree ----------------------------------------------------------------


def unreachable_tree() -> dict[str, Any]:
    return {
        "main/config.json": hive({"from": "./entry", "to": "./worker"}),
        "main/entry/config.json": cell("bash"),
        "main/worker/config.json": needing({"thread": {}}),
    }


def test_validate_exits_1_on_an_unreachable_context_key(make_tree: TreeFactory) -> None:
    result = CliRunner().invoke(app, ["--root", str(make_tree(unreachable_tree())), "--validate"])
    assert result.exit_code == 1
    assert "error[context_unreachable] at contract.consumes.context.thread" in result.stderr


async def test_the_boot_refuses_an_unreachable_context_key(make_tree: TreeFactory) -> None:
    with pytest.raises(ConfigError, match="context_unreachable"):
        async with ColonyHarness(make_tree(unreachable_tree())):
            pass
