"""Two replicas answering the same loop turn: exactly one wins.

Two :class:`LlmCell` instances — two replicas, each with a store and a connection of its own —
share one backing store and one scripted Anthropic server. After turn 1, both submit turn 1's
results at once. Both read turn 1 and call the model; the compare-and-set (Redis: a single-key
Lua script; PostgreSQL: a row locked ``FOR UPDATE``) lets exactly one write turn 2, so one reply
is a 200 and the other a 409, and the record holds exactly one continuation. Fifty times, on a
shared ``fakeredis.FakeServer`` always, on a live Redis when one answers (skipped loudly
otherwise) and on PostgreSQL in a schema of the test's own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import fakeredis
import psycopg
import pytest
import redis.asyncio as redis_asyncio

from cells.llm.cell import LlmCell
from cells.llm.transcript import TranscriptStore
from cells.llm.transcript.postgres import TABLE, PostgresStore
from cells.llm.transcript.redis import RedisStore, key
from colony.testing import spec_for
from scripted import ScriptedAnthropic, anthropic_tool_use
from tests.cells.llm.test_loop_vectors import LIVE_URL, send, skip_without_live_redis

ROUNDS = 50
TOOLS = [
    {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]


@dataclasses.dataclass
class Backend:
    """One backing store, how a replica gets a store of its own on it (its params, or a store
    made here), and how to read a conversation's stored turn and record behind their backs."""

    name: str
    transcript: dict[str, Any]
    store: Callable[[], TranscriptStore] | None
    inspector: Any

    async def stored(self, conversation: str) -> tuple[str, str]:
        if self.name == "postgres":
            cursor = await self.inspector.execute(
                f"SELECT turn::text, record FROM {TABLE} WHERE conversation = %s", (conversation,)
            )
            row = await cursor.fetchone()
            assert row is not None, f"no row for {conversation}"
            return row[0], row[1]
        raw = await self.inspector.hgetall(key(conversation))
        return raw["turn"], raw["record"]


@pytest.fixture(params=("fakeredis", "redis-live", "postgres"))
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    if request.param == "fakeredis":
        server = fakeredis.FakeServer()

        def fake() -> Any:
            return fakeredis.FakeAsyncRedis(server=server, decode_responses=True)

        made = Backend(
            "fakeredis",
            {"store": "redis"},
            lambda: RedisStore("redis://replica", client=fake()),
            fake(),
        )
    elif request.param == "postgres":
        dsn = request.getfixturevalue("pg_schema").dsn
        inspector = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        made = Backend("postgres", {"store": "postgres", "postgres": {"dsn": dsn}}, None, inspector)
    else:
        skip_without_live_redis()

        def live() -> Any:
            return redis_asyncio.Redis.from_url(LIVE_URL, decode_responses=True)

        made = Backend("redis-live", {"store": "redis", "redis": {"url": LIVE_URL}}, None, live())
        await made.inspector.flushdb()
    try:
        yield made
    finally:
        if made.name == "postgres":
            await made.inspector.close()
        else:
            if made.name == "redis-live":
                await made.inspector.flushdb()
            await made.inspector.aclose()


def replica(backend: Backend, url: str, folder: Path, path: str) -> LlmCell:
    params = {
        "provider": "anthropic",
        "model": "claude-haiku-4-5",
        "api_key": "sk-test-replicas",
        "base_url": url,
        "max_retries": 0,
        "transcript": backend.transcript,
    }
    folder.mkdir(parents=True, exist_ok=True)
    cell = LlmCell(dataclasses.replace(spec_for(path, params), folder=folder))
    if backend.store is not None:
        cell._store = backend.store()
    assert isinstance(
        cell.transcript(), PostgresStore if backend.name == "postgres" else RedisStore
    )
    return cell


def script(rounds: int) -> list[dict[str, Any]]:
    """Every answer asks for one call with an id of its own, so the winner can be told apart."""
    return [
        anthropic_tool_use(
            [(f"toolu_{n}", "get_weather", {"city": "Paris"})], id=f"msg_{n}", text=f"Call {n}."
        )
        for n in range(3 * rounds + 1)
    ]


async def test_two_replicas_answering_the_same_turn_make_one_continuation(
    backend: Backend, tmp_path: Path
) -> None:
    path = f"/replicas/brain-{uuid.uuid4().hex[:8]}"
    async with ScriptedAnthropic(script(ROUNDS)) as provider:
        cells = [replica(backend, provider.url, tmp_path / f"replica{n}", path) for n in (0, 1)]
        lost_at_write = 0
        try:
            for n in range(ROUNDS):
                user = {"origin": "user", "type": "text", "text": f"Weather in Paris? ({n})"}
                first = await send(cells[n % 2], {"loop": {"tools": TOOLS}, "messages": [user]})
                assert first["header"]["status_code"] == 200, first
                conversation = first["header"]["conversation"]
                (call,) = first["calls"]
                body = {
                    "loop": {
                        "tools": TOOLS,
                        "conversation": conversation,
                        "turn": 1,
                        "results": [{"id": call["id"], "output": {"temp_c": 15}}],
                    },
                    "messages": [],
                }
                sent = len(provider.requests)
                answers = await asyncio.gather(send(cells[0], body), send(cells[1], body))
                codes = sorted(a["header"]["status_code"] for a in answers)
                assert codes == [200, 409], answers
                (winner,) = [a for a in answers if a["header"]["status_code"] == 200]
                (loser,) = [a for a in answers if a["header"]["status_code"] == 409]
                assert loser["header"]["error_code"] == "conflict"
                if "already answered" in loser["error"]:
                    lost_at_write += 1
                    assert len(provider.requests) - sent == 2, "both replicas called the model"
                else:
                    assert "stale turn 1" in loser["error"], loser
                assert winner["header"]["turn"] == 2
                assert winner["header"]["conversation"] == conversation

                turn, text = await backend.stored(conversation)
                assert turn == "2"
                stored = json.loads(text)
                assert stored["turn"] == 2
                assert stored["state"] == "open"
                assert stored["pending"] == [c["id"] for c in winner["calls"]]
                results = [t for t in stored["turns"] if t["type"] == "tool_result"]
                calls = [t for t in stored["turns"] if t["type"] == "tool_call"]
                assert [t["id"] for t in results] == [call["id"]], "one round of results"
                assert [t["id"] for t in calls] == [call["id"], *stored["pending"]], (
                    "exactly one continuation"
                )
        finally:
            for cell in cells:
                await cell.close()
    # Both replicas read turn 1 before either wrote, so the race was decided by the script.
    assert lost_at_write > 0, "no round exercised the compare-and-set itself"
