"""The loop-turn contract as data: every case of ``fixtures/vectors/llm-loop-vectors.json`` run
on every transcript store.

A case boots the real :class:`~cells.llm.cell.LlmCell` (one or more "replicas") against a
scripted provider server on 127.0.0.1 serving the case's scripts in order, sends each step's
body as a message, and checks the emission, what the provider was sent and what the store holds.
The five legs differ only in the transcript store:

* ``memory`` — the cell's own in-process store;
* ``sqlite`` — the cell's own store in its ``cell.db`` (a temporary cell folder);
* ``fakeredis`` — :class:`RedisStore` on ``fakeredis.FakeAsyncRedis`` (Lua via lupa), one
  client per replica on one ``FakeServer``;
* ``redis-live`` — a real server at ``LLM_TRANSCRIPT_REDIS_URL`` (default
  ``redis://127.0.0.1:6379/15``, flushed per test), the cell building its own store from
  ``params.transcript.redis.url``. Without a server the leg is skipped with a loud reason.
* ``postgres`` — a real PostgreSQL, a fresh schema per test (the ``pg_schema`` fixture), the
  cell building its own store from ``params.transcript.postgres.dsn``. Without a server the leg
  skips loudly (fails under CI).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import json
import os
import re
import socket
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import fakeredis
import psycopg
import pytest
import redis
import redis.asyncio as redis_asyncio

import scripted
from cells.llm import cell as cell_module
from cells.llm.cell import LlmCell
from cells.llm.transcript import MemoryStore, Record, SqliteStore, TranscriptStore
from cells.llm.transcript.postgres import TABLE, PostgresStore
from cells.llm.transcript.redis import RedisStore, key
from colony.envelope import Envelope, Headers
from colony.ids import uuid7
from colony.testing import spec_for
from scripted import ScriptedServer, ScriptItem, Status
from tests.conftest import FIXTURES
from tests.pg import PgSchema

VECTORS = FIXTURES / "vectors" / "llm-loop-vectors.json"
DOC: dict[str, Any] = json.loads(VECTORS.read_text(encoding="utf-8"))
STORES = ("memory", "sqlite", "fakeredis", "redis-live", "postgres")
LIVE_URL = os.environ.get("LLM_TRANSCRIPT_REDIS_URL", "redis://127.0.0.1:6379/15")
EXPIRY_TOLERANCE_S = 5
"""How far below the expected expiry a store's remaining time may be when checked."""
NEW_CONVERSATION = re.compile(r"^[0-9a-f]{32}$")
"""A first turn's conversation id: ``uuid4().hex``."""

SERVERS: dict[str, type[ScriptedServer]] = {
    "anthropic": scripted.ScriptedAnthropic,
    "openai": scripted.ScriptedOpenAI,
    "openai-responses": scripted.ScriptedResponses,
    "gemini": scripted.ScriptedGemini,
    "ollama": scripted.ScriptedOllama,
}
DEFAULT_MODELS = {
    "anthropic": "claude-haiku-4-5",
    "openai": "gpt-test",
    "openai-responses": "gpt-test",
    "gemini": "gemini-test",
    "ollama": "llama-test",
}


# -- the live Redis leg ---------------------------------------------------------------------

_live_state: dict[str, str | None] = {}


def live_redis_problem() -> str | None:
    """None when a Redis answers at :data:`LIVE_URL`, else why not (checked once)."""
    if "problem" not in _live_state:
        client = redis.Redis.from_url(LIVE_URL, socket_connect_timeout=1, socket_timeout=2)
        try:
            client.ping()
            _live_state["problem"] = None
        except Exception as exc:  # any failure means: no usable server
            _live_state["problem"] = f"{type(exc).__name__}: {exc}"
        finally:
            client.close()
    return _live_state["problem"]


def skip_without_live_redis() -> None:
    problem = live_redis_problem()
    if problem is not None:
        pytest.skip(
            f"LIVE REDIS LEG SKIPPED: no server at {LIVE_URL} ({problem}); start redis-server "
            "or set LLM_TRANSCRIPT_REDIS_URL"
        )


