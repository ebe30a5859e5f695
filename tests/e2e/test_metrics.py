"""``GET /metrics`` on a real colony: the text parses, and its counters move by what flowed."""

from __future__ import annotations

import signal
import time
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from colony.api import build_app, serve
from colony.testing import (
    ColonyHarness,
    ScriptedOpenAI,
    ScriptItem,
    error_status,
    text_reply,
)
from tests.api_client import Api, served
from tests.conftest import CONTRACT, TreeFactory, cell, hive
from tests.e2e.test_cli_daemon import start, wait_for_line

USER = {"messages": [{"origin": "user", "type": "text", "text": "hi"}]}
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Every sample of a scrape, by name and labels (parsing is the assertion that it parses)."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def scrape(api: Api) -> Samples:
    response = await api.client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=")
    return parse(response.text)


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def label_values(samples: Samples) -> set[str]:
    return {v for _, labels in samples for _, v in labels}


def relay_tree() -> dict[str, Any]:
    """``/`` passes what carries ``hop.go`` to ``/relay`` (a capture cell) and on to /sink;
    anything else dies at ``/`` with ``hive_no_route``."""
    return {
        "main/config.json": hive({"from": ".", "to": "./relay", "condition": "has(hop.go)"}),
    }


async def test_the_scrape_parses_and_its_counters_move_by_what_flowed(
    make_tree: TreeFactory,
) -> None:
    async with (
        ColonyHarness(make_tree(relay_tree()), capture=["/relay"]) as colony,
        served(colony) as api,
    ):
        before = await scrape(api)
        decisions = colony.colony.decisions
        traces = [await colony.send("/", USER, hop={"go": True}) for _ in range(3)]
        traces += [await colony.send("/", USER) for _ in range(2)]  # no edge fires
        traces.append(await colony.send("/nowhere/at-all", USER))
        await colony.settle()
        after = await scrape(api)
        assert moved(before, after, "colony_routing_decisions_total") == (
            colony.colony.decisions - decisions
        )
        assert moved(before, after, "colony_deliveries_total", cell="/relay") == 3
        assert (
            moved(
                before, after, "colony_cell_handling_seconds_count", cell="/relay", type="capture"
            )
            == 3
        )
        assert (
            moved(before, after, "colony_mailbox_wait_seconds_count", cell="/relay", type="capture")
            == 3
        )
        assert (
            moved(
                before,
                after,
                "colony_cell_handled_total",
                cell="/relay",
                type="capture",
                outcome="ok",
            )
            == 3
        )
        assert (
            moved(before, after, "colony_dead_letters_total", code="hive_no_route", cell="/") == 2
        )
        # A path that is no node of the tree never becomes a label: the letter counts under
        # its sender (the root hive, for an ingress).
        assert (
            moved(before, after, "colony_dead_letters_total", code="unresolved_path", cell="/") == 1
        )
        assert value(after, "colony_mailbox_messages", cell="/relay") == 0
        assert value(after, "colony_cells", state="awake") >= 1
        assert moved(before, after, "colony_journal_commit_seconds_count") > 0
        assert moved(before, after, "colony_journal_batch_items_sum") > 0
        assert value(after, "colony_storage_available") == 1
        ids = set(traces)
        for row in await colony.message_log():
            ids |= {row.id, row.trace_id}
        assert ids.isdisjoint(label_values(after)), "a message or trace id became a label"
        assert not any("nowhere" in v for v in label_values(after))


async def test_an_llm_colony_counts_calls_tokens_and_errors_by_provider_and_model(
    make_tree: TreeFactory,
) -> None:
    tree = {
        "main/config.json": hive(
            {"from": ".", "to": "./brain"}, {"from": "./brain", "to": "/sink"}
        ),
        "main/brain/config.json": {
            "cell": {"type": "llm"},
            "params": {"provider": "openai", "model": "m", "api_key": "k", "max_retries": 0},
            "contract": CONTRACT,
        },
    }
    script: list[ScriptItem] = [
        text_reply("one", model="gpt-scripted", prompt_tokens=11, completion_tokens=4),
        text_reply("two", model="gpt-scripted", prompt_tokens=9, completion_tokens=6),
        error_status(500, message="the provider is down"),
    ]
    async with (
        ScriptedOpenAI(script) as provider,
        ColonyHarness(make_tree(tree), capture=["/sink"], llm_base_url=provider.url) as colony,
        served(colony) as api,
    ):
        for _ in range(3):
            await colony.send("/", USER)
            await colony.settle()
        after = await scrape(api)
    answered = {"provider": "openai", "model": "gpt-scripted"}
    assert value(after, "colony_llm_calls_total", **answered) == 2
    assert value(after, "colony_llm_errors_total", **answered) == 0
    assert value(after, "colony_llm_tokens_total", **answered, kind="prompt") == 20
    assert value(after, "colony_llm_tokens_total", **answered, kind="completion") == 10
    assert value(after, "colony_llm_latency_seconds_count", **answered) == 2
    # The failed call carries no model of the provider's: it counts under the configured one.
    failed = {"provider": "openai", "model": "m"}
    assert value(after, "colony_llm_calls_total", **failed) == 1
    assert value(after, "colony_llm_errors_total", **failed) == 1
    assert (
        value(after, "colony_cell_handled_total", cell="/brain", type="llm", outcome="error") == 1
    )


