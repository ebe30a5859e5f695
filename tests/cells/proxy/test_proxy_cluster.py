"""The proxy cell in a cluster: its cursor and sent parts in the cluster's PostgreSQL, polling
on the holder of the leader lease only, each update emitted once across nodes and failovers.

The nodes are colonies in this process sharing one cluster database (as in
tests/colony/persist_pg/test_cluster_colony.py), each with a workdir of its own: nothing a
node finds after a restart can come from a ``cell.db``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
from telegram import Update

from cells.proxy import ProxyCell
from cells.proxy.state import ClusterState
from colony.cell import CellClass, CellSpec, CellType
from colony.cluster.member import Member
from colony.config.models import CellBlock, ClusterConfig, ColonyConfig, Contract
from colony.envelope import Envelope, JsonObject, source_message
from colony.observability import list_logger
from colony.persist.pg.db import PgDb
from colony.persist.pg.tables import PgTablesHost
from colony.testing import ColonyHarness
from scripted.telegram import ScriptedTelegram, telegram_update
from tests.cells.proxy.test_proxy import (
    CHAT,
    TOKEN,
    USER,
    Clock,
    Running,
    answer,
    bot_tree,
    proxy_type,
    user_text,
)
from tests.conftest import CONTRACT, TreeFactory
from tests.pg import PgSchema, chat_cluster
from tests.processes import eventually

P = 4
LEASE = "proxy:/proxy"


class Echo:
    """The bot tree's echo, in-process (a code cell's shared worker would outlive the first
    of two colonies in one process)."""

    async def handle(self, message: Envelope) -> list[Any]:
        text = message.body["messages"][-1]["text"]
        return [{"messages": [{"origin": "assistant", "type": "text", "text": f"echo: {text}"}]}]


def tree_of(make_tree: TreeFactory, telegram: ScriptedTelegram) -> Path:
    files = bot_tree(telegram)
    files["main/echo/config.json"] = {"cell": {"type": "echo"}, "contract": CONTRACT}
    return make_tree(files)


@asynccontextmanager
async def node(
    name: str,
    tree: Path,
    telegram: ScriptedTelegram,
    schema: PgSchema,
    workdir: Path,
    *,
    lease_ms: int = 3000,
) -> AsyncIterator[Running]:
    """One node of the cluster running the bot tree (its own workdir: ``workdir/name``)."""
    clock, cells, built = Clock(), list[ProxyCell](), asyncio.Event()
    async with ColonyHarness(
        tree,
        capture=["/sink"],
        env={"TELEGRAM_BOT_TOKEN": TOKEN},
        colony={"cluster": chat_cluster(schema, lease_ms, P)},
        cell_types={
            "proxy": proxy_type(clock, cells, built),
            "echo": CellType("echo", CellClass.STATELESS, lambda spec: Echo()),
        },
        workdir=workdir / name,
        node=name,
        log_level="info",
    ) as colony:
        async with asyncio.timeout(10):
            await built.wait()
        yield Running(colony, telegram, clock, cells, TOKEN)


def polls(bot: Running) -> int:
    """getUpdates requests of every proxy instance this node built."""
    return sum(cell.polls for cell in bot.cells)


def cursor(schema: PgSchema) -> int:
    with psycopg.connect(schema.dsn, autocommit=True) as conn:
        row = conn.execute('SELECT "offset" FROM "/proxy:update_cursor" WHERE id = 1').fetchone()
        return int(row[0]) if row else -1


def cell_dbs(folder: Path) -> list[Path]:
    return list(folder.rglob("cell.db"))


async def until(check: Any, within: float = 20.0) -> None:
    assert await eventually(check, within), "timed out"


# -- one node: the state is in the cluster database ------------------------------------------


async def test_on_postgresql_the_cursor_survives_a_restart_so_no_update_is_emitted_twice(
    make_tree: TreeFactory, tmp_path: Path, pg_schema: PgSchema
) -> None:
    async with ScriptedTelegram(token=TOKEN) as telegram:
        tree = tree_of(make_tree, telegram)
        async with node("a", tree, telegram, pg_schema, tmp_path) as bot:
            first = telegram.push_text(CHAT, "before the restart", user_id=USER)
            await telegram.wait_sent(1)
            await bot.colony.settle()
            assert [user_text(m) for m in bot.emitted()] == ["before the restart"]
        assert cell_dbs(tmp_path / "a") == []  # nothing of it on the node's disk
        assert cursor(pg_schema) == first + 1
        # As if Telegram never heard the confirmation: the update is queued again.
        if not telegram.pending:
            telegram.push_update(telegram_update(first, CHAT, "before the restart", user_id=USER))
        polls_before = len(telegram.polls)

        # Another node, with nothing on its disk: the cursor comes from the database.
        async with node("b", tree, telegram, pg_schema, tmp_path) as bot:
            second = telegram.push_text(CHAT, "after the restart", user_id=USER)
            await telegram.wait_sent(2)
            await bot.colony.settle()
            assert [user_text(m) for m in bot.emitted()] == ["after the restart"]
            assert telegram.polls[polls_before]["offset"] == first + 1
            assert [m["text"] for m in telegram.sent] == [
                "echo: before the restart",
                "echo: after the restart",
            ]
        assert cursor(pg_schema) == second + 1


async def test_on_postgresql_a_part_sent_by_one_node_is_not_sent_again_by_another(
    make_tree: TreeFactory, tmp_path: Path, pg_schema: PgSchema
) -> None:
    long = "\n\n".join(["x" * 4000, "y" * 4000, "z" * 100])
    message = source_message("/proxy", answer(long), context={"chat_id": CHAT})
    async with ScriptedTelegram(token=TOKEN) as telegram:
        telegram.known_chats.add(CHAT)
        tree = tree_of(make_tree, telegram)
        async with node("a", tree, telegram, pg_schema, tmp_path) as bot:
            telegram.fail(400, method="sendMessage", description="boom", after=1)
            assert await bot.cells[0].handle(message) is not None  # part 1 out, part 2 refused
            assert [m["text"][0] for m in telegram.sent] == ["x"]
        # The journal hands the message to the node that owns its conversation now.
        async with node("b", tree, telegram, pg_schema, tmp_path) as bot:
            assert await bot.cells[0].handle(message) is None
            assert [m["text"][0] for m in telegram.sent] == ["x", "y", "z"]
            assert bot.colony.logs("proxy_redelivery_skipped")


async def test_on_postgresql_a_params_update_survives_a_restart_on_another_node(
    make_tree: TreeFactory, tmp_path: Path, pg_schema: PgSchema
) -> None:
    async with ScriptedTelegram(token=TOKEN) as telegram:
        tree = tree_of(make_tree, telegram)
        async with node("a", tree, telegram, pg_schema, tmp_path) as bot:
            update = source_message("/proxy", {"params": {"send_timeout_ms": 4321}})
            assert await bot.cells[0].handle(update) is None
        async with node("b", tree, telegram, pg_schema, tmp_path) as bot:
            cell = bot.cells[0]
            await until(lambda: cell.params.send_timeout_ms == 4321)  # read before its 1st poll


# -- two nodes ---------------------------------------------------------------------------------


async def test_of_two_nodes_one_polls_and_every_update_is_emitted_once(
    make_tree: TreeFactory, tmp_path: Path, pg_schema: PgSchema
) -> None:
    chats = [CHAT + i for i in range(8)]  # several conversations: answers leave both nodes
    async with ScriptedTelegram(token=TOKEN) as telegram:
        tree = tree_of(make_tree, telegram)
        async with (
            node("a", tree, telegram, pg_schema, tmp_path) as a,
            node("b", tree, telegram, pg_schema, tmp_path) as b,
        ):
            await until(lambda: polls(a) + polls(b) > 0)
            texts = []
            for i in range(24):
                texts.append(f"message {i}")
                telegram.push_text(chats[i % len(chats)], texts[-1], user_id=USER)
                await asyncio.sleep(0.02)
            await telegram.wait_sent(24, timeout=30)
            # Each emission reaches /sink on the node owning its conversation, which may take
            # it in from the journal at its next round: wait for all, then look for doubles.
            await until(lambda: len(a.emitted()) + len(b.emitted()) >= len(texts))
            await a.colony.settle()
            await b.colony.settle()
            emitted = [user_text(m) for m in [*a.emitted(), *b.emitted()]]
            assert sorted(emitted) == sorted(texts)
            assert sorted(m["text"] for m in telegram.sent) == sorted(f"echo: {t}" for t in texts)
            pollers = [bot for bot in (a, b) if polls(bot)]
            assert len(pollers) == 1
            member = pollers[0].colony.colony.cluster
            assert member is not None
            assert member.leads(LEASE)
            assert all(p["status"] != 409 for p in telegram.polls)  # never two at once
            other = b if pollers[0] is a else a
            assert other.colony.logs("proxy_standby")


async def test_when_the_polling_node_stops_the_other_polls_within_a_lease_and_nothing_doubles(
    make_tree: TreeFactory, tmp_path: Path, pg_schema: PgSchema
) -> None:
    lease_ms = 1000
    async with ScriptedTelegram(token=TOKEN) as telegram:
        tree = tree_of(make_tree, telegram)
        async with contextlib.AsyncExitStack() as stack:
            a = await stack.enter_async_context(
                node("a", tree, telegram, pg_schema, tmp_path, lease_ms=lease_ms)
            )
            await until(lambda: polls(a) > 0)  # a leads: it started first
            async with node("b", tree, telegram, pg_schema, tmp_path, lease_ms=lease_ms) as b:
                await until(lambda: bool(b.colony.logs("proxy_standby")))
                for i in range(5):
                    telegram.push_text(CHAT, f"before {i}", user_id=USER)
                await telegram.wait_sent(5)
                await a.colony.settle()  # (an answer cut off by the stop may be sent again)
                await b.colony.settle()
                assert polls(b) == 0
                await stack.aclose()  # a stops: its lease is handed back
                stopped = time.monotonic()
                await until(lambda: polls(b) > 0, within=10)
                took = time.monotonic() - stopped
                for i in range(5):
                    telegram.push_text(CHAT, f"after {i}", user_id=USER)
                await telegram.wait_sent(10, timeout=20)
                await b.colony.settle()
                emitted = [user_text(m) for m in [*a.emitted(), *b.emitted()]]
        assert sorted(emitted) == sorted(
            [f"before {i}" for i in range(5)] + [f"after {i}" for i in range(5)]
        )
        assert len(telegram.sent) == 10
        assert took < 3 * lease_ms / 1000  # b asks every third of a lease


# -- the fence ---------------------------------------------------------------------------------


class Recorder:
    """The I/O loop's context: keeps each emission's idempotency key."""

    path = "/proxy"

    def __init__(self) -> None:
        self.keys: list[str | None] = []

    async def emit(
        self, content: JsonObject, target: str | None = None, *, key: str | None = None
    ) -> None:
        self.keys.append(key)


def cluster_spec(
    schema: PgSchema,
    telegram: ScriptedTelegram,
    db: PgDb,
    leader: Member,
    records: list[dict[str, Any]],
) -> CellSpec:
    config = ClusterConfig(dsn=schema.dsn, partitions=1, lease_ms=1000)
    params = {"bot_token": TOKEN, "emit_to": "/echo", "base_url": telegram.url}
    return CellSpec(
        path="/proxy",
        type="proxy",
        folder=None,
        params=params,
        contract=Contract(version="1", settings={}),
        cell=CellBlock(type="proxy"),
        colony=ColonyConfig(cluster=config),
        log=list_logger(records, "info"),
        tables=PgTablesHost(db),
        leader=leader,
    )


async def test_a_poller_that_lost_its_lease_unnoticed_stops_at_the_cursor(
    pg_schema: PgSchema,
) -> None:
    """Node a leads, then stops renewing (paused); its lease expires and b takes over and
    delivers two updates. When a wakes up with the same two updates fetched, it still believes
    it leads: its first emission carries the key b's did (the colony drops it as taken in
    before), and the cursor's compare-and-set refuses its save, so it goes no further."""
    records: list[dict[str, Any]] = []
    config = ClusterConfig(dsn=pg_schema.dsn, partitions=1, lease_ms=1000)
    db = PgDb(pg_schema.dsn, "a", 1)
    members = {n: Member(config, pg_schema.dsn, n, list_logger(records, "info")) for n in "ab"}
    cells: list[ProxyCell] = []
    try:
        async with ScriptedTelegram(token=TOKEN) as telegram:
            a, b = (
                ProxyCell(cluster_spec(pg_schema, telegram, db, members[n], records)) for n in "ab"
            )
            cells += [a, b]
            assert a.shared is not None
            assert b.shared is not None
            assert await members["a"].lead(LEASE)
            await a._refresh(a.shared)  # a is about to poll from offset 0 ...
            await asyncio.sleep(1.2)  # ... and is paused past its lease
            assert await members["b"].lead(LEASE)
            updates = tuple(
                Update.de_json(telegram_update(1000 + i, CHAT, f"u{i}", user_id=USER), None)
                for i in range(3)
            )
            await b._refresh(b.shared)
            into_b, into_a = Recorder(), Recorder()
            assert await b._deliver(into_b, updates)
            assert into_b.keys == [f"telegram:/proxy:{1000 + i}" for i in range(3)]
            assert members["a"].leads(LEASE)  # a has not renewed since: it still believes
            assert await a._deliver(into_a, updates)
            assert into_a.keys == ["telegram:/proxy:1000"]
            [moved] = [r for r in records if r["event"] == "proxy_cursor_moved"]
            assert (moved["update_id"], moved["expected"]) == (1000, 0)
            assert a.offset == 0  # it learns the cursor again before its next poll
            state = ClusterState(pg_schema.dsn, "/proxy")
            assert (await state.read(1000))[0] == 1003
            await state.close()
    finally:
        for cell in cells:
            await cell.close()
        for member in members.values():
            await member.stop()
        db.close()
