"""The cluster database on a real PostgreSQL: units, the partition fence, leases, claims.

Each test has a schema of its own (``pg_schema``); two "nodes" are two handles on it in one
process, which is all the database can tell apart (the daemons' processes are the e2e tests').
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import pytest

from colony.effects import Delivery, LogRow
from colony.envelope import Envelope, source_message
from colony.persist.items import Unit
from colony.persist.pg.db import PgDb
from colony.persist.pg.ownership import Ownership
from colony.persist.pg.writer import CLAIM_CHANNEL
from colony.persist.writer import UnitFenced
from tests.pg import PgSchema

P = 4


class Collecting:
    """A carrier that collects the texts of the claimed deliveries; nothing is dead."""

    def __init__(self, got: list[str]) -> None:
        self.got = got

    def refusal(self, cell: str) -> None:
        return None

    async def deliver_claimed(self, d: Delivery) -> None:
        self.got.append(d.message.body["text"])

    async def dead_letter_claimed(self, entry: object, fx: object) -> None:
        raise AssertionError("nothing is dead here")


def message(partition: int, epoch: int | None, text: str = "hi") -> Envelope:
    m = source_message("/cell", {"text": text})
    m.partition, m.epoch = partition, epoch
    return m


def delivery(m: Envelope, cell: str = "/cell") -> Unit:
    return Unit(deliveries=[Delivery(cell, m, "/")], logs=[LogRow(m, "/", cell, m.ttl)])


@asynccontextmanager
async def node(
    schema: PgSchema, name: str, lease_ms: int = 10_000
) -> AsyncIterator[tuple[PgDb, Ownership]]:
    db = await asyncio.to_thread(PgDb, schema.dsn, name, P)
    owner = Ownership(schema.dsn, name, P, lease_ms)
    try:
        yield db, owner
    finally:
        await owner.stop()
        await asyncio.to_thread(db.close)


def select(schema: PgSchema, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(schema.dsn, autocommit=True) as conn:
        return conn.execute(sql).fetchall()


async def test_a_hand_off_commits_its_ack_deliveries_and_log_rows_together(
    pg_schema: PgSchema,
) -> None:
    async with node(pg_schema, "a") as (db, owner):
        changes = await owner.tick()
        assert changes.gained == dict.fromkeys(range(P), 1)
        first = message(2, 1)
        await db.commit(delivery(first))
        assert select(pg_schema, "SELECT id, partition, epoch FROM journal") == [(first.id, 2, 1)]
        follow = message(2, 1, "next")
        await db.commit(
            Unit(
                ack=(first.id, "/cell"),
                message=first,
                deliveries=[Delivery("/other", follow, "/cell")],
                logs=[LogRow(follow, "/cell", "/other", follow.ttl)],
            )
        )
        assert select(pg_schema, "SELECT id, cell FROM journal") == [(follow.id, "/other")]
        assert [r[0] for r in select(pg_schema, "SELECT id FROM message_log ORDER BY seq")] == [
            first.id,
            follow.id,
        ]
        log = await db.message_log(first.trace_id)
        assert [e.to_path for e in log] == ["/cell"]


async def test_an_ingress_key_is_taken_once_whichever_node_takes_it(pg_schema: PgSchema) -> None:
    async with node(pg_schema, "a") as (a, _), node(pg_schema, "b") as (b, _):
        units = [Unit(key="update-7", deliveries=[Delivery("/c", message(0, None), "/")])]
        units.append(Unit(key="update-7", deliveries=[Delivery("/c", message(0, None), "/")]))
        await asyncio.gather(a.commit(units[0]), b.commit(units[1]))
        assert sorted(u.duplicate for u in units) == [False, True]
        assert select(pg_schema, "SELECT count(*) FROM journal") == [(1,)]


async def test_a_unit_made_under_an_ended_epoch_writes_nothing_and_the_rest_commits(
    pg_schema: PgSchema,
) -> None:
    events: list[tuple[str, dict[str, object]]] = []
    async with node(pg_schema, "a", lease_ms=1000) as (a, owner_a):
        a.listen(lambda name, fields: events.append((name, fields)))
        await owner_a.tick()
        held = message(1, owner_a.owned[1])
        await a.commit(delivery(held))
        # a is paused past its lease: b takes every partition over (epoch + 1)
        await asyncio.sleep(1.2)
        async with node(pg_schema, "b", lease_ms=1000) as (_, owner_b):
            gained = await owner_b.tick()
            assert gained.gained == dict.fromkeys(range(P), 2)
            late = message(1, 1, "late")
            stale = Unit(
                ack=(held.id, "/cell"),
                message=held,
                deliveries=[Delivery("/next", late, "/cell")],
                logs=[LogRow(late, "/cell", "/next", late.ttl)],
            )
            other = delivery(message(3, None, "for b"))
            results = await asyncio.gather(a.commit(stale), a.commit(other), return_exceptions=True)
            assert isinstance(results[0], UnitFenced)
            assert results[1] is None
            # the held message is still journalled for b to run; the late hand-off left nothing
            rows = select(pg_schema, "SELECT id, epoch FROM journal ORDER BY seq")
            assert rows == [(held.id, 1), (other.deliveries[0].message.id, None)]
            assert select(
                pg_schema, f"SELECT count(*) FROM message_log WHERE id = '{late.id}'"
            ) == [(0,)]
            assert select(pg_schema, "SELECT count(*) FROM dead_letters") == [(0,)]
            assert [name for name, _ in events if name == "unit_fenced"] == ["unit_fenced"]
            # and a, waking, learns it lost them all
            lost = await owner_a.tick()
            assert lost.lost == set(range(P))
            assert owner_a.owned == {}


async def test_a_joining_node_gets_partitions_only_by_drain(pg_schema: PgSchema) -> None:
    async with node(pg_schema, "a") as (_, a):
        await a.tick()
        assert len(a.owned) == P
        async with node(pg_schema, "b") as (_, b):
            first = await b.tick()
            assert first.gained == {}  # nothing is taken from a live owner
            changes = await a.tick()
            assert len(changes.drain) == P // 2
            assert set(a.owned) == set(range(P))  # still a's until drained
            for partition in changes.drain:
                await a.release(partition)
            gained = await b.tick()
            assert set(gained.gained) == changes.drain
            assert all(epoch == 2 for epoch in gained.gained.values())
            assert set(a.owned).isdisjoint(b.owned)


async def test_a_delivery_into_another_nodes_partition_is_left_unclaimed_and_wakes_it(
    pg_schema: PgSchema,
) -> None:
    async with node(pg_schema, "a") as (_, owner_a), node(pg_schema, "b") as (b, _):
        await owner_a.tick()
        listener = await psycopg.AsyncConnection.connect(pg_schema.dsn, autocommit=True)
        try:
            await listener.execute(f"LISTEN {CLAIM_CHANNEL}")
            await b.commit(delivery(message(3, None)))
            gen = listener.notifies(timeout=5, stop_after=1)
            woken = [n.payload async for n in gen]
        finally:
            await listener.close()
        assert woken == ["3"]
        assert select(pg_schema, "SELECT partition, epoch FROM journal") == [(3, None)]


async def test_a_leader_lease_moves_when_its_holder_stops_renewing(pg_schema: PgSchema) -> None:
    async with (
        node(pg_schema, "a", lease_ms=1000) as (_, a),
        node(pg_schema, "b", lease_ms=1000) as (_, b),
    ):
        assert await a.lead("proxy:/telegram")
        assert not await b.lead("proxy:/telegram")
        await asyncio.sleep(1.2)
        assert await b.lead("proxy:/telegram")
        assert b.leading["proxy:/telegram"] == 2
        assert not await a.lead("proxy:/telegram")


async def test_the_writer_reconnects_when_the_server_drops_its_connection(
    pg_schema: PgSchema,
) -> None:
    events: list[str] = []
    async with node(pg_schema, "a") as (db, owner):
        db.listen(lambda name, _fields: events.append(name))
        await owner.tick()
        await db.commit(delivery(message(0, owner.owned[0])))
        with psycopg.connect(pg_schema.server, autocommit=True) as admin:
            killed = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s AND pid <> pg_backend_pid()",
                (pg_schema.name,),
            ).fetchall()
        assert killed
        await owner.tick()  # the lease connection reconnects too
        await asyncio.wait_for(db.commit(delivery(message(0, owner.owned[0]))), 10)
        assert select(pg_schema, "SELECT count(*) FROM journal") == [(2,)]


def test_a_second_colony_shape_is_refused_with_the_number_to_use(pg_schema: PgSchema) -> None:
    PgDb(pg_schema.dsn, "a", P).close()
    with pytest.raises(Exception, match=f"set cluster.partitions to {P}"):
        PgDb(pg_schema.dsn, "a", P * 2)


async def test_the_owner_claims_unclaimed_and_stale_rows_in_journal_order(
    pg_schema: PgSchema,
) -> None:
    from colony.persist.pg.claims import claim

    async with node(pg_schema, "a", lease_ms=1000) as (a, owner_a):
        await owner_a.tick()
        mine = message(2, owner_a.owned[2], "a's own")
        await a.commit(delivery(mine))
        await a.commit(delivery(message(2, None, "from elsewhere")))
        await asyncio.sleep(1.2)  # a paused past its lease
        async with node(pg_schema, "b", lease_ms=1000) as (_, owner_b):
            gained = await owner_b.tick()
            conn = await psycopg.AsyncConnection.connect(pg_schema.dsn, autocommit=True)
            ask: Any = {"dsn": pg_schema.dsn, "patience_s": 1.0}
            try:
                entries = await claim(conn, "b", 2, gained.gained[2], **ask)
                assert [e.message.body["text"] for e in entries] == ["a's own", "from elsewhere"]
                assert {(e.message.partition, e.message.epoch) for e in entries} == {(2, 2)}
                assert await claim(conn, "b", 2, gained.gained[2], **ask) == []  # claimed once
                assert await claim(conn, "a", 2, 1, **ask) == []  # a's ownership ended
            finally:
                await conn.close()


async def test_a_cells_write_under_an_ended_epoch_is_refused_and_writes_nothing(
    pg_schema: PgSchema,
) -> None:
    async with node(pg_schema, "a") as (db, owner):
        await owner.tick()
        epoch = owner.owned[1]

        def insert(conn: psycopg.Connection[object]) -> int:
            conn.execute("CREATE TABLE IF NOT EXISTS notes (n int)")
            return conn.execute("INSERT INTO notes VALUES (1)").rowcount

        assert await db.execute(insert, None, fence=(1, epoch)) == 1
        await db.flush()
        with pytest.raises(UnitFenced):
            await db.execute(insert, None, fence=(1, epoch - 1))
        await db.flush()
        assert select(pg_schema, "SELECT count(*) FROM notes") == [(1,)]


async def test_a_node_paused_inside_its_fence_cannot_keep_its_partitions(
    pg_schema: PgSchema,
) -> None:
    """The fence's share locks of a node frozen mid-transaction (no idle timeout fires in a
    pipeline waiting for its Sync) are ended with its session once its lease ran out."""
    from colony.persist.pg import schema

    async with node(pg_schema, "a", lease_ms=1000) as (_, owner_a):
        await owner_a.tick()
        frozen = psycopg.connect(pg_schema.dsn, autocommit=True)
        try:
            frozen.execute(schema.REGISTER, ("a",))
            frozen.execute("BEGIN")
            frozen.execute("SELECT partition FROM cluster_partitions WHERE owner = 'a' FOR SHARE")
            await asyncio.sleep(1.2)  # a's leases run out; its transaction stays open
            async with node(pg_schema, "b", lease_ms=1000) as (_, owner_b):
                # The first tick ends a's session; its locks go once the server has rolled
                # its transaction back, and a later tick takes the rows.
                for _ in range(50):
                    await owner_b.tick()
                    if len(owner_b.owned) == P:
                        break
                    await asyncio.sleep(0.1)
                assert set(owner_b.owned) == set(range(P))
            assert frozen.broken or frozen.closed or _ended(frozen)
        finally:
            frozen.close()


def _ended(conn: psycopg.Connection[object]) -> bool:
    try:
        conn.execute("SELECT 1")
    except psycopg.OperationalError:
        return True
    return False


async def test_a_resigned_leader_lease_is_free_for_another_node_at_once(
    pg_schema: PgSchema,
) -> None:
    async with node(pg_schema, "a") as (_, a), node(pg_schema, "b") as (_, b):
        assert await a.lead("timer:/tick")
        assert not await b.lead("timer:/tick")
        await a.resign("timer:/tick")
        assert "timer:/tick" not in a.leading
        assert await b.lead("timer:/tick")


async def test_rows_claimed_before_a_failed_claim_are_still_delivered(
    pg_schema: PgSchema, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claimed row is this node's to run (no sweep takes it again under the same epoch), so
    a claim that fails part-way through a round must not drop what was claimed before it."""
    import colony.cluster.member as member_module
    from colony.cluster.member import Member
    from colony.config.models import ClusterConfig
    from colony.observability import list_logger

    async with node(pg_schema, "a") as (db, _):
        for partition in range(P):
            await db.commit(delivery(message(partition, None, f"p{partition}")))
        config = ClusterConfig(dsn=pg_schema.dsn, partitions=P)
        member = Member(config, pg_schema.dsn, "b", list_logger([]))
        from colony.persist.pg.claims import claim as real

        async def failing(
            conn: object, node_name: str, partition: int, epoch: int, **kw: Any
        ) -> object:
            if partition == 2:
                raise psycopg.OperationalError("the server went away")
            return await real(conn, node_name, partition, epoch, **kw)  # type: ignore[arg-type]

        monkeypatch.setattr(member_module, "claim", failing)
        got: list[str] = []

        try:
            with pytest.raises(psycopg.OperationalError):
                await member._round(Collecting(got))
            assert got == ["p0", "p1"]  # claimed before the failure, delivered anyway
        finally:
            await member.stop()


