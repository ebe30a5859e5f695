"""The daemon prunes its record in the background: soon after boot, in bounded batches through
its writer, while routing carries on (issue 20: 100,000 old message-log rows)."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from colony import retention
from colony.config.models import RetentionConfig
from colony.ids import now_ms
from colony.persist import prune
from colony.testing import ColonyHarness

BODY = {"messages": [{"origin": "user", "type": "text", "text": "ping"}]}
OLD_ROWS = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
INSERT INTO message_log_indexed(seq, id, trace_id, ttl, from_path, to_path, headers,
    body_kind, body_payload, created_at, at_ms)
SELECT i, 'old-' || i, 'trace-' || (i / 2), 5, '/', '/sink', '{"context":{},"hop":{}}',
    'inline', ?, ? / 1000, ? FROM n
"""


def _tree(root: Path) -> Path:
    hive = {
        "cell": {"type": "hive"},
        "params": {"graph": {"edges": [{"from": ".", "to": "/sink"}]}},
    }
    (root / "main").mkdir(parents=True)
    (root / "main" / "config.json").write_text(json.dumps(hive))
    return root


async def _old_rows(colony: ColonyHarness, count: int, days: int = 30) -> None:
    at = now_ms() - days * prune.DAY_MS
    body = json.dumps(BODY)

    def insert(conn: Any) -> None:
        conn.execute(OLD_ROWS, (count, body, at, at))

    await colony.colony.db.execute(insert)
    await colony.colony.db.flush()


def _count(colony: ColonyHarness, where: str = "1") -> int:
    return int(
        colony.colony.db.source.select(f"SELECT count(*) FROM message_log WHERE {where}")[0][0]
    )


@pytest.mark.sqlite_only  # old rows written in SQLite SQL; pruning on PostgreSQL: tests/colony/persist/test_prune.py
async def test_the_daemon_prunes_soon_after_boot_and_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retention, "FIRST_S", 0.3)
    async with ColonyHarness(
        _tree(tmp_path / "tree"), capture=["/sink"], log_level="info"
    ) as colony:
        await _old_rows(colony, 5)
        await colony.send("/", BODY)
        await colony.settle()
        async with asyncio.timeout(20):
            while not colony.logs("pruned"):  # noqa: ASYNC110 (log lines have no event)
                await asyncio.sleep(0.05)
        [line] = colony.logs("pruned")
        assert line["message_log"] == 5
        assert line["dead_letters"] == 0
        assert _count(colony, "id LIKE 'old-%'") == 0
        assert _count(colony) == 2  # the message routed since boot: root transit and delivery


async def test_a_colony_that_keeps_everything_runs_no_pruner(tmp_path: Path) -> None:
    keep = {"retention": {"message_log_days": 0, "message_log_max_mb": 0, "dead_letters_days": 0}}
    async with ColonyHarness(_tree(tmp_path / "tree"), capture=["/sink"], colony=keep):
        names = {task.get_name() for task in asyncio.all_tasks()}
        assert "pruner" not in names


@pytest.mark.sqlite_only  # old rows written in SQLite SQL; pruning on PostgreSQL: tests/colony/persist/test_prune.py
async def test_a_hundred_thousand_old_rows_are_pruned_in_bounded_batches_while_routing_continues(
    tmp_path: Path,
) -> None:
    async with ColonyHarness(
        _tree(tmp_path / "tree"), capture=["/sink"], log_level="info"
    ) as colony:
        await _old_rows(colony, 100_000)
        await colony.send("/", BODY)  # the newest row is kept whatever its age: a new one
        await colony.settle()
        db = colony.colony.db
        sizes: list[int] = []
        routed_between: list[int] = []
        delete = retention.through_writer(db)

        async def recorded(target: prune.Prunable, keys: list[Any]) -> int:
            sizes.append(len(keys))
            routed_between.append(len(colony.captured("/sink")))
            return await delete(target, keys)

        pruning = asyncio.create_task(
            retention.prune_round(db.source, retention.policy_of(RetentionConfig()), recorded)
        )
        sent = 1
        while not pruning.done():
            await colony.send("/", BODY)
            sent += 1
            while len(colony.captured("/sink")) < sent:  # noqa: ASYNC110
                await asyncio.sleep(0.001)
        counts, batches = await pruning
        await colony.settle()

        assert counts["message_log"] == 100_000
        assert max(sizes) <= retention.BATCH
        assert batches == -(-100_000 // retention.BATCH)  # rounded up
        # routing kept going: messages were delivered between batches, not after the round
        progressed = sum(1 for a, b in itertools.pairwise(routed_between) if b > a)
        assert progressed >= batches // 4, routed_between
        assert len(colony.captured("/sink")) == sent
        assert _count(colony, "id LIKE 'old-%'") == 0
        assert _count(colony) == 2 * sent  # what routing wrote meanwhile is all there
