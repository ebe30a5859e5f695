"""``GET /colony/events`` over a real socket: live, filtered, bounded, resumable."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from httpx_sse import aconnect_sse

from colony.events import BUFFER, Interest
from colony.livestream import SLACK_MS
from colony.livestream import dropped as dropped_frame
from colony.testing import ColonyHarness, ScriptedOpenAI, text_reply
from tests.api_client import Api, served
from tests.conftest import TreeFactory, cell, hive

USER = {"messages": [{"origin": "user", "type": "text", "text": "hi"}]}
ECHO = "import sys,json; d=json.load(sys.stdin); print(json.dumps({'messages': d['body']['messages']}))"


@pytest.fixture
async def api(make_tree: TreeFactory) -> AsyncIterator[Api]:
    tree = make_tree(
        {
            "main/config.json": hive(
                {"from": ".", "to": "./box"}, {"from": "./box/echo", "to": "/sink"}
            ),
            "main/box/config.json": hive({"from": ".", "to": "./echo", "condition": "has(hop.go)"}),
            "main/box/echo/config.json": cell("code", {"script_inline": ECHO}),
        }
    )
    async with ColonyHarness(tree, capture=["/sink"]) as colony, served(colony) as api:
        yield api


class Listener:
    """One SSE client: the events it got so far, gathered by a task."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict[str, Any]]] = []
        self.task: asyncio.Task[None] | None = None
        self.open = asyncio.Event()
        self.changed = asyncio.Event()

    def kinds(self, trace_id: str | None = None) -> list[str]:
        return [k for _, k, d in self.events if trace_id is None or d.get("trace_id") == trace_id]

    async def until(self, check: Any, within: float = 10.0) -> None:
        async with asyncio.timeout(within):
            while not check():
                self.changed.clear()
                await self.changed.wait()


@asynccontextmanager
async def listening(
    api: Api, params: dict[str, str] | None = None, headers: dict[str, str] | None = None
) -> AsyncIterator[Listener]:
    listener = Listener()
    client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{api.port}", trust_env=False, timeout=30)

    async def run() -> None:
        async with aconnect_sse(
            client, "GET", "/colony/events", params=params or {}, headers=headers or {}
        ) as source:
            assert source.response.status_code == 200
            listener.open.set()
            async for sse in source.aiter_sse():
                listener.events.append((sse.id, sse.event, json.loads(sse.data)))
                listener.changed.set()

    listener.task = asyncio.create_task(run())
    try:
        await asyncio.wait_for(listener.open.wait(), 5)
        await asyncio.sleep(0.05)  # the watcher is registered before the response starts
        yield listener
    finally:
        listener.task.cancel()
        await asyncio.gather(listener.task, return_exceptions=True)
        await client.aclose()


async def post(api: Api, **extra: Any) -> str:
    doc = {"target": "/", "body": USER, "hop": {"go": True}, **extra}
    response = await api.client.post("/messages", json=doc)
    assert response.status_code == 202, response.text
    return str(response.json()["trace_id"])


async def test_two_clients_see_each_routing_decision_and_handling_live(api: Api) -> None:
    async with listening(api) as one, listening(api) as two:
        trace = await post(api)
        for listener in (one, two):
            await listener.until(lambda lis=listener: lis.kinds(trace).count("route") == 4)
            await listener.until(lambda lis=listener: "handle_end" in lis.kinds(trace))
        routes = [d for _, k, d in one.events if k == "route" and d["trace_id"] == trace]
        assert [(r["from"], r["to"]) for r in routes] == [
            ("@external", "/"),
            ("/", "/box"),
            ("/box", "/box/echo"),
            ("/box/echo", "/sink"),
        ]
        # At a hive transit, the hive's out-edges that fired (<hive>#<index>); none into a cell.
        assert [r["edges"] for r in routes] == [["/#0"], ["/box#0"], [], []]
        assert [r["ttl"] for r in routes] == sorted((r["ttl"] for r in routes), reverse=True)
        [start] = [d for _, k, d in one.events if k == "handle_start" and d["cell"] != "/sink"]
        [end] = [d for _, k, d in one.events if k == "handle_end" and d["cell"] != "/sink"]
        assert (start["cell"], end["cell"], end["outcome"]) == ("/box/echo", "/box/echo", "ok")
        assert end["duration_ms"] >= 0
        assert end["started_ms"] <= end["at_ms"]
        assert one.kinds(trace) == two.kinds(trace)
        ids = [i for i, _, _ in one.events]
        assert len(set(ids)) == len(ids)
        assert all(i.split("-")[0].isdigit() for i in ids)