def free_port() -> int:
    """A loopback port where nothing listens (just bound and released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def dead_redis_url() -> str:
    """A URL where nothing listens."""
    return f"redis://127.0.0.1:{free_port()}/15"


def dead_pg_dsn() -> str:
    """A PostgreSQL DSN where nothing listens."""
    return f"postgresql://postgres@127.0.0.1:{free_port()}/test"


async def pg_expiry(conn: psycopg.AsyncConnection[Any], conversation: str) -> float | None:
    """Seconds before a PostgreSQL record expires, or None (no row, or no table yet)."""
    if not await pg_table_exists(conn):
        return None
    cursor = await conn.execute(
        f"SELECT extract(epoch FROM expires_at - now()) FROM {TABLE} WHERE conversation = %s",
        (conversation,),
    )
    row = await cursor.fetchone()
    return None if row is None else float(row[0])


async def pg_table_exists(conn: psycopg.AsyncConnection[Any]) -> bool:
    cursor = await conn.execute("SELECT to_regclass(%s) IS NOT NULL", (TABLE,))
    row = await cursor.fetchone()
    return bool(row and row[0])


# -- one leg: how the cells get their store and how the test looks inside it -------------------


class Leg:
    """Builds the cells of one case on one store kind and inspects that store."""

    def __init__(self, kind: str, folder: Path, pg: PgSchema | None = None) -> None:
        self.kind = kind
        self.folder = folder
        self.pg = pg
        """The test's PostgreSQL schema (the ``postgres`` leg only)."""
        self.db = folder / "cell" / "cell.db"
        self.path = f"/vectors/brain-{uuid.uuid4().hex[:12]}"
        """Unique per test, so the process-wide memory store of this path starts empty."""
        self.fake_server = fakeredis.FakeServer() if kind == "fakeredis" else None
        self.inspector: Any = None
        if kind == "fakeredis":
            self.inspector = fakeredis.FakeAsyncRedis(
                server=self.fake_server, decode_responses=True
            )
        elif kind == "redis-live":
            self.inspector = redis_asyncio.Redis.from_url(LIVE_URL, decode_responses=True)

    async def start(self) -> None:
        if self.kind == "redis-live":
            await self.inspector.flushdb()
        elif self.kind == "postgres":
            assert self.pg is not None
            self.inspector = await psycopg.AsyncConnection.connect(self.pg.dsn, autocommit=True)

    async def close(self) -> None:
        if self.inspector is not None:
            if self.kind == "postgres":
                await self.inspector.close()
            else:
                if self.kind == "redis-live" and live_redis_problem() is None:
                    await self.inspector.flushdb()
                await self.inspector.aclose()
        cell_module._MEMORY_STORES.pop(self.path, None)

    def transcript_params(self) -> dict[str, Any]:
        if self.kind in ("memory", "sqlite"):
            return {"store": self.kind}
        if self.kind == "postgres":
            assert self.pg is not None
            return {"store": "postgres", "postgres": {"dsn": self.pg.dsn}}
        return {"store": "redis", "redis": {"url": LIVE_URL}}

    def cell(self, params: dict[str, Any]) -> LlmCell:
        """One replica. Replicas share the cell folder (the same cell.db, so the same system
        slots) and the store's backing (the memory store of this path, the sqlite file, the
        Redis, the PostgreSQL schema), each replica through a client or connection of its
        own."""
        self.db.parent.mkdir(parents=True, exist_ok=True)
        spec = dataclasses.replace(
            spec_for(self.path, {**params, "transcript": self.transcript_params()}),
            folder=self.db.parent,
        )
        built = LlmCell(spec)
        if self.kind == "fakeredis":
            client = fakeredis.FakeAsyncRedis(server=self.fake_server, decode_responses=True)
            built._store = RedisStore("redis://fakeredis", client=client)
        return built

    async def take_down(self, cells: list[LlmCell]) -> None:
        """Make the store unreachable for every replica."""
        if self.kind == "sqlite":
            for each in cells:
                store = each.transcript()
                assert isinstance(store, SqliteStore)
                store._conn.close()
        elif self.kind == "fakeredis":
            assert self.fake_server is not None
            self.fake_server.connected = False
        elif self.kind == "redis-live":
            for each in cells:
                await each.transcript().close()
                each._store = RedisStore(dead_redis_url())
        elif self.kind == "postgres":
            for each in cells:
                await each.transcript().close()
                each._store = PostgresStore(dead_pg_dsn())
        else:  # pragma: no cover - the vector file keeps such cases off the memory leg
            raise AssertionError("an in-process store cannot be taken down")

    # -- looking inside ---------------------------------------------------------------

    async def records(self, store: TranscriptStore) -> int:
        """How many live conversation records the store holds."""
        if self.kind == "memory":
            assert isinstance(store, MemoryStore)
            return sum(1 for c in list(store._records) if store._live(c) is not None)
        if self.kind == "sqlite":
            with contextlib.closing(sqlite3.connect(self.db)) as db:
                row = db.execute(
                    "SELECT count(*) FROM transcript WHERE expires_at > ?", (time.time(),)
                ).fetchone()
            return int(row[0])
        if self.kind == "postgres":
            if not await pg_table_exists(self.inspector):
                return 0
            cursor = await self.inspector.execute(
                f"SELECT count(*) FROM {TABLE} WHERE expires_at > now()"
            )
            counted = await cursor.fetchone()
            assert counted is not None
            return int(counted[0])
        return len([k async for k in self.inspector.scan_iter(match="transcript:*")])

    async def expiry(self, store: TranscriptStore, conversation: str) -> float | None:
        """Seconds before the record expires, or None when it does not exist."""
        if self.kind == "memory":
            assert isinstance(store, MemoryStore)
            return store.expiry(conversation)
        if self.kind == "sqlite":
            with contextlib.closing(sqlite3.connect(self.db)) as db:
                row = db.execute(
                    "SELECT expires_at FROM transcript WHERE conversation = ?", (conversation,)
                ).fetchone()
            return None if row is None else float(row[0]) - time.time()
        if self.kind == "postgres":
            return await pg_expiry(self.inspector, conversation)
        left = await self.inspector.pttl(key(conversation))
        return None if left < 0 else left / 1000


