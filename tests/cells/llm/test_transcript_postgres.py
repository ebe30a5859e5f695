"""The PostgreSQL transcript store on a real server: its table, its races, its connection.

Every test has a schema of its own (the ``pg_schema`` fixture), whose DSN names the sessions
after the schema (``application_name``), so a test can find and kill exactly its store's
session. What every store shares (the compare-and-set outcomes, expiry, unreachable stores) runs
on PostgreSQL too, in test_transcript_stores.py, test_loop_vectors.py and
test_loop_concurrency.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from cells.llm.cell import LlmCell
from cells.llm.params import PG_DSN_VARIABLE, TranscriptParams, transcript_dsn
from cells.llm.transcript import Record, StoreUnavailableError, WriteOutcome
from cells.llm.transcript.postgres import TABLE, PostgresStore
from colony.testing import spec_for
from tests.cells.llm.test_loop_vectors import dead_pg_dsn
from tests.pg import PgSchema

CONV = "0123456789abcdef0123456789abcdef"
WRITERS = 4
ROUNDS = 30


def record(turn: int, writer: int = 0) -> Record:
    return Record(provider="anthropic", model="m", turn=turn, pending=[f"call-{turn}-{writer}"])


@contextlib.asynccontextmanager
async def stores(dsn: str, count: int) -> AsyncIterator[list[PostgresStore]]:
    made = [PostgresStore(dsn) for _ in range(count)]
    try:
        yield made
    finally:
        for store in made:
            await store.close()


@contextlib.asynccontextmanager
async def inspector(pg: PgSchema) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """A connection beside the store's: on the server DSN, so killing the store's session by
    its application name never kills this one."""
    conn = await psycopg.AsyncConnection.connect(pg.server, autocommit=True)
    try:
        await conn.execute(f'SET search_path = "{pg.name}"')
        yield conn
    finally:
        await conn.close()


async def fetch(conn: psycopg.AsyncConnection[Any], sql: str, *args: Any) -> list[tuple[Any, ...]]:
    cursor = await conn.execute(sql, args)
    return await cursor.fetchall()


async def kill_store_sessions(conn: psycopg.AsyncConnection[Any], pg: PgSchema) -> int:
    rows = await fetch(
        conn,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
        pg.name,
    )
    return sum(1 for (killed,) in rows if killed)


async def store_pids(conn: psycopg.AsyncConnection[Any], pg: PgSchema) -> list[int]:
    rows = await fetch(
        conn, "SELECT pid FROM pg_stat_activity WHERE application_name = %s", pg.name
    )
    return [pid for (pid,) in rows]


# -- the table ------------------------------------------------------------------------------


async def test_the_record_is_one_row_of_llm_transcript_in_the_search_path_schema(
    pg_schema: PgSchema,
) -> None:
    async with stores(pg_schema.dsn, 1) as (store,), inspector(pg_schema) as conn:
        assert await store.write(CONV, 0, record(1), 600) is WriteOutcome.WRITTEN
        tables = await fetch(
            conn,
            "SELECT table_schema FROM information_schema.tables WHERE table_name = %s",
            TABLE,
        )
        # (other tests' schemas, running at the same time, may hold one too)
        assert (pg_schema.name,) in tables, "the table belongs in the DSN's search_path schema"
        assert ("public",) not in tables
        assert not TABLE.startswith("/"), "a store cell's tables all begin with /"
        rows = await fetch(
            conn,
            f"SELECT conversation, turn, record, extract(epoch FROM expires_at - now()) "
            f"FROM {TABLE}",
        )
        assert len(rows) == 1
        conversation, turn, text, left = rows[0]
        assert (conversation, turn) == (CONV, 1)
        assert Record.from_json(text) == record(1)
        assert 597 <= float(left) <= 600
        assert await store.write(CONV, 1, record(2), 90) is WriteOutcome.WRITTEN
        (turn, left), *_ = await fetch(
            conn, f"SELECT turn, extract(epoch FROM expires_at - now()) FROM {TABLE}"
        )
        assert turn == 2
        assert 87 <= float(left) <= 90


async def test_a_table_made_by_another_daemon_is_used_without_the_create_privilege(
    pg_schema: PgSchema,
) -> None:
    role = f"{pg_schema.name}_rw"
    async with stores(pg_schema.dsn, 1) as (owner,):
        await owner.write(CONV, 0, record(1), 600)
    async with inspector(pg_schema) as conn:
        await conn.execute(f'CREATE ROLE "{role}" LOGIN')
        try:
            await conn.execute(f'GRANT USAGE ON SCHEMA "{pg_schema.name}" TO "{role}"')
            await conn.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON {TABLE} TO "{role}"')
            dsn = make_conninfo(
                pg_schema.server,
                user=role,
                options=f"-csearch_path={pg_schema.name}",
                application_name=role,
            )
            async with stores(dsn, 1) as (limited,):
                assert await limited.write(CONV, 1, record(2), 600) is WriteOutcome.WRITTEN
                assert await limited.read(CONV) == record(2)
        finally:
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
            await conn.execute(f'DROP OWNED BY "{role}"')
            await conn.execute(f'DROP ROLE "{role}"')


async def test_daemons_creating_the_table_at_once_all_succeed(pg_schema: PgSchema) -> None:
    async with stores(pg_schema.dsn, 6) as made:
        outcomes = await asyncio.gather(
            *(store.write(f"conversation-{n}", 0, record(1), 60) for n, store in enumerate(made))
        )
    assert outcomes == [WriteOutcome.WRITTEN] * 6


async def test_expired_rows_are_swept_by_a_later_write(pg_schema: PgSchema) -> None:
    async with stores(pg_schema.dsn, 1) as (store,), inspector(pg_schema) as conn:
        await store.write("short", 0, record(1), 1)
        await store.write("long", 0, record(1), 600)
        await asyncio.sleep(1.2)
        assert await store.read("short") is None
        assert len(await fetch(conn, f"SELECT 1 FROM {TABLE}")) == 2, "not swept yet"
        store.sweep_every_s = 0
        await store.write("long", 1, record(2), 600)
        assert await fetch(conn, f"SELECT conversation FROM {TABLE}") == [("long",)]


# -- races ----------------------------------------------------------------------------------


async def test_writers_racing_one_turn_on_postgresql_have_exactly_one_winner(
    pg_schema: PgSchema,
) -> None:
    async with stores(pg_schema.dsn, WRITERS) as made, inspector(pg_schema) as conn:
        for n in range(ROUNDS):
            conversation = f"race-{n}"
            created = await asyncio.gather(
                *(s.write(conversation, 0, record(1, w), 60) for w, s in enumerate(made))
            )
            assert sorted(created) == sorted(
                [WriteOutcome.WRITTEN] + [WriteOutcome.STALE] * (WRITERS - 1)
            ), created
            moved = await asyncio.gather(
                *(s.write(conversation, 1, record(2, w), 60) for w, s in enumerate(made))
            )
            assert moved.count(WriteOutcome.WRITTEN) == 1, moved
            assert moved.count(WriteOutcome.STALE) == WRITERS - 1, moved
            winner = moved.index(WriteOutcome.WRITTEN)
            ((turn, text),) = await fetch(
                conn, f"SELECT turn, record FROM {TABLE} WHERE conversation = %s", conversation
            )
            assert turn == 2
            assert Record.from_json(text) == record(2, winner), "the row is not the winner's"


async def test_a_final_write_racing_a_continuation_leaves_one_outcome(pg_schema: PgSchema) -> None:
    async with stores(pg_schema.dsn, 2) as (ender, mover):
        for n in range(ROUNDS):
            conversation = f"end-{n}"
            await ender.write(conversation, 0, record(1), 60)
            ended, moved = await asyncio.gather(
                ender.write(conversation, 1, None, 0), mover.write(conversation, 1, record(2), 60)
            )
            stored = await mover.read(conversation)
            if ended is WriteOutcome.WRITTEN:
                assert moved is WriteOutcome.GONE, "a continuation of a deleted record"
                assert stored is None
            else:
                assert (ended, moved) == (WriteOutcome.STALE, WriteOutcome.WRITTEN)
                assert stored == record(2)


# -- the connection -------------------------------------------------------------------------


async def test_an_unreachable_postgresql_is_store_unavailable_naming_it() -> None:
    async with stores(dead_pg_dsn(), 1) as (store,):
        for attempt in (store.read(CONV), store.write(CONV, 0, record(1), 60), store.read(CONV)):
            with pytest.raises(StoreUnavailableError) as caught:
                await asyncio.wait_for(attempt, 10)
            assert str(caught.value).startswith(
                "LLM transcript store unreachable - postgres: connection failed"
            ), caught.value
            assert "\n" not in str(caught.value)


async def test_a_session_the_server_killed_is_replaced_by_the_next_call(
    pg_schema: PgSchema,
) -> None:
    async with stores(pg_schema.dsn, 1) as (store,), inspector(pg_schema) as conn:
        await store.write(CONV, 0, record(1), 60)
        (first,) = await store_pids(conn, pg_schema)
        assert await kill_store_sessions(conn, pg_schema) == 1
        assert await store.read(CONV) == record(1)
        (second,) = await store_pids(conn, pg_schema)
        assert second != first
        assert await kill_store_sessions(conn, pg_schema) == 1
        assert await store.write(CONV, 1, record(2), 60) is WriteOutcome.WRITTEN
        assert await store.read(CONV) == record(2)
        assert len(await store_pids(conn, pg_schema)) == 1


async def test_a_server_that_stays_down_is_unavailable_until_it_answers_again(
    pg_schema: PgSchema,
) -> None:
    """The server "restarting" without restarting it: the session is killed and, until the
    store reconnects to an address that answers, every call is a 503 (one retry, no hang)."""
    async with stores(pg_schema.dsn, 1) as (store,), inspector(pg_schema) as conn:
        await store.write(CONV, 0, record(1), 60)
        real, store.dsn = store.dsn, dead_pg_dsn()
        assert await kill_store_sessions(conn, pg_schema) == 1
        for _ in range(2):
            with pytest.raises(StoreUnavailableError, match="unreachable - postgres"):
                await store.read(CONV)
        store.dsn = real
        assert await store.read(CONV) == record(1)
        assert await store.write(CONV, 1, record(2), 60) is WriteOutcome.WRITTEN


async def test_a_store_without_a_dsn_says_where_to_set_one() -> None:
    async with stores("", 1) as (store,):
        with pytest.raises(StoreUnavailableError) as caught:
            await store.read(CONV)
    assert "params.transcript.postgres.dsn" in str(caught.value)
    assert PG_DSN_VARIABLE in str(caught.value)


async def test_a_dsn_that_does_not_parse_is_refused_without_echoing_it() -> None:
    async with stores("host=127.0.0.1 password=s3cret dbname", 1) as (store,):
        with pytest.raises(StoreUnavailableError) as caught:
            await store.read(CONV)
    assert "is not a PostgreSQL connection string" in str(caught.value)
    assert "s3cret" not in str(caught.value)


# -- choosing the store ---------------------------------------------------------------------


@pytest.fixture
def no_env_dsn(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv(PG_DSN_VARIABLE, raising=False)
    return monkeypatch


def test_the_dsn_is_the_params_then_the_cluster_then_the_environment(
    no_env_dsn: pytest.MonkeyPatch,
) -> None:
    given = TranscriptParams.model_validate({"store": "postgres", "postgres": {"dsn": "P"}})
    bare = TranscriptParams.model_validate({"store": "postgres"})
    env = {PG_DSN_VARIABLE: "E"}
    assert transcript_dsn(given, "C", env) == "P"
    assert transcript_dsn(bare, "C", env) == "C"
    assert transcript_dsn(bare, None, env) == "E"
    assert transcript_dsn(bare, None, {}) is None
    no_env_dsn.setenv(PG_DSN_VARIABLE, "from-the-daemon")
    assert transcript_dsn(bare) == "from-the-daemon"


async def test_an_llm_cell_builds_its_postgres_store_from_the_environment_variable(
    pg_schema: PgSchema, no_env_dsn: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    no_env_dsn.setenv(PG_DSN_VARIABLE, pg_schema.dsn)
    params = {"model": "m", "transcript": {"store": "postgres"}}
    cell = LlmCell(spec_for(f"/brain-{uuid.uuid4().hex[:8]}", params))
    try:
        store = cell.transcript()
        assert isinstance(store, PostgresStore)
        assert store.dsn == pg_schema.dsn
        assert await store.write(CONV, 0, record(1), 60) is WriteOutcome.WRITTEN
    finally:
        await cell.close()


async def test_a_write_cancelled_while_it_waits_for_a_row_lock_leaves_a_usable_store(
    pg_schema: PgSchema,
) -> None:
    """The colony's backstop cancels a message mid-operation; the next turn must not find the
    store's session in the middle of the cancelled one."""
    async with stores(pg_schema.dsn, 1) as (store,), inspector(pg_schema) as conn:
        await store.write(CONV, 0, record(1), 60)
        async with conn.transaction():
            await conn.execute(f"SELECT 1 FROM {TABLE} WHERE conversation = %s FOR UPDATE", (CONV,))
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(store.write(CONV, 1, record(2), 60), 0.5)
        assert await store.read(CONV) == record(1)
        assert await store.write(CONV, 1, record(2), 60) is WriteOutcome.WRITTEN
        assert await store.read(CONV) == record(2)
