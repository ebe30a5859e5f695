"""``GET /health`` and ``GET /ready`` through a real colony's API: ok while all is well,
failing (503) with the reason once the storage is lost, not ready while stopping."""

from __future__ import annotations

import os

import httpx
import pytest

from colony.api import build_app, serve, stopping
from colony.testing import ColonyHarness
from tests.api_client import served
from tests.conformance.cells import TEST_TYPES
from tests.conftest import TreeFactory, cell, hive
from tests.processes import eventually


async def test_a_colony_without_io_tasks_is_healthy_and_ready(make_tree: TreeFactory) -> None:
    async with (
        ColonyHarness(make_tree({"main/config.json": hive()})) as colony,
        served(colony) as api,
    ):
        health = await api.client.get("/health")
        doc = health.json()
        assert (health.status_code, doc["status"], doc["reasons"]) == (200, "ok", [])
        assert doc["io_liveness"] is None  # no cell talks to the outside
        assert doc["storage"] == {"writer_alive": True, "unavailable": None, "kept": 0}
        assert doc["journal"]["in_flight"] == 0
        ready = await api.client.get("/ready")
        assert (ready.status_code, ready.json()) == (200, {"ready": True, "reason": None})


@pytest.mark.sqlite_only  # deletes colony.db
async def test_a_deleted_colony_db_makes_health_failing_and_the_colony_not_ready(
    make_tree: TreeFactory,
) -> None:
    async with (
        ColonyHarness(make_tree({"main/config.json": hive()})) as colony,
        served(colony) as api,
    ):
        os.unlink(colony.root / "colony.db")
        db = colony.colony.db
        assert await eventually(lambda: db.lost is not None, within=10)  # looked at each second
        health = await api.client.get("/health")
        doc = health.json()
        assert (health.status_code, doc["status"]) == (503, "failing")
        [reason] = doc["reasons"]
        assert reason.startswith("storage: ")
        assert "was deleted" in reason
        ready = await api.client.get("/ready")
        assert ready.status_code == 503
        assert "was deleted" in ready.json()["reason"]


async def test_a_cell_failed_past_its_restart_limit_degrades_the_colony(
    make_tree: TreeFactory,
) -> None:
    tree = {
        "main/config.json": hive({"from": ".", "to": "./a"}),
        "main/a/config.json": cell("stateful_echo", {"crash_on": "boom"}, restart_limit=0),
    }
    async with (
        ColonyHarness(make_tree(tree), cell_types=TEST_TYPES) as colony,
        served(colony) as api,
    ):
        await colony.send("/a", {"messages": [{"origin": "user", "type": "text", "text": "boom"}]})
        await colony.settle()
        doc = (await api.client.get("/health")).json()
        assert (doc["status"], doc["failed_cells"]) == ("degraded", ["/a"])
        assert "meclaw cells revive /a" in doc["reasons"][0]


async def test_a_stopping_server_answers_ready_503(make_tree: TreeFactory) -> None:
    async with (
        ColonyHarness(make_tree({"main/config.json": hive()})) as colony,
        served(colony) as api,
    ):
        assert (await api.client.get("/ready")).status_code == 200
        stopping(api.app)  # what the daemon does first when told to stop (colony.daemon)
        ready = await api.client.get("/ready")
        assert (ready.status_code, ready.json()["reason"]) == (503, "the daemon is stopping")


async def test_health_and_ready_need_no_token(make_tree: TreeFactory) -> None:
    async with ColonyHarness(make_tree({"main/config.json": hive()})) as colony:
        runner = await serve(build_app(colony.colony, token="s3cret"), "127.0.0.1", 0)
        try:
            port = runner.addresses[0][1]
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{port}", trust_env=False
            ) as client:
                assert (await client.get("/health")).status_code == 200
                assert (await client.get("/ready")).status_code == 200
        finally:
            await runner.cleanup()