async def test_a_watcher_gets_only_the_trace_cells_and_kinds_it_asks_for(api: Api) -> None:
    first = await post(api)
    await api.colony.settle()
    async with (
        listening(api, {"kind": "handle_end,dead_letter"}) as ends,
        listening(api, {"cell": "/box"}) as boxed,
    ):
        trace = await post(api)
        async with listening(api, {"trace_id": trace}) as traced:
            other = await post(api)
            await ends.until(lambda: ends.kinds(other) == ["handle_end", "handle_end"])
            await boxed.until(lambda: "handle_end" in boxed.kinds(other))
            assert {d["trace_id"] for _, _, d in traced.events} <= {trace}
        assert set(ends.kinds()) == {"handle_end"}
        for _, _kind, data in boxed.events:
            touched = [data.get(k) for k in ("cell", "from", "to")]
            assert any(isinstance(p, str) and p.startswith("/box") for p in touched), data
        assert first not in {d["trace_id"] for _, _, d in boxed.events}


async def test_an_unknown_kind_is_refused_naming_the_known_ones(api: Api) -> None:
    response = await api.client.get("/colony/events", params={"kind": "route,gossip"})
    assert response.status_code == 400
    assert response.json()["error"] == "bad_query"
    assert "gossip" in response.json()["detail"]
    assert "handle_end" in response.json()["detail"]


async def test_a_dead_letter_is_an_event_with_its_code(api: Api) -> None:
    async with listening(api, {"kind": "dead_letter"}) as letters:
        response = await api.client.post("/messages", json={"target": "/nowhere", "body": USER})
        trace = response.json()["trace_id"]
        await letters.until(lambda: letters.kinds(trace) == ["dead_letter"])
    [(_, _, letter)] = letters.events
    assert letter["error_code"] == "unresolved_path"
    assert letter["target"] == "/nowhere"


async def test_a_slow_watcher_is_told_what_it_lost_and_gets_it_back_from_the_record(
    api: Api,
) -> None:
    events = api.colony.colony.events
    watcher = events.watch(Interest())
    traces = [await post(api) for _ in range(3)]
    await api.colony.settle()
    read, dropped = await watcher.next_batch()  # it read up to here
    assert dropped == 0
    assert {e.data["trace_id"] for e in read} >= set(traces)
    resume_from = read[-1].id
    watcher.limit = 0  # then it stopped reading: its buffer is full
    await asyncio.sleep(0.005)  # (the resumption point's millisecond is over)
    more = [await post(api) for _ in range(3)]
    await api.colony.settle()
    batch, dropped = await watcher.next_batch()
    events.unwatch(watcher)
    assert batch == []
    assert dropped == 3 * 8  # per message: 4 routes, a start and an end at /box/echo and /sink
    assert b'"resume_from":"' + resume_from.encode() in dropped_frame(dropped, resume_from)
    async with listening(api, {"kind": "route"}, {"Last-Event-ID": resume_from}) as back:
        for trace in more:
            await back.until(lambda t=trace: back.kinds(t).count("route") == 4)
    seen = {d["trace_id"] for _, _, d in back.events}
    assert set(more) <= seen
    # From the resumption point on, less the slack that covers events published out of order.
    since = int(resume_from.split("-")[0]) - SLACK_MS
    assert all(d["at_ms"] >= since for _, _, d in back.events)


async def test_the_stream_stays_bounded_and_routing_goes_on_while_a_client_reads_nothing(
    api: Api,
) -> None:
    client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{api.port}", trust_env=False)
    async with client.stream("GET", "/colony/events") as stalled:  # opened, never read
        assert stalled.status_code == 200
        traces = [await post(api) for _ in range(40)]
        await api.colony.settle()
        assert len(api.colony.captured("/sink")) == len(traces)
        [watcher] = api.colony.colony.events.watchers
        assert len(watcher.queue) <= BUFFER
    await client.aclose()


async def test_runs_stats_trace_and_registry_show_what_happened(api: Api) -> None:
    ok = await post(api)
    bad_response = await api.client.post("/messages", json={"target": "/nowhere", "body": USER})
    bad = bad_response.json()["trace_id"]
    await api.colony.settle()
    runs = (await api.client.get("/colony/runs")).json()["runs"]
    by_trace = {r["trace_id"]: r for r in runs}
    assert [r["trace_id"] for r in runs[:2]] == [bad, ok]  # newest first
    assert by_trace[ok]["outcome"] == "answered"
    assert by_trace[ok]["hops"] == 4
    assert by_trace[ok]["entry"] == "/"
    assert by_trace[ok]["duration_ms"] >= 0
    assert by_trace[bad]["outcome"] == "dead_lettered"
    assert by_trace[bad]["dead_letters"] == 1
    answered = (await api.client.get("/colony/runs", params={"outcome": "answered"})).json()
    assert [r["trace_id"] for r in answered["runs"]] == [ok]
    boxed = (await api.client.get("/colony/runs", params={"cell_prefix": "/box"})).json()
    assert [r["trace_id"] for r in boxed["runs"]] == [ok]

    whole = (await api.client.get("/colony/trace", params={"trace_id": ok})).json()
    assert all(isinstance(r["at_ms"], int) for r in whole["trace"])
    [handled] = [h for h in whole["handling"] if h["cell"] == "/box/echo"]
    assert (handled["cell"], handled["cell_type"], handled["outcome"]) == (
        "/box/echo",
        "code",
        "ok",
    )
    assert handled["duration_ms"] >= 0
    assert handled["model"] is None
    letters = (await api.client.get("/colony/trace", params={"trace_id": bad})).json()
    assert [d["error_code"] for d in letters["dead_letters"]] == ["unresolved_path"]

    stats = (await api.client.get("/colony/stats")).json()["stats"]
    assert stats["decisions"] >= 5
    assert stats["dead_letters"] == 1
    assert len(stats["series"]) == 60
    assert sum(b["decisions"] for b in stats["series"]) >= 5
    [echo] = (await api.client.get("/colony/registry", params={"path": "/box/echo"})).json()[
        "registry"
    ]
    assert (echo["handled"], echo["failures"], echo["busy"], echo["mailbox_depth"]) == (1, 0, 0, 0)