async def test_an_ingress_made_under_an_ended_epoch_is_journalled_for_the_new_owner(
    pg_schema: PgSchema,
) -> None:
    """Nothing of an ingress has run yet: instead of being refused (and lost), its delivery
    is journalled unclaimed, and the colony, seeing epoch None, does not deliver it here."""
    async with node(pg_schema, "a", lease_ms=1000) as (a, owner_a):
        await owner_a.tick()
        await asyncio.sleep(1.2)
        async with node(pg_schema, "b", lease_ms=1000) as (_, owner_b):
            await owner_b.tick()
            late = message(1, 1, "asked of a")  # a believed it still owned partition 1
            unit = Unit(key="update-9", deliveries=[Delivery("/cell", late, "/")])
            await a.commit(unit)
            assert not unit.duplicate
            assert late.epoch is None
            assert select(pg_schema, "SELECT id, epoch FROM journal") == [(late.id, None)]


def test_a_node_keying_conversations_otherwise_is_refused(pg_schema: PgSchema) -> None:
    PgDb(pg_schema.dsn, "a", P, partition_by="context.chat_id").close()
    with pytest.raises(Exception, match=r"every node must read the same colony\.json"):
        PgDb(pg_schema.dsn, "b", P, partition_by="trace_id")


async def test_a_second_live_daemon_under_the_same_node_name_is_refused(
    pg_schema: PgSchema,
) -> None:
    from colony.persist.pg.ownership import NodeNameTaken

    async with node(pg_schema, "eu-1") as (_, first):
        await first.tick()
        twin = Ownership(pg_schema.dsn, "eu-1", P, 10_000)
        try:
            with pytest.raises(NodeNameTaken, match="a name of its own"):
                await twin.tick()
            assert twin.owned == {}
            await first.tick()  # the first one goes on
            assert len(first.owned) == P
        finally:
            if twin._conn is not None:
                await twin._conn.close()


