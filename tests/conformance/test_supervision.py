"""Supervision across restarts: restart_max_retries, a failed cell stays failed, revive."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from colony.config.loader import cluster_of
from colony.operations import revive_offline
from colony.persist.records import read_registry
from colony.persist.source import source_for_root
from colony.testing import ColonyHarness
from tests.conformance.cells import CALLS, TEST_TYPES, user
from tests.conftest import TreeFactory, cell, hive


def harness(root: Path, **kwargs: Any) -> ColonyHarness:
    return ColonyHarness(root, cell_types=TEST_TYPES, capture=["/sink"], **kwargs)


def crashing(**cell_keys: Any) -> dict[str, Any]:
    return {
        "main/config.json": hive(
            {"from": ".", "to": "./a"},
            {"from": "./a", "to": "/sink"},
            {"from": "./b", "to": "/sink"},
        ),
        "main/a/config.json": cell("stateful_echo", {"crash_on": "boom"}, **cell_keys),
        "main/b/config.json": cell("stateful_echo", {"crash_on": "boom"}, restart_limit=3),
    }


def status(root: Path, path: str) -> str:
    """The registry's status of ``path``, in the colony's database (colony.db or, under
    ``pytest --backend postgres``, the cluster's)."""
    cluster = cluster_of(root)
    source = source_for_root(root, None if cluster is None else cluster.dsn)
    return read_registry(source)[path].status


async def test_colony_json_restart_max_retries_is_the_restart_limit_of_cells_that_set_none(
    make_tree: TreeFactory,
) -> None:
    async with harness(make_tree(crashing()), colony={"restart_max_retries": 1}) as colony:
        for path in ("/a", "/b"):
            await colony.send(path, user("boom"))
            await colony.send(path, user("boom"))
        await colony.settle()
        assert colony.colony.runners["/a"].state.value == "failed"  # 1 restart allowed
        assert colony.colony.runners["/b"].state.value != "failed"  # its own limit: 3
        [failed] = colony.logs("cell_failed", "error")
        assert (failed["cell"], failed["limit"]) == ("/a", 1)


@pytest.mark.sqlite_only  # the offline revive edits colony.db under the root lease
async def test_a_failed_cell_stays_failed_across_a_restart_until_an_operator_revives_it(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    root, workdir = make_tree(crashing(restart_limit=0)), tmp_path / "run"
    async with harness(root, workdir=workdir) as colony:
        await colony.send("/a", user("boom"))
        await colony.settle()
        assert status(colony.root, "/a") == "failed"
    CALLS.clear()
    async with harness(root, workdir=workdir) as colony:
        runner = colony.colony.runners["/a"]
        assert (runner.state.value, runner.active) == ("failed", False)
        await colony.send("/a", user("after the restart"))
        await colony.settle()
        assert "/a" not in CALLS  # wired, never spawned
        letters = await colony.dead_letters("cell_inactive")
        assert [d.resolved_target for d in letters] == ["/a"]
        assert status(colony.root, "/a") == "failed"
    assert revive_offline(workdir / "colony", "/a").revived
    async with harness(root, workdir=workdir) as colony:
        await colony.send("/a", user("revived"))
        await colony.settle()
        assert [m.body["messages"][-1]["text"] for m in colony.captured("/sink")] == ["revived"]
        assert status(colony.root, "/a") == "active"


async def test_reviving_a_failed_cell_in_a_running_colony_starts_it_with_a_fresh_count(
    make_tree: TreeFactory,
) -> None:
    async with harness(make_tree(crashing(restart_limit=0))) as colony:
        await colony.send("/a", user("boom"))
        await colony.settle()
        runner = colony.colony.runners["/a"]
        assert runner.state.value == "failed"
        assert await runner.revive() is True
        assert await runner.revive() is False  # not failed any more: nothing to do
        await colony.send("/a", user("back"))
        await colony.settle()
        assert [m.body["messages"][-1]["text"] for m in colony.captured("/sink")] == ["back"]
        assert (runner.restarts, runner.active) == (0, True)
        assert status(colony.root, "/a") == "active"
        assert colony.logs("cell_revived", "warning")