async def test_a_run_is_in_flight_until_its_last_delivery_is_handled(
    make_tree: TreeFactory,
) -> None:
    slow = "import sys,json,time; time.sleep(1.5); d=json.load(sys.stdin); print(json.dumps({'messages': d['body']['messages']}))"
    tree = make_tree(
        {
            "main/config.json": hive(
                {"from": ".", "to": "./slow"}, {"from": "./slow", "to": "/sink"}
            ),
            "main/slow/config.json": cell("code", {"script_inline": slow}),
        }
    )
    async with ColonyHarness(tree, capture=["/sink"]) as colony, served(colony) as api:
        response = await api.client.post("/messages", json={"target": "/", "body": USER})
        trace = response.json()["trace_id"]
        await asyncio.sleep(0.5)
        [run] = (await api.client.get("/colony/runs")).json()["runs"]
        assert (run["trace_id"], run["outcome"]) == (trace, "in_flight")
        [slow_cell] = (await api.client.get("/colony/registry", params={"path": "/slow"})).json()[
            "registry"
        ]
        assert slow_cell["busy"] == 1
        await colony.settle()
        [run] = (await api.client.get("/colony/runs")).json()["runs"]
        assert run["outcome"] == "answered"


async def test_an_llm_call_is_accounted_with_its_model_latency_and_tokens(
    make_tree: TreeFactory,
) -> None:
    tree = make_tree(
        {
            "main/config.json": hive(
                {"from": ".", "to": "./brain"}, {"from": "./brain", "to": "/sink"}
            ),
            "main/brain/config.json": cell(
                "llm", {"provider": "openai", "model": "gpt-test", "api_key": "k"}
            ),
        }
    )
    reply = text_reply("hello", model="gpt-test-0613", prompt_tokens=21, completion_tokens=8)
    async with (
        ScriptedOpenAI([reply]) as model,
        ColonyHarness(tree, capture=["/sink"], llm_base_url=model.url) as colony,
        served(colony) as api,
        listening(api, {"kind": "llm"}) as calls,
    ):
        response = await api.client.post("/messages", json={"target": "/", "body": USER})
        trace = response.json()["trace_id"]
        await calls.until(lambda: calls.kinds(trace) == ["llm"])
        await colony.settle()
        [(_, _, call)] = calls.events
        assert (call["cell"], call["model"]) == ("/brain", "gpt-test-0613")
        assert (call["tokens_prompt"], call["tokens_completion"]) == (21, 8)
        assert call["latency_ms"] >= 0
        whole = (await api.client.get("/colony/trace", params={"trace_id": trace})).json()
        [brain] = [h for h in whole["handling"] if h["cell"] == "/brain"]
        assert (brain["model"], brain["tokens_prompt"], brain["tokens_completion"]) == (
            "gpt-test-0613",
            21,
            8,
        )
        [run] = (await api.client.get("/colony/runs")).json()["runs"]
        assert (run["llm_calls"], run["tokens_prompt"], run["tokens_completion"]) == (1, 21, 8)


async def test_with_the_message_log_off_handlings_are_not_kept_but_still_stream(
    make_tree: TreeFactory,
) -> None:
    tree = make_tree(
        {
            "main/config.json": hive(
                {"from": ".", "to": "./echo"}, {"from": "./echo", "to": "/sink"}
            ),
            "main/echo/config.json": cell("code", {"script_inline": ECHO}),
        }
    )
    async with (
        ColonyHarness(tree, capture=["/sink"], log_messages=False) as colony,
        served(colony) as api,
        listening(api, {"kind": "handle_end"}) as ends,
    ):
        response = await api.client.post("/messages", json={"target": "/", "body": USER})
        trace = response.json()["trace_id"]
        await ends.until(lambda: ends.kinds(trace) == ["handle_end", "handle_end"])
        await colony.settle()
        whole = (await api.client.get("/colony/trace", params={"trace_id": trace})).json()
        assert (whole["trace"], whole["handling"]) == ([], [])