async def test_a_database_made_before_the_per_hop_record_gains_it_at_the_next_boot(
    pg_schema: PgSchema,
) -> None:
    async with node(pg_schema, "a"):
        pass
    with psycopg.connect(pg_schema.dsn, autocommit=True) as conn:  # as an older daemon made it
        conn.execute("DROP INDEX message_log_at")
        conn.execute("ALTER TABLE message_log DROP COLUMN at_ms, DROP COLUMN edges")
        conn.execute("ALTER TABLE dead_letters DROP COLUMN at_ms")
        conn.execute("DROP TABLE handling")
    async with node(pg_schema, "a") as (db, owner):
        await owner.tick()
        m = message(1, 1)
        await db.commit(
            Unit(
                deliveries=[Delivery("/cell", m, "/")],
                logs=[LogRow(m, "/", "/cell", 5, 1234, ("/#0",))],
            )
        )
    assert select(pg_schema, "SELECT at_ms, edges FROM message_log") == [(1234, "/#0")]
    assert select(pg_schema, "SELECT count(*) FROM handling") == [(0,)]
    assert select(pg_schema, "SELECT to_regclass('message_log_at') IS NOT NULL") == [(True,)]


async def test_a_nul_in_a_path_is_stored_escaped_not_refused(pg_schema: PgSchema) -> None:
    async with node(pg_schema, "a") as (db, owner):
        await owner.tick()
        m = message(1, 1)
        m.target = "/a\x00b"
        await db.commit(
            Unit(deliveries=[Delivery("/cell", m, "/")], logs=[LogRow(m, "/", "/a\x00b", 5)])
        )
    assert select(pg_schema, "SELECT to_path FROM message_log") == [("/a\\u0000b",)]


