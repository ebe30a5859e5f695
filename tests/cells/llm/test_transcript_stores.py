"""The transcript stores' compare-and-set, on every store directly.

``write(conversation, expected_turn, record, expire_s)`` replaces the record only when the stored
turn is ``expected_turn`` (0: the record must not exist), deletes it when ``expire_s`` is 0 or
``record`` is None, and sets the expiry on every write; reads never extend it. On Redis the
record is one hash ``transcript:{id}`` (fields ``turn`` and ``record``) written by a single-key
Lua script. The live-Redis leg needs a server at ``LLM_TRANSCRIPT_REDIS_URL`` and is skipped
loudly without one. On PostgreSQL the record is one row of ``llm_transcript`` in the test's own
schema (the ``pg_schema`` fixture), written by a locking transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import fakeredis
import psycopg
import pytest
import redis.asyncio as redis_asyncio

from cells.llm.dialects.anthropic import AnthropicMessages
from cells.llm.loop import LoopError, LoopRequest, run_turn
from cells.llm.transcript import (
    MemoryStore,
    Record,
    SqliteStore,
    StoreUnavailableError,
    TranscriptStore,
    WriteOutcome,
)
from cells.llm.transcript.postgres import PostgresStore
from cells.llm.transcript.redis import CAS, RedisStore, key
from tests.cells.llm.test_loop_vectors import (
    LIVE_URL,
    dead_pg_dsn,
    dead_redis_url,
    pg_expiry,
    skip_without_live_redis,
)
from tests.pg import PgSchema

KINDS = ("memory", "sqlite", "fakeredis", "redis-live", "postgres")
REDIS_KINDS = ("fakeredis", "redis-live")
TOLERANCE_S = 3


class Harness:
    """One store plus a way to look behind it."""

    def __init__(self, kind: str, tmp_path: Path, pg: PgSchema | None = None) -> None:
        self.kind = kind
        self.pg = pg
        self.db = tmp_path / "cell.db"
        self.server: fakeredis.FakeServer | None = None
        self.client: Any = None
        """An inspecting Redis client or PostgreSQL connection (not the store's own)."""
        self.store: TranscriptStore
        if kind == "memory":
            self.store = MemoryStore()
        elif kind == "sqlite":
            self.store = SqliteStore(self.db)
        elif kind == "postgres":
            assert pg is not None
            self.store = PostgresStore(pg.dsn)
        elif kind == "fakeredis":
            self.server = fakeredis.FakeServer()
            self.client = fakeredis.FakeAsyncRedis(server=self.server, decode_responses=True)
            own = fakeredis.FakeAsyncRedis(server=self.server, decode_responses=True)
            self.store = RedisStore("redis://fakeredis", client=own)
        else:
            self.client = redis_asyncio.Redis.from_url(LIVE_URL, decode_responses=True)
            self.store = RedisStore(LIVE_URL)

    async def expiry(self, conversation: str) -> float | None:
        """Seconds left, or None when there is no record."""
        if isinstance(self.store, MemoryStore):
            return self.store.expiry(conversation)
        if self.kind == "sqlite":
            with contextlib.closing(sqlite3.connect(self.db)) as db:
                row = db.execute(
                    "SELECT expires_at FROM transcript WHERE conversation = ?", (conversation,)
                ).fetchone()
            return None if row is None else float(row[0]) - time.time()
        if self.kind == "postgres":
            return await pg_expiry(self.client, conversation)
        left = await self.client.pttl(key(conversation))
        return None if left < 0 else left / 1000

    async def take_down(self) -> None:
        if isinstance(self.store, SqliteStore):
            self.store._conn.close()
        elif self.server is not None:
            self.server.connected = False
        elif self.kind == "postgres":
            await self.store.close()
            self.store = PostgresStore(dead_pg_dsn())
        else:
            await self.store.close()
            self.store = RedisStore(dead_redis_url())

    async def close(self) -> None:
        await self.store.close()
        if self.kind == "postgres":
            await self.client.close()
        elif self.client is not None:
            if self.kind == "redis-live":
                await self.client.flushdb()
            await self.client.aclose()


@contextlib.asynccontextmanager
async def harness(kind: str, tmp_path: Path, pg: PgSchema | None = None) -> AsyncIterator[Harness]:
    if kind == "redis-live":
        skip_without_live_redis()
    made = Harness(kind, tmp_path, pg)
    try:
        if made.kind == "redis-live":
            await made.client.flushdb()
        elif made.kind == "postgres":
            assert pg is not None
            made.client = await psycopg.AsyncConnection.connect(pg.dsn, autocommit=True)
        yield made
    finally:
        await made.close()


def pg_for(request: pytest.FixtureRequest) -> PgSchema | None:
    """The test's own PostgreSQL schema when the parameter is the postgres kind."""
    return request.getfixturevalue("pg_schema") if request.param == "postgres" else None


@pytest.fixture(params=KINDS)
async def h(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    async with harness(request.param, tmp_path, pg_for(request)) as made:
        yield made


@pytest.fixture(params=REDIS_KINDS)
async def r(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    async with harness(request.param, tmp_path) as made:
        yield made


@pytest.fixture(params=("sqlite", *REDIS_KINDS, "postgres"))
async def fallible(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    """The stores that can be unreachable (an in-process dict cannot)."""
    async with harness(request.param, tmp_path, pg_for(request)) as made:
        yield made


def record(turn: int, **fields: Any) -> Record:
    return Record(
        provider="anthropic",
        model="claude-haiku-4-5",
        turn=turn,
        state=fields.pop("state", "open"),
        pending=fields.pop("pending", [f"toolu_{turn}"]),
        system="You are a weather assistant.",
        tools_digest="d" * 64,
        turns=fields.pop("turns", [{"origin": "user", "type": "text", "text": f"turn {turn}"}]),
        created=1,
        updated=turn,
        **fields,
    )


CONV = "0123456789abcdef0123456789abcdef"


# -- compare-and-set ------------------------------------------------------------------------


async def test_a_record_is_created_only_when_absent(h: Harness) -> None:
    first = record(1)
    assert await h.store.write(CONV, 0, first, 60) is WriteOutcome.WRITTEN
    assert await h.store.write(CONV, 0, record(1, pending=["other"]), 60) is WriteOutcome.STALE
    assert await h.store.read(CONV) == first


async def test_a_stale_expected_turn_is_refused_and_changes_nothing(h: Harness) -> None:
    await h.store.write(CONV, 0, record(1), 600)
    before = await h.expiry(CONV)
    assert await h.store.write(CONV, 2, record(3), 60) is WriteOutcome.STALE
    assert await h.store.write(CONV, 5, None, 0) is WriteOutcome.STALE
    assert await h.store.read(CONV) == record(1)
    after = await h.expiry(CONV)
    assert before is not None
    assert after is not None
    assert before - TOLERANCE_S <= after <= before


async def test_the_expected_turn_moves_the_record_on(h: Harness) -> None:
    await h.store.write(CONV, 0, record(1), 600)
    assert await h.store.write(CONV, 1, record(2), 600) is WriteOutcome.WRITTEN
    assert await h.store.write(CONV, 1, record(2, pending=["again"]), 600) is WriteOutcome.STALE
    assert await h.store.write(CONV, 2, record(3), 600) is WriteOutcome.WRITTEN
    stored = await h.store.read(CONV)
    assert stored is not None
    assert stored.turn == 3


async def test_a_missing_record_is_gone_and_is_not_created(h: Harness) -> None:
    assert await h.store.write(CONV, 1, record(2), 60) is WriteOutcome.GONE
    assert await h.store.read(CONV) is None
    assert await h.expiry(CONV) is None


async def test_expire_zero_deletes_and_so_does_a_missing_record(h: Harness) -> None:
    await h.store.write(CONV, 0, record(1), 60)
    assert await h.store.write(CONV, 1, record(2, state="done"), 0) is WriteOutcome.WRITTEN
    assert await h.store.read(CONV) is None
    assert await h.expiry(CONV) is None
    other = "conversation-two"
    await h.store.write(other, 0, record(1), 60)
    assert await h.store.write(other, 1, None, 60) is WriteOutcome.WRITTEN
    assert await h.store.read(other) is None
    assert await h.store.write(other, 1, record(2), 60) is WriteOutcome.GONE


async def test_every_write_sets_the_expiry_up_or_down(h: Harness) -> None:
    for turn, seconds in enumerate((100, 3000, 50), start=1):
        assert await h.store.write(CONV, turn - 1, record(turn), seconds) is WriteOutcome.WRITTEN
        left = await h.expiry(CONV)
        assert left is not None
        assert seconds - TOLERANCE_S <= left <= seconds, (seconds, left)


async def test_reads_do_not_extend_the_expiry_and_an_expired_record_is_gone(h: Harness) -> None:
    await h.store.write(CONV, 0, record(1), 1)
    await asyncio.sleep(0.6)
    assert await h.store.read(CONV) == record(1)
    await asyncio.sleep(0.6)
    assert await h.store.read(CONV) is None, "a read extended the expiry"
    assert await h.store.write(CONV, 1, record(2), 60) is WriteOutcome.GONE
    assert await h.store.write(CONV, 0, record(1), 60) is WriteOutcome.WRITTEN, "the id is free"


async def test_a_record_round_trips_every_field(h: Harness) -> None:
    full = record(
        4,
        state="refusal",
        pending=[],
        turns=[
            {"origin": "user", "type": "text", "text": "Zürich, 15 °C — ok?"},
            {
                "origin": "tool",
                "type": "tool_result",
                "id": "toolu_A",
                "text": '{"a":[1,true,null]}',
            },
        ],
        native={"toolu_A": [{"type": "thinking", "thinking": "…", "signature": "sig-1"}]},
    )
    await h.store.write(CONV, 0, full, 60)
    assert await h.store.read(CONV) == full


async def test_two_connections_to_one_sqlite_file_share_the_compare_and_set(
    tmp_path: Path,
) -> None:
    one, two = SqliteStore(tmp_path / "cell.db"), SqliteStore(tmp_path / "cell.db")
    try:
        assert await one.write(CONV, 0, record(1), 60) is WriteOutcome.WRITTEN
        assert await two.write(CONV, 0, record(1), 60) is WriteOutcome.STALE
        assert await two.write(CONV, 1, record(2), 60) is WriteOutcome.WRITTEN
        assert await one.write(CONV, 1, record(2), 60) is WriteOutcome.STALE
        assert await one.read(CONV) == record(2)
    finally:
        await one.close()
        await two.close()


# -- unreachable ----------------------------------------------------------------------------


async def test_an_unreachable_store_raises_store_unavailable_naming_it(fallible: Harness) -> None:
    await fallible.store.write(CONV, 0, record(1), 60)
    await fallible.take_down()
    name = fallible.kind if fallible.kind in ("sqlite", "postgres") else "redis"
    with pytest.raises(StoreUnavailableError, match=f"LLM transcript store unreachable - {name}"):
        await fallible.store.read(CONV)
    with pytest.raises(StoreUnavailableError, match=f"LLM transcript store unreachable - {name}"):
        await fallible.store.write(CONV, 1, record(2), 60)


async def test_a_turn_on_an_unreachable_store_is_a_503_before_any_provider_call(
    fallible: Harness,
) -> None:
    await fallible.store.write(CONV, 0, record(1, pending=["toolu_1"]), 60)
    await fallible.take_down()

    async def call(body: dict[str, Any], model: str) -> Any:
        raise AssertionError("the provider was called although the store read failed")

    request = LoopRequest(
        tools=[{"name": "get_weather", "input_schema": {"type": "object"}}],
        conversation=CONV,
        turn=1,
        results=[{"id": "toolu_1", "output": "x"}],
    )
    with pytest.raises(LoopError) as caught:
        await run_turn(
            request,
            dialect=AnthropicMessages(),
            provider="anthropic",
            model=None,
            default_model="claude-haiku-4-5",
            prompt="You are a weather assistant.",
            store=fallible.store,
            call=call,
            max_tokens=64,
            temperature=0,
            extra={},
        )
    assert caught.value.status == 503
    assert caught.value.code == "store_unavailable"
    assert "LLM transcript store unreachable" in caught.value.message


# -- the Redis layout and its script --------------------------------------------------------


async def test_the_redis_record_is_one_hash_with_turn_and_record_and_a_ttl(r: Harness) -> None:
    await r.store.write(CONV, 0, record(1), 600)
    name = f"transcript:{{{CONV}}}"
    assert key(CONV) == name
    assert [k async for k in r.client.scan_iter(match="*")] == [name]
    assert await r.client.type(name) == "hash"
    fields = await r.client.hgetall(name)
    assert sorted(fields) == ["record", "turn"]
    assert fields["turn"] == "1"
    assert Record.from_json(fields["record"]) == record(1)
    assert 600 - TOLERANCE_S <= await r.client.ttl(name) <= 600
    await r.store.write(CONV, 1, record(2), 90)
    assert (await r.client.hgetall(name))["turn"] == "2"
    assert 90 - TOLERANCE_S <= await r.client.ttl(name) <= 90


async def test_the_script_returns_0_on_a_wrong_turn_and_leaves_ttl_and_fields_alone(
    r: Harness,
) -> None:
    name = key(CONV)
    await r.store.write(CONV, 0, record(1), 500)
    before = await r.client.hgetall(name)
    for expected in ("5", "0", "2"):
        assert await r.client.eval(CAS, 1, name, expected, "100", "6", "changed") == 0
        assert await r.client.hgetall(name) == before
        ttl = await r.client.ttl(name)
        assert 500 - TOLERANCE_S <= ttl <= 500, f"the TTL moved to {ttl}"
    assert await r.client.eval(CAS, 1, "transcript:{nobody}", "3", "100", "4", "x") == -1
    assert await r.client.exists("transcript:{nobody}") == 0
    assert await r.client.eval(CAS, 1, name, "1", "100", "2", "replaced") == 1
    assert await r.client.hgetall(name) == {"turn": "2", "record": "replaced"}
    assert 100 - TOLERANCE_S <= await r.client.ttl(name) <= 100
    assert await r.client.eval(CAS, 1, name, "2", "0", "3", "x") == 1
    assert await r.client.exists(name) == 0


async def test_noscript_after_a_script_flush_is_handled_by_register_script(r: Harness) -> None:
    assert isinstance(r.store, RedisStore)
    sha = r.store._cas.sha
    await r.store.write(CONV, 0, record(1), 60)
    assert await r.client.script_exists(sha) == [True]
    await r.client.script_flush()
    assert await r.client.script_exists(sha) == [False]
    assert await r.store.write(CONV, 1, record(2), 60) is WriteOutcome.WRITTEN
    assert await r.client.script_exists(sha) == [True]
    assert await r.store.read(CONV) == record(2)