async def test_a_pooled_code_cell_reports_its_workers_and_their_restarts(
    make_tree: TreeFactory,
) -> None:
    script = "import sys,json; json.load(sys.stdin); print(json.dumps({'messages': []}))"
    tree = {
        "main/config.json": hive({"from": ".", "to": "./worker"}),
        "main/worker/config.json": cell(
            "code",
            {"script_inline": script, "isolation": "pool", "pool_max_jobs": 1},
        ),
    }
    async with ColonyHarness(make_tree(tree)) as colony, served(colony) as api:
        before = await scrape(api)
        for _ in range(3):
            await colony.send("/", USER)
            await colony.settle()
        after = await scrape(api)
    # pool_max_jobs 1: every message's worker is recycled, and the next one starts anew.
    assert moved(before, after, "colony_code_worker_restarts_total", cell="/worker") == 3
    assert value(after, "colony_code_workers", cell="/worker") == 0
    assert (
        moved(before, after, "colony_cell_handled_total", cell="/worker", type="code", outcome="ok")
        == 3
    )


async def test_a_live_pool_worker_is_counted(make_tree: TreeFactory) -> None:
    script = "import sys,json; json.load(sys.stdin); print(json.dumps({'messages': []}))"
    tree = {
        "main/config.json": hive({"from": ".", "to": "./worker"}),
        "main/worker/config.json": cell("code", {"script_inline": script}),
    }
    async with ColonyHarness(make_tree(tree)) as colony, served(colony) as api:
        await colony.send("/", USER)
        await colony.settle()
        after = await scrape(api)
    assert value(after, "colony_code_workers", cell="/worker") == 1
    assert value(after, "colony_code_worker_restarts_total", cell="/worker") == 0


async def test_with_a_token_the_scrape_needs_it(make_tree: TreeFactory) -> None:
    async with ColonyHarness(make_tree(relay_tree()), capture=["/relay"]) as colony:
        runner = await serve(build_app(colony.colony, token="s3cret"), "127.0.0.1", 0)
        try:
            url = f"http://127.0.0.1:{runner.addresses[0][1]}/metrics"
            async with httpx.AsyncClient(trust_env=False) as client:
                assert (await client.get(url)).status_code == 401
                good = await client.get(url, headers={"Authorization": "Bearer s3cret"})
            assert good.status_code == 200
            parse(good.text)
        finally:
            await runner.cleanup()


async def test_two_apps_over_one_colony_count_each_handoff_once(make_tree: TreeFactory) -> None:
    async with ColonyHarness(make_tree(relay_tree()), capture=["/relay"]) as colony:
        build_app(colony.colony)
        async with served(colony) as api:
            await colony.send("/", USER, hop={"go": True})
            await colony.settle()
            after = await scrape(api)
    assert (
        value(after, "colony_cell_handled_total", cell="/relay", type="capture", outcome="ok") == 1
    )


def test_the_daemon_serves_metrics_with_its_code_workers(make_tree: TreeFactory) -> None:
    script = "import sys,json; json.load(sys.stdin); print(json.dumps({'messages': []}))"
    root = make_tree(
        {
            "main/config.json": hive({"from": ".", "to": "./worker"}),
            "main/worker/config.json": cell("code", {"script_inline": script}),
        }
    )
    handled = {"cell": "/worker", "type": "code", "outcome": "ok"}
    with start(root, "--api", "127.0.0.1:0") as process:
        url = wait_for_line(process, "HTTP API on").split("HTTP API on ", 1)[1].strip()
        with httpx.Client(base_url=url, trust_env=False, timeout=10) as client:
            assert client.post("/messages", json={"target": "/", "body": USER}).status_code == 202
            deadline = time.monotonic() + 20
            samples = parse(client.get("/metrics").text)
            while value(samples, "colony_cell_handled_total", **handled) < 1:
                assert time.monotonic() < deadline, "the message was never handled"
                time.sleep(0.05)
                samples = parse(client.get("/metrics").text)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    assert value(samples, "colony_code_workers", cell="/worker") == 1
    assert value(samples, "colony_deliveries_total", cell="/worker") == 1