# -- the vector file's small languages --------------------------------------------------------


def script_item(spec: Any) -> ScriptItem:
    """``{"<helper of the scripted package>": {kwargs}}``, ``{"raw": body}`` or ``{"status": {...}}``."""
    assert isinstance(spec, dict), f"a script item is a map: {spec!r}"
    assert len(spec) == 1, f"a script item has one key: {spec!r}"
    ((name, args),) = spec.items()
    if name == "raw":
        assert isinstance(args, dict)
        return copy.deepcopy(args)
    if name == "status":
        return Status(args["code"], args.get("body"), args.get("headers", {}))
    helper = getattr(scripted, name, None)
    assert name in scripted.__all__, f"unknown script helper {name!r}"
    assert callable(helper), f"{name} is not a helper"
    item: ScriptItem = helper(**copy.deepcopy(args))
    return item


_MISSING = object()


def get_path(value: Any, path: str) -> Any:
    """``a.0.b`` into nested maps and lists; :data:`_MISSING` when absent."""
    if path == "":
        return value
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif (
            isinstance(value, list)
            and part.lstrip("-").isdigit()
            and -len(value) <= int(part) < len(value)
        ):
            value = value[int(part)]
        else:
            return _MISSING
    return value


def same(actual: Any, expected: Any) -> bool:
    """JSON equality that tells ``true`` from ``1``."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(actual) is type(expected) and actual == expected
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and actual.keys() == expected.keys()
            and all(same(actual[k], v) for k, v in expected.items())
        )
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(expected)
            and all(same(a, e) for a, e in zip(actual, expected, strict=True))
        )
    return type(actual) is type(expected) and actual == expected


def assert_subset(actual: Any, expected: Any, where: str) -> None:
    """Maps: the expected keys, recursively; lists: same length, item by item; else equal."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{where}: expected a map, got {actual!r}"
        for k, v in expected.items():
            assert k in actual, f"{where}.{k} is missing from {actual!r}"
            assert_subset(actual[k], v, f"{where}.{k}")
    elif isinstance(expected, list):
        assert isinstance(actual, list), f"{where}: expected a list, got {actual!r}"
        assert len(actual) == len(expected), f"{where}: {actual!r} is not like {expected!r}"
        for n, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_subset(a, e, f"{where}.{n}")
    else:
        assert same(actual, expected), f"{where}: {actual!r} != {expected!r}"


