"""Two colonies in one process sharing a cluster database: each conversation runs on the node
that owns its partition, whichever node took it in; nothing is lost or run twice, and a
partition a node lost is taken over from the journal.

The daemons as real processes, killed and paused, are ``tests/e2e/test_cluster.py``; here the
two nodes are two harnesses, which is enough for the routing and the database to tell apart.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg

from colony.cell import CellClass, CellSpec, CellType
from colony.effects import Delivery
from colony.envelope import Envelope, source_message
from colony.persist.items import Unit
from colony.persist.pg.db import PgDb
from colony.testing import ColonyHarness
from tests.pg import PgSchema
from tests.processes import eventually

P = 8


def _tree(tmp: Path) -> Path:
    """``/first`` → ``/second`` → ``/sink``: each relay adds its node's name to the thread."""
    root = tmp / "tree"
    edges = [{"from": "first", "to": "second"}, {"from": "second", "to": "/sink"}]
    (root / "main").mkdir(parents=True)
    (root / "main" / "config.json").write_text(
        json.dumps({"cell": {"type": "hive"}, "params": {"graph": {"edges": edges}}})
    )
    for name in ("first", "second"):
        (root / "main" / name).mkdir()
        (root / "main" / name / "config.json").write_text(
            json.dumps(
                {
                    "cell": {"type": "relay", "timeout": -1},
                    "contract": {"version": "1", "settings": {}, "consumes": {}},
                }
            )
        )
    return root


class _Relay:
    def __init__(self, node: str) -> None:
        self.node = node

    async def handle(self, message: Envelope) -> list[Any]:
        said = {"origin": "assistant", "type": "text", "text": self.node}
        return [{"messages": [*message.body["messages"], said]}]


def _relay(node: str) -> dict[str, CellType]:
    def make(spec: CellSpec) -> _Relay:
        return _Relay(node)

    return {"relay": CellType("relay", CellClass.STATELESS, make)}


def _said(text: str) -> dict[str, Any]:
    return {"messages": [{"origin": "user", "type": "text", "text": text}]}


def _thread(m: Envelope) -> list[str]:
    return [part["text"] for part in m.body["messages"]]


def _harness(tree: Path, tmp: Path, schema: PgSchema, node: str, lease_ms: int) -> ColonyHarness:
    cluster = {
        "dsn": schema.dsn,
        "partitions": P,
        "lease_ms": lease_ms,
        "partition_by": "context.chat_id",
    }
    return ColonyHarness(
        tree,
        capture=["/sink"],
        colony={"cluster": cluster},
        cell_types=_relay(node),
        workdir=tmp / node,
        node=node,
        log_level="info",
    )


async def _until(check: Any, within: float = 20.0) -> None:
    assert await eventually(check, within), "timed out"


def _journal(schema: PgSchema) -> int:
    with psycopg.connect(schema.dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM journal").fetchone()
        return int(row[0]) if row else -1


async def test_each_conversation_runs_on_its_partitions_owner_whichever_node_took_it_in(
    tmp_path: Path, pg_schema: PgSchema
) -> None:
    tree = _tree(tmp_path)
    async with _harness(tree, tmp_path, pg_schema, "a", 3000) as a:
        await _until(lambda: len(a.colony.cluster.owned) == P if a.colony.cluster else False)
        async with _harness(tree, tmp_path, pg_schema, "b", 3000) as b:
            # b joined: a hands half back by drain, b takes it
            await _until(
                lambda: len(b.colony.cluster.owned) == P // 2 if b.colony.cluster else False
            )
            chats = [f"chat-{i}" for i in range(40)]
            for i, chat in enumerate(chats):
                door = a if i % 2 else b
                await door.send("/first", _said(chat), context={"chat_id": chat})
            await _until(lambda: len(a.captured("/sink")) + len(b.captured("/sink")) >= 40)
            await asyncio.sleep(0.3)  # nothing more arrives
            got = Counter(_thread(m)[0] for m in [*a.captured("/sink"), *b.captured("/sink")])
            assert got == Counter(chats)
            owner = {"a": a.colony.cluster, "b": b.colony.cluster}
            for name, harness in (("a", a), ("b", b)):
                for m in harness.captured("/sink"):
                    member = owner[name]
                    assert member is not None
                    assert m.partition in member.owned
                    assert _thread(m)[1:] == [name, name]  # the whole chain on one node
            assert _journal(pg_schema) == 0


async def test_a_stopped_nodes_partitions_and_their_journal_go_to_the_other(
    tmp_path: Path, pg_schema: PgSchema
) -> None:
    tree = _tree(tmp_path)
    async with _harness(tree, tmp_path, pg_schema, "a", 3000) as a:
        await _until(lambda: bool(a.colony.cluster and len(a.colony.cluster.owned) == P))
        b = _harness(tree, tmp_path, pg_schema, "b", 3000)
        async with b:
            await _until(lambda: bool(b.colony.cluster and len(b.colony.cluster.owned) == P // 2))
        # b stopped cleanly: its partitions are free at once and a takes them in its next round
        await _until(lambda: bool(a.colony.cluster and len(a.colony.cluster.owned) == P))
        for i in range(10):
            await a.send("/first", _said(f"after {i}"), context={"chat_id": f"c{i}"})
        await _until(lambda: len(a.captured("/sink")) == 10)
        assert _journal(pg_schema) == 0


async def test_a_claimed_row_for_a_cell_not_in_the_tree_is_dead_lettered_not_lost(
    tmp_path: Path, pg_schema: PgSchema
) -> None:
    tree = _tree(tmp_path)
    # journalled unclaimed, as another node's ingress would, for a cell this tree lacks
    left = source_message("/main/gone", _said("left"))
    left.partition, left.epoch = 3, None
    left.target = "gone"  # as addressed, relative to its sender
    db = await asyncio.to_thread(PgDb, pg_schema.dsn, "x", P, 3000, "context.chat_id")
    try:
        await db.commit(Unit(deliveries=[Delivery("/main/gone", left, "/main/first")]))
    finally:
        await asyncio.to_thread(db.close)
    async with _harness(tree, tmp_path, pg_schema, "a", 3000) as a:
        letters = await a.dead_letters("unresolved_path")
        found = [
            (d.message_id, d.sender_path, d.original_target, d.resolved_target) for d in letters
        ]
        assert found == [(left.id, "/main/first", "gone", "/main/gone")]
        assert a.logs("journal_redelivered")[0]["dead_lettered"] == 1
        assert _journal(pg_schema) == 0