class _CommitAnswerLost:
    """The writer's connection, whose next COMMIT is lost on the way back (``lands``: the
    server carried it out first) and the session ended, as when another node takes over and
    ends this node's sessions in the middle of a commit."""

    def __init__(self, conn: Any, *, lands: bool) -> None:
        self._conn = conn
        self._lands = lands
        self.armed = True

    def execute(self, sql: Any, *args: Any, **kw: Any) -> Any:
        if self.armed and sql == "COMMIT":
            self.armed = False
            if self._lands:
                self._conn.execute(sql)
            self._conn.close()
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return self._conn.execute(sql, *args, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


@pytest.mark.parametrize("lands", [True, False], ids=["committed", "not committed"])
async def test_a_commit_whose_answer_is_lost_is_applied_once(
    pg_schema: PgSchema, lands: bool
) -> None:
    events: list[str] = []
    async with node(pg_schema, "a") as (db, owner):
        db.listen(lambda name, _fields: events.append(name))
        await owner.tick()
        await db.commit(delivery(message(0, owner.owned[0], "warm")))
        writer = db._writer
        writer.conn = _CommitAnswerLost(writer.conn, lands=lands)
        once = message(0, owner.owned[0], "once")
        await asyncio.wait_for(db.commit(delivery(once)), 10)
        assert select(pg_schema, f"SELECT count(*) FROM journal WHERE id = '{once.id}'") == [(1,)]
        assert select(pg_schema, f"SELECT count(*) FROM message_log WHERE id = '{once.id}'") == [
            (1,)
        ]
        assert ("commit_answer_lost" in events) is lands


class _ClaimAnswerLost:
    """A member's async lease connection whose next COMMIT (a claim's: the leases' statements
    run in autocommit) is lost on the way back, as in :class:`_CommitAnswerLost`."""

    def __init__(self, conn: Any, *, lands: bool) -> None:
        self._conn = conn
        self._lands = lands
        self.armed = True

    async def execute(self, sql: Any, *args: Any, **kw: Any) -> Any:
        if self.armed and sql == "COMMIT":
            self.armed = False
            if self._lands:
                await self._conn.execute(sql)
            await self._conn.close()
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return await self._conn.execute(sql, *args, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


@asynccontextmanager
async def claiming(
    pg_schema: PgSchema, lands: bool
) -> AsyncIterator[tuple[Any, list[str], list[str], list[dict[str, Any]]]]:
    """Node "a" journals two rows per partition; member "b" (stopped at the end) is about to
    claim them on a lease connection whose COMMIT answers are lost (``lands``: whether the
    server committed anyway). Yields the member, the texts sent, the texts it delivers (fill
    with :class:`Collecting`) and its log lines."""
    from colony.cluster.member import Member
    from colony.config.models import ClusterConfig
    from colony.observability import list_logger

    logs: list[dict[str, Any]] = []
    async with node(pg_schema, "a") as (db, _):
        sent = [f"p{p}-{n}" for p in range(P) for n in range(2)]
        for text in sent:
            await db.commit(delivery(message(int(text[1]), None, text)))
        member = Member(
            ClusterConfig(dsn=pg_schema.dsn, partitions=P), pg_schema.dsn, "b", list_logger(logs)
        )
        try:
            ownership = member.ownership
            ownership._conn = _ClaimAnswerLost(  # type: ignore[assignment]
                await ownership._connection(), lands=lands
            )
            yield member, sent, [], logs
        finally:
            await member.stop()


@pytest.mark.parametrize("lands", [True, False], ids=["committed", "not committed"])
async def test_rows_of_a_claim_whose_commit_answer_is_lost_are_delivered_once(
    pg_schema: PgSchema, lands: bool
) -> None:
    """Committed, the claimed rows carry this node's epoch and no later sweep takes them
    again: they are delivered now. Not committed, the next round claims them."""
    async with claiming(pg_schema, lands) as (member, sent, got, logs):
        try:
            await member._round(Collecting(got))
        except psycopg.OperationalError:
            assert not lands
            await member._round(Collecting(got))
        assert sorted(got) == sent
        assert select(pg_schema, "SELECT count(*) FROM journal WHERE epoch IS NULL") == [(0,)]
        lost = [line for line in logs if line["event"] == "commit_answer_lost"]
        assert [line["partition"] for line in lost] == ([0] if lands else [])


@pytest.mark.parametrize("lands", [True, False], ids=["committed", "not committed"])
async def test_a_claim_whose_commit_outcome_is_unknown_is_asked_after_and_delivered_once(
    pg_schema: PgSchema, lands: bool
) -> None:
    """The COMMIT's answer is lost and the status session cannot connect: the claim's outcome
    is not known. Committed, its rows carry the node's epoch and no later claim takes them:
    the member asks again next round and delivers them then, once. Not committed, the next
    claim takes them."""
    async with claiming(pg_schema, lands) as (member, sent, got, logs):
        member.dsn = "host=127.0.0.1 port=1 dbname=test connect_timeout=2"  # nothing there
        await member._round(Collecting(got))
        assert sorted(got) == sent[2:]  # partition 0's claim is the one in doubt
        assert [line["partition"] for line in logs if line["event"] == "claim_outcome_unknown"]
        assert 0 in member._replaying  # new work in partition 0 waits for its old rows
        member.dsn = pg_schema.dsn
        for _ in range(20):  # until the server has ended the session the claim was on
            await member._round(Collecting(got))
            if not member._unresolved:
                break
            await asyncio.sleep(0.05)
        # The round that learnt the outcome delivered partition 0's rows (or claimed them):
        # new work in it still waits for them to run.
        assert 0 in member._replaying
        await member._round(Collecting(got))
        assert sorted(got) == sent
        assert select(pg_schema, "SELECT count(*) FROM journal WHERE epoch IS NULL") == [(0,)]
        resolved = [line for line in logs if line["event"] == "claim_outcome_resolved"]
        assert [(r["partition"], r["outcome"]) for r in resolved] == [
            (0, "committed" if lands else "aborted")
        ]
        assert 0 not in member._replaying


@asynccontextmanager
async def _writer_transaction_open(db: PgDb) -> AsyncIterator[None]:
    """The writer's thread inside a transaction (its fence read, then a cell's SQL that waits)
    for as long as the block runs: a slow commit, held still."""
    inside, go_on = threading.Event(), threading.Event()

    def hold(conn: Any) -> None:
        inside.set()
        go_on.wait(20)

    held = db.execute(hold)
    assert await asyncio.to_thread(inside.wait, 10)
    try:
        yield
    finally:
        go_on.set()
        await held


async def test_a_lease_renewal_does_not_wait_for_the_writers_transaction(
    pg_schema: PgSchema,
) -> None:
    """The fence locks its partitions' rows FOR KEY SHARE, which an UPDATE of their lease
    does not wait for (FOR SHARE made every renewal wait for the writer's commit)."""
    async with node(pg_schema, "a") as (db, owner):
        await owner.tick()
        async with _writer_transaction_open(db):
            started = time.monotonic()
            changes = await asyncio.wait_for(owner.tick(), 5)
            assert time.monotonic() - started < 1
            assert not changes.lost
            assert len(owner.owned) == P
            await asyncio.wait_for(owner.release(3), 1)  # nor does a release


async def test_a_partition_freed_during_a_writers_transaction_is_taken_only_after_it_ends(
    pg_schema: PgSchema,
) -> None:
    """The fence's half that must hold: a takeover (FOR UPDATE) skips a partition whose row
    the writer's transaction holds, so no unit commits under an epoch that changed."""
    async with node(pg_schema, "a") as (db, owner_a), node(pg_schema, "b") as (_, owner_b):
        await owner_a.tick()
        async with _writer_transaction_open(db):
            await owner_a.release(1)
            assert (await owner_b.tick()).gained == {}
        assert (await owner_b.tick()).gained == {1: 2}


_GATE = 0x66656E63  # an advisory lock the fence reads below wait on, inside their WHERE


def _gated(fence: str) -> str:
    """A fence read that, once its snapshot is taken, waits on :data:`_GATE` before it locks
    any row: the order in which a takeover can slip between snapshot and lock."""
    assert fence.count("FOR KEY SHARE") == 1
    return fence.replace(
        "FOR KEY SHARE", "AND pg_advisory_xact_lock_shared(%s) IS NOT NULL FOR KEY SHARE"
    )


def _waiting_at_gate(conn: psycopg.Connection[Any]) -> None:
    """Return once a session waits for :data:`_GATE` (the server has no event to await)."""
    deadline = time.monotonic() + 10
    while not conn.execute(
        "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid = %s",
        (_GATE,),
    ).fetchall():
        assert time.monotonic() < deadline, "the fence read never reached the gate"
        time.sleep(0.01)


@pytest.mark.parametrize("which", ["writer", "claim"])
async def test_a_fence_read_sees_an_epoch_changed_after_its_snapshot_whatever_the_update(
    pg_schema: PgSchema, which: str
) -> None:
    """A plain UPDATE of owner and epoch (no FOR UPDATE first, as an admin's might be) commits
    after the fence's snapshot and before its lock: the fence must find the row changed and
    return nothing. The unique index on (partition, epoch) makes every epoch change a key
    update, which FOR KEY SHARE re-reads; without it the fence locked the stale row."""
    from colony.persist.pg import claims, writer

    async with node(pg_schema, "a") as (_, owner):
        await owner.tick()
        epoch = owner.owned[0]
        params: tuple[object, ...]
        if which == "writer":
            sql, params = _gated(writer._FENCE), ("a", _GATE)
        else:
            sql, params = _gated(claims._FENCE), (0, "a", epoch, _GATE)
        with (
            psycopg.connect(pg_schema.dsn, autocommit=True) as gate,
            psycopg.connect(pg_schema.dsn, autocommit=True) as fencing,
            psycopg.connect(pg_schema.dsn, autocommit=True) as admin,
        ):
            gate.execute("SELECT pg_advisory_lock(%s)", (_GATE,))

            def fence() -> list[tuple[Any, ...]]:
                with fencing.transaction():
                    return fencing.execute(sql, params).fetchall()

            read = asyncio.ensure_future(asyncio.to_thread(fence))
            await asyncio.to_thread(_waiting_at_gate, admin)
            admin.execute("UPDATE cluster_partitions SET owner = 'b', epoch = epoch + 1")
            gate.execute("SELECT pg_advisory_unlock(%s)", (_GATE,))
            rows = await asyncio.wait_for(read, 10)
        assert [row[1:] for row in rows if row[1] is not None] == []


async def test_a_database_made_before_the_epochs_key_gains_it_at_the_next_boot(
    pg_schema: PgSchema,
) -> None:
    async with node(pg_schema, "a"):
        pass
    with psycopg.connect(pg_schema.dsn, autocommit=True) as conn:  # as an older daemon made it
        conn.execute("DROP INDEX cluster_partitions_epoch")
    async with node(pg_schema, "a"):
        pass
    assert select(
        pg_schema,
        "SELECT indisunique AND indpred IS NULL AND indimmediate FROM pg_index "
        "WHERE indexrelid = to_regclass('cluster_partitions_epoch')",
    ) == [(True,)]