# -- running one case -------------------------------------------------------------------------


@dataclasses.dataclass
class Run:
    case: dict[str, Any]
    leg: Leg
    server: ScriptedServer
    params: dict[str, Any]
    cells: list[LlmCell] = dataclasses.field(default_factory=list)
    conversation: str | None = None
    """The conversation of the last successful turn (``use_conversation`` fills it in)."""

    def boot(self, params: dict[str, Any]) -> None:
        self.params = params
        count = int(self.case.get("replicas", 1))
        self.cells = [self.leg.cell(params) for _ in range(count)]

    async def shutdown(self) -> None:
        for each in self.cells:
            await each.close()
        self.cells = []

    def body(self, step: dict[str, Any]) -> Any:
        body = copy.deepcopy(step["body"])
        loop = body.get("loop") if isinstance(body, dict) else None
        if isinstance(loop, dict):
            tools = loop.get("tools")
            if isinstance(tools, str) and tools.startswith("@"):
                loop["tools"] = copy.deepcopy(DOC["tool_sets"][tools[1:]])
            if step.get("use_conversation"):
                assert self.conversation is not None, "use_conversation before any 200 turn"
                loop["conversation"] = self.conversation
        return body


def envelope(target: str, body: Any) -> Envelope:
    return Envelope(
        id=uuid7(),
        trace_id=uuid7(),
        parent_message_id=None,
        correlation_id=None,
        target=target,
        reply_to=None,
        ttl=64,
        headers=Headers(),
        body=body,
        created_at=int(time.time()),
    )


async def send(cell: LlmCell, body: Any) -> dict[str, Any]:
    emissions = await cell.handle(envelope(cell.path, body))
    assert len(emissions) == 1, f"expected one emission, got {emissions!r}"
    return emissions[0].content


async def snapshot(run: Run, conversation: str) -> tuple[str | None, float | None]:
    store = run.cells[0].transcript()
    record = await store.read(conversation)
    expiry = await run.leg.expiry(store, conversation)
    return (record.to_json() if record is not None else None), expiry


def check_reply(content: dict[str, Any], expect: dict[str, Any], conversation: str | None) -> None:
    header = content.get("header")
    assert isinstance(header, dict), f"no header in {content!r}"
    status = expect["status_code"]
    if status is None:  # an ordinary llm call: no loop fields at all
        for field in ("status", "status_code", "conversation", "turn"):
            assert field not in header, f"an ordinary call's hop carries {field}: {header!r}"
    elif status == 200:
        assert header.get("status_code") == 200, f"expected 200, got {content!r}"
        assert header["finish_reason"] != "error"
        if conversation is None:
            assert NEW_CONVERSATION.match(header["conversation"]), header["conversation"]
        else:
            assert header["conversation"] == conversation
        assert isinstance(content.get("calls"), list), "calls is always present on a 200"
    else:
        assert header.get("status_code") == status, f"expected {status}, got {content!r}"
        assert header["finish_reason"] == "error"
        assert content.get("messages") == [], content
        assert isinstance(content.get("error"), str), content
        assert content["error"], content
    if "error_code" in expect:
        assert header.get("error_code") == expect["error_code"], header
    for text in expect.get("error_contains", []):
        assert text in content.get("error", ""), f"{text!r} not in {content.get('error')!r}"
    if "reply" in expect:
        assert_subset(content, expect["reply"], "reply")
    for path in expect.get("reply_absent", []):
        found = get_path(content, path)
        assert found is _MISSING, f"reply.{path} should be absent, is {found!r}"


def check_request(request: Any, expect: dict[str, Any]) -> None:
    for path, value in expect.get("request", {}).items():
        found = get_path(request, path)
        assert found is not _MISSING, f"request.{path} is missing from {request!r}"
        assert same(found, value), f"request.{path}: {found!r} != {value!r}"
    for path in expect.get("request_absent", []):
        found = get_path(request, path)
        assert found is _MISSING, f"request.{path} should be absent, is {found!r}"


