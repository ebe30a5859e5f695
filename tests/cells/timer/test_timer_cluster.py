"""The timer cell in a cluster: its schedules in the cluster's PostgreSQL, firing on the holder
of the leader lease only, each due time once across nodes and failovers, and ops taken in on
any node.

The nodes are colonies in this process sharing one cluster database (as in
tests/colony/persist_pg/test_cluster_colony.py), each with a workdir of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from cells.timer import TIMER, TimerCell
from cells.timer.ops import rfc3339
from colony.cell import CellSpec
from colony.cluster.member import Member
from colony.cluster.partition import partition_key, partition_of
from colony.config.models import CellBlock, ClusterConfig, ColonyConfig, Contract
from colony.envelope import Envelope
from colony.observability import list_logger
from colony.persist.pg.db import PgDb
from colony.persist.pg.tables import PgTablesHost
from colony.testing import ColonyHarness
from tests.cells.timer.test_timer import ID, OTHER, Recorder, add, timer_tree, tool_call
from tests.conftest import TreeFactory
from tests.pg import PgSchema, chat_cluster
from tests.processes import eventually

P = 4
LEASE = "timer:/remind"


@asynccontextmanager
async def node(
    name: str, tree: Path, schema: PgSchema, workdir: Path, *, lease_ms: int = 3000
) -> AsyncIterator[ColonyHarness]:
    async with ColonyHarness(
        tree,
        capture=["/sink", "/fired"],
        colony={"cluster": chat_cluster(schema, lease_ms, P)},
        cell_types={"timer": TIMER},
        workdir=workdir / name,
        node=name,
        log_level="info",
    ) as colony:
        yield colony


def fired(*nodes: ColonyHarness) -> list[Envelope]:
    """Every firing, whichever node its conversation landed on."""
    return [m for n in nodes for m in n.captured("/fired")]


def leads(colony: ColonyHarness) -> bool:
    member = colony.colony.cluster
    return member is not None and member.leads(LEASE)


def rows(schema: PgSchema) -> list[tuple[Any, ...]]:
    with psycopg.connect(schema.dsn, autocommit=True) as conn:
        return conn.execute(
            'SELECT schedule_id, iteration_n FROM "/remind:schedules" ORDER BY "~row"'
        ).fetchall()


def cell_dbs(folder: Path) -> list[Path]:
    return list(folder.rglob("cell.db"))


async def until(check: Any, within: float = 20.0) -> None:
    assert await eventually(check, within), "timed out"


def once_each(firings: list[Envelope]) -> None:
    """No due time fired twice, and the count went up by one per firing."""
    due = [m.headers.hop["scheduled_at"] for m in firings]
    assert len(due) == len(set(due)), sorted(due)
    counts = [m.headers.hop["iteration_n"] for m in firings]
    assert sorted(counts) == list(range(min(counts), min(counts) + len(counts)))


# -- one node: the schedules are in the cluster database --------------------------------------


async def test_on_postgresql_schedules_and_counts_outlive_the_node_and_seeds_fill_fresh_tables(
    make_tree: TreeFactory, tmp_path: Path, pg_schema: PgSchema
) -> None:
    every_second = make_tree(timer_tree(schedules=[add(cron="* * * * * *")]))
    async with node("a", every_second, pg_schema, tmp_path) as a:
        await a.send("/remind", tool_call(add(OTHER, at="2099-01-01T09:00:00Z")))
        await until(lambda: len(fired(a)) >= 2)
    counted = dict(rows(pg_schema))[ID]
    assert counted >= 2
    assert cell_dbs(tmp_path) == []  # nothing of it on the node's disk

    other_seed = make_tree(timer_tree(schedules=[add(str(uuid.uuid4()), cron="0 0 * * * *")]))
    async with node("b", other_seed, pg_schema, tmp_path) as b:
        await until(lambda: len(fired(b)) >= 1)
        assert fired(b)[0].headers.hop["iteration_n"] >= counted  # counting on
    assert [sid for sid, _ in rows(pg_schema)] == [ID, OTHER]  # b's seed: the tables were not new


# -- two nodes ---------------------------------------------------------------------------------


async def test_of_two_nodes_one_fires_each_due_time_once_and_the_other_takes_over_when_it_stops(
    make_tree: TreeFactory, tmp_path: Path, pg_schema: PgSchema
) -> None:
    tree = make_tree(timer_tree(schedules=[add(cron="* * * * * *")]))
    async with contextlib.AsyncExitStack() as stack:
        a = await stack.enter_async_context(node("a", tree, pg_schema, tmp_path, lease_ms=1000))
        await until(lambda: leads(a))
        async with node("b", tree, pg_schema, tmp_path, lease_ms=1000) as b:
            await until(lambda: bool(b.logs("timer_standby")))
            await until(lambda: len(fired(a, b)) >= 3)
            assert leads(a)
            assert not leads(b)
            assert not a.logs("timer_fire_fenced")  # b never tried
            assert not b.logs("timer_fire_fenced")
            await stack.aclose()  # a stops: its lease is handed back
            stopped = rfc3339(datetime.now(UTC))
            await until(
                lambda: (
                    len([m for m in fired(a, b) if m.headers.hop["scheduled_at"] > stopped]) >= 3
                )
            )
            assert leads(b)
            assert b.logs("timer_firing")
            firings = fired(a, b)
    once_each(firings)


async def test_a_schedule_added_on_the_node_that_does_not_fire_is_fired_by_the_one_that_does(
    make_tree: TreeFactory, tmp_path: Path, pg_schema: PgSchema
) -> None:
    tree = make_tree(timer_tree())
    async with (
        node("a", tree, pg_schema, tmp_path) as a,
        node("b", tree, pg_schema, tmp_path) as b,
    ):
        await until(lambda: leads(a) or leads(b))
        firing, other = (a, b) if leads(a) else (b, a)
        member = other.colony.cluster
        assert member is not None
        await until(lambda: len(member.owned) == P // 2)  # the partitions are shared out
        chat = next(
            c
            for c in (f"chat-{i}" for i in range(1000))
            if partition_of(partition_key("context.chat_id", "", {"chat_id": c}), P) in member.owned
        )
        at = datetime.now(UTC) + timedelta(seconds=2)
        await other.send("/remind", add(at=rfc3339(at, millis=True)), context={"chat_id": chat})
        await until(lambda: len(fired(a, b)) == 1, within=10)
        await asyncio.sleep(1.5)  # nothing more comes
        [one] = fired(a, b)
        assert one.headers.hop["schedule_id"] == ID
        assert leads(firing)
        assert not leads(other)


# -- the fence ---------------------------------------------------------------------------------


def cluster_spec(schema: PgSchema, db: PgDb, leader: Member, records: list[Any]) -> CellSpec:
    config = ClusterConfig(dsn=schema.dsn, partitions=1, lease_ms=1000)
    return CellSpec(
        path="/remind",
        type="timer",
        folder=None,
        params={"schedules": [add(cron="0 0 * * * *")]},
        contract=Contract(version="1", settings={}),
        cell=CellBlock(type="timer"),
        colony=ColonyConfig(cluster=config),
        log=list_logger(records, "info"),
        tables=PgTablesHost(db),
        leader=leader,
    )


async def test_a_due_time_another_node_fired_is_not_fired_again(pg_schema: PgSchema) -> None:
    """Both nodes planned the same due time; b fired it (a was paused past its lease). When a
    wakes up and fires it too, the row says it was fired: a emits nothing."""
    records: list[dict[str, Any]] = []
    config = ClusterConfig(dsn=pg_schema.dsn, partitions=1, lease_ms=1000)
    db = PgDb(pg_schema.dsn, "a", 1)
    members = {n: Member(config, pg_schema.dsn, n, list_logger(records, "info")) for n in "ab"}
    cells: list[TimerCell] = []
    try:
        a, b = (TimerCell(cluster_spec(pg_schema, db, members[n], records)) for n in "ab")
        cells += [a, b]
        into_a, into_b = Recorder(), Recorder()
        for cell, ctx in ((a, into_a), (b, into_b)):
            await cell._open()
            cell._ctx = ctx
        planned = a._plan[ID]
        assert b._plan[ID] == planned
        assert planned.due is not None
        await b._fire(ID, planned.due, b._plan[ID])
        await a._fire(ID, planned.due, planned)
        assert len(into_b.emitted) == 1
        assert into_a.emitted == []
        [fenced] = [r for r in records if r["event"] == "timer_fire_fenced"]
        assert fenced["schedule_id"] == ID
        assert dict(rows(pg_schema))[ID] == 1
        # The next due time is a's to fire, and only once.
        later = planned.due + timedelta(hours=1)
        await a._fire(ID, later, planned)
        await b._fire(ID, later, planned)
        assert (len(into_a.emitted), len(into_b.emitted)) == (1, 1)
    finally:
        for cell in cells:
            await cell.close()
        for member in members.values():
            await member.stop()
        db.close()