async def check_store(
    run: Run,
    expect: dict[str, Any],
    conversation: str | None,
    before: tuple[str | None, float | None] | None,
) -> None:
    store = run.cells[0].transcript()
    if "records" in expect:
        count = await run.leg.records(store)
        assert count == expect["records"], f"{count} record(s), not {expect['records']}"
    wanted = expect.get("store")
    if wanted is None:
        return
    assert conversation is not None, "a store expectation needs a conversation"
    record = await store.read(conversation)
    if wanted == "absent":
        assert record is None, f"expected no record, found {record!r}"
        return
    if wanted == "unchanged":
        assert before is not None
        text, expiry = await snapshot(run, conversation)
        assert text == before[0], "the record changed"
        if before[1] is not None:
            assert expiry is not None
            assert expiry <= before[1] + 0.5, "the expiry was extended"
            assert expiry >= before[1] - EXPIRY_TOLERANCE_S
        return
    assert isinstance(record, Record), f"expected a record for {conversation}"
    for field in ("turn", "state", "pending", "model"):
        if field in wanted:
            assert same(getattr(record, field), wanted[field]), (
                f"record.{field}: {getattr(record, field)!r} != {wanted[field]!r}"
            )
    if "turns_count" in wanted:
        assert len(record.turns) == wanted["turns_count"], record.turns
    if "expiry_s" in wanted:
        left = await run.leg.expiry(store, conversation)
        assert left is not None
        assert wanted["expiry_s"] - EXPIRY_TOLERANCE_S <= left <= wanted["expiry_s"], (
            f"expiry {left} is not about {wanted['expiry_s']}"
        )


async def check_redis(run: Run, expect: dict[str, Any], conversation: str | None) -> None:
    wanted = expect.get("redis")
    if wanted is None:
        return
    assert run.leg.kind in ("fakeredis", "redis-live"), "a redis expectation on another store"
    assert conversation is not None
    client = run.leg.inspector
    name = key(conversation)
    assert name == f"transcript:{{{conversation}}}"
    assert await client.type(name) == wanted["type"]
    fields = await client.hgetall(name)
    assert sorted(fields) == wanted["fields"]
    assert fields["turn"] == wanted["turn"]
    assert Record.from_json(fields["record"]).turn == int(wanted["turn"])
    ttl = await client.ttl(name)
    assert wanted["ttl_s"] - EXPIRY_TOLERANCE_S <= ttl <= wanted["ttl_s"], ttl


async def run_step(run: Run, number: int, step: dict[str, Any]) -> None:
    expect = step["expect"]
    if "sleep_ms" in step:
        await asyncio.sleep(step["sleep_ms"] / 1000)
    if "restart" in step:
        await run.shutdown()
        run.boot({**run.params, **step["restart"].get("params", {})})
    if step.get("store_down"):
        await run.leg.take_down(run.cells)
    body = run.body(step)
    loop = body.get("loop") if isinstance(body, dict) else None
    asked = loop.get("conversation") if isinstance(loop, dict) else None
    asked = asked if isinstance(asked, str) else None
    before = None
    if expect.get("store") == "unchanged":
        assert asked is not None, "store 'unchanged' needs a continuation"
        before = await snapshot(run, asked)
    sent = len(run.server.requests)
    concurrent = int(step.get("concurrent", 0))
    if concurrent:
        contents = await asyncio.gather(*(send(c, body) for c in run.cells[:concurrent]))
        codes = sorted(c["header"].get("status_code") for c in contents)
        assert codes == sorted(expect["status_codes"]), contents
        winners = [c for c in contents if c["header"].get("status_code") == 200]
        content = winners[0] if winners else contents[0]
        for loser in contents:
            if loser is not content:
                check_reply(loser, {"status_code": loser["header"]["status_code"]}, asked)
    else:
        content = await send(run.cells[step.get("replica", 0)], body)
    calls = len(run.server.requests) - sent
    status = expect.get("status_code", 200 if concurrent else None)
    check_reply(content, {**expect, "status_code": status}, asked)
    if not concurrent:
        wanted_calls = expect.get("provider_calls", len(step.get("script", [])))
        assert calls == wanted_calls, f"step {number}: {calls} provider call(s), not {wanted_calls}"
    if calls:
        check_request(run.server.requests[-1], expect)
    else:
        assert "request" not in expect, f"step {number} expects a request but none was sent"
    if step.get("store_down"):
        assert run.leg.kind in ("sqlite", "redis-live", "fakeredis", "postgres")
        store_name = run.leg.kind if run.leg.kind in ("sqlite", "postgres") else "redis"
        assert f"unreachable - {store_name}" in content.get("error", ""), content
        return  # nothing more can be read from a store that is down
    header = content["header"]
    conversation = asked or (header.get("conversation") if status == 200 else None)
    if status == 200:
        run.conversation = header["conversation"]
    await check_store(run, expect, conversation, before)
    await check_redis(run, expect, conversation)
    if concurrent and status == 200 and conversation is not None:
        record = await run.cells[0].transcript().read(conversation)
        if record is not None and record.state == "open":
            assert record.pending == [c["id"] for c in content["calls"]], "not the winner's calls"


@contextlib.asynccontextmanager
async def leg_for(kind: str, folder: Path, pg: PgSchema | None = None) -> AsyncIterator[Leg]:
    if kind == "redis-live":
        skip_without_live_redis()
    leg = Leg(kind, folder, pg)
    try:
        await leg.start()
        yield leg
    finally:
        await leg.close()


async def run_case(
    kind: str, case: dict[str, Any], folder: Path, pg: PgSchema | None = None
) -> None:
    provider = case.get("provider", "anthropic")
    script = [script_item(item) for step in case["steps"] for item in step.get("script", [])]
    async with leg_for(kind, folder, pg) as leg, SERVERS[provider](script) as server:
        params = {
            "provider": provider,
            "model": DEFAULT_MODELS[provider],
            "api_key": "sk-test-vectors",
            "base_url": server.url,
            "max_retries": 0,
            **case.get("params", {}),
        }
        run = Run(case, leg, server, params)
        run.boot(params)
        try:
            for number, step in enumerate(case["steps"], start=1):
                try:
                    await run_step(run, number, step)
                except AssertionError as failure:
                    failure.add_note(f"in step {number} of {case['id']} on {kind}")
                    raise
        finally:
            await run.shutdown()


def _cases() -> list[Any]:
    out = []
    for case in DOC["cases"]:
        marks = []
        if "xfail" in case:
            marks.append(pytest.mark.xfail(reason=case["xfail"], strict=True))
        for kind in STORES:
            if kind in case.get("stores", STORES):
                out.append(pytest.param(kind, case, id=f"{kind}:{case['id']}", marks=marks))
    return out


@pytest.mark.parametrize(("kind", "case"), _cases())
async def test_the_loop_vector_holds_on_this_store(
    kind: str, case: dict[str, Any], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    pg = request.getfixturevalue("pg_schema") if kind == "postgres" else None
    await run_case(kind, case, tmp_path, pg)


# -- the file itself ----------------------------------------------------------------------------


def test_the_vector_file_covers_every_loop_vector_of_the_spec() -> None:
    assert DOC["contract"] == "llm-loop-turn"
    assert DOC["version"] == 1
    assert isinstance(DOC["format"], str)
    assert DOC["format"]
    numbers = {c["vector"] for c in DOC["cases"] if "vector" in c}
    assert set(range(1, 29)) <= numbers, sorted(set(range(1, 29)) - numbers)
    providers = {c.get("provider", "anthropic") for c in DOC["cases"]}
    assert {"anthropic", "openai", "gemini"} <= providers


def test_every_case_has_a_unique_id_and_a_sentence_for_a_name() -> None:
    ids = [c["id"] for c in DOC["cases"]]
    assert len(ids) == len(set(ids))
    for case in DOC["cases"]:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", case["id"]), case["id"]
        name = case["name"]
        assert name[0].isupper(), name
        assert name.endswith("."), name
        assert " " in name, name
        assert set(case.get("stores", STORES)) <= set(STORES)
        assert case["steps"], case["id"]


def test_the_vector_file_holds_no_float() -> None:
    def walk(value: Any, where: str) -> None:
        assert not isinstance(value, float), f"a float at {where}"
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{where}.{k}")
        elif isinstance(value, list):
            for n, v in enumerate(value):
                walk(v, f"{where}.{n}")

    walk(json.loads(VECTORS.read_text(encoding="utf-8")), "$")
