"""At-least-once delivery: what sits in a mailbox is journalled in ``colony.db`` and comes back
after a restart, in order, exactly the messages that were not done."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from colony.cell import CellClass, CellSpec, CellType
from colony.config.loader import cluster_of
from colony.envelope import Envelope, source_message
from colony.persist.source import source_for_root
from colony.testing import ColonyHarness


def _tree(tmp: Path) -> Path:
    """A root hive with one cell, ``/slow``, whose every emission goes to ``/sink``."""
    root = tmp / "tree"
    (root / "main" / "slow").mkdir(parents=True)
    (root / "main" / "config.json").write_text(
        json.dumps(
            {
                "cell": {"type": "hive"},
                "params": {"graph": {"edges": [{"from": "slow", "to": "/sink"}]}},
            }
        )
    )
    (root / "main" / "slow" / "config.json").write_text(
        json.dumps(
            {
                "cell": {"type": "gate", "timeout": -1},
                "contract": {"version": "1", "settings": {}, "consumes": {}},
            }
        )
    )
    return root


class _Gate:
    """Passes each message's body on once ``opened`` is set; records what it started."""

    def __init__(self, opened: asyncio.Event, started: list[str]) -> None:
        self.opened = opened
        self.started = started

    async def handle(self, message: Envelope) -> list[Any]:
        self.started.append(_n(message))
        await self.opened.wait()
        return [message.body]


def _body(n: str) -> dict[str, Any]:
    return {"messages": [{"origin": "user", "type": "text", "text": n}]}


def _n(message: Envelope) -> str:
    text: str = message.body["messages"][0]["text"]
    return text


def _gate(opened: asyncio.Event, started: list[str]) -> dict[str, CellType]:
    factory: Callable[[CellSpec], _Gate] = lambda spec: _Gate(opened, started)  # noqa: E731
    return {"gate": CellType("gate", CellClass.STATEFUL, factory)}


def _journal(work: Path) -> list[tuple[str, str]]:
    """The journal's rows, in the colony's database (``--backend postgres``: the cluster's)."""
    root = work / "colony"
    cluster = cluster_of(root)
    source = source_for_root(root, None if cluster is None else cluster.dsn)
    return [(r[0], r[1]) for r in source.select("SELECT cell, body FROM journal ORDER BY seq")]


async def _fill_and_stop(work: Path, tree: Path, count: int, **colony: Any) -> list[str]:
    """Boot, send ``count`` messages to a gate that never opens, stop with them in flight."""
    started: list[str] = []
    closed = asyncio.Event()
    async with ColonyHarness(
        tree, capture=["/sink"], cell_types=_gate(closed, started), workdir=work, colony=colony
    ) as harness:
        for n in range(count):
            await harness.send("/slow", _body(f"m{n}"))
        for _ in range(200):
            if started:
                break
            await asyncio.sleep(0.01)
    return started


@contextlib.asynccontextmanager
async def _reboot(tree: Path, work: Path, started: list[str]) -> AsyncIterator[ColonyHarness]:
    """Boot ``work`` again with the gate open and let it settle."""
    opened = asyncio.Event()
    opened.set()
    async with ColonyHarness(
        tree, capture=["/sink"], cell_types=_gate(opened, started), workdir=work
    ) as harness:
        await harness.settle()
        yield harness


async def test_messages_in_flight_at_shutdown_are_delivered_after_the_restart_in_order(
    tmp_path: Path,
) -> None:
    tree = _tree(tmp_path)
    started = await _fill_and_stop(tmp_path / "work", tree, 3)
    assert started == ["m0"]  # m0 was being handled, m1 and m2 were queued
    assert [cell for cell, _ in _journal(tmp_path / "work")] == ["/slow"] * 3

    again: list[str] = []
    async with _reboot(tree, tmp_path / "work", again) as harness:
        assert again == ["m0", "m1", "m2"]
        assert [_n(m) for m in harness.captured("/sink")] == ["m0", "m1", "m2"]
        (line,) = harness.logs("journal_redelivered")
        assert line["messages"] == 3
        assert line["cells"] == {"/slow": 3}
        assert [s["cell"] for s in line["sample"]] == ["/slow"] * 3
    assert _journal(tmp_path / "work") == []


async def test_a_handled_message_leaves_the_journal_with_its_follow_ups_delivered(
    tmp_path: Path,
) -> None:
    opened = asyncio.Event()
    opened.set()
    async with ColonyHarness(
        _tree(tmp_path), capture=["/sink"], cell_types=_gate(opened, []), workdir=tmp_path / "w"
    ) as harness:
        for n in range(5):
            await harness.send("/slow", _body(f"m{n}"))
        await harness.settle()
        assert len(harness.captured("/sink")) == 5
        assert harness.colony.db.journalled == 10  # five to /slow, five to /sink
        assert _journal(tmp_path / "w") == []
        assert len(await harness.message_log()) == 10


async def test_at_most_once_journals_nothing_and_a_restart_brings_nothing_back(
    tmp_path: Path,
) -> None:
    tree = _tree(tmp_path)
    started = await _fill_and_stop(tmp_path / "work", tree, 3, delivery="at_most_once")
    assert started == ["m0"]
    assert _journal(tmp_path / "work") == []
    again: list[str] = []
    async with _reboot(tree, tmp_path / "work", again) as harness:
        assert again == []
        assert harness.logs("journal_redelivered") == []


async def test_an_ingress_key_taken_in_twice_is_delivered_once(tmp_path: Path) -> None:
    opened = asyncio.Event()
    opened.set()
    async with ColonyHarness(
        _tree(tmp_path), capture=["/sink"], cell_types=_gate(opened, [])
    ) as harness:
        first = source_message("/slow", _body("once"))
        second = source_message("/slow", _body("once"))
        assert await harness.colony.send(first, key="update:7") is True
        assert await harness.colony.send(second, key="update:7") is False
        assert await harness.colony.send(source_message("/slow", _body("b")), key="update:8")
        await harness.settle()
        assert [_n(m) for m in harness.captured("/sink")] == ["once", "b"]
        assert len(harness.logs("ingress_duplicate")) == 1


async def test_a_journalled_message_whose_cell_left_the_tree_is_dead_lettered_not_lost(
    tmp_path: Path,
) -> None:
    tree = _tree(tmp_path)
    work = tmp_path / "work"
    await _fill_and_stop(work, tree, 2)
    copy = work / "colony" / "main"
    (copy / "slow" / "config.json").unlink()
    (copy / "slow").rmdir()
    (copy / "config.json").write_text(json.dumps({"cell": {"type": "hive"}}))
    async with ColonyHarness(tree, capture=["/sink"], workdir=work) as harness:
        await harness.settle()
        letters = await harness.dead_letters("unresolved_path")
        assert [_n(letter.message) for letter in letters] == ["m0", "m1"]
        assert harness.logs("journal_redelivered")[0]["dead_lettered"] == 2
    assert _journal(work) == []


@pytest.mark.parametrize("delivery", ["at_least_once", "at_most_once"])
async def test_the_delivery_switch_reaches_the_colony(tmp_path: Path, delivery: str) -> None:
    opened = asyncio.Event()
    opened.set()
    async with ColonyHarness(
        _tree(tmp_path),
        capture=["/sink"],
        cell_types=_gate(opened, []),
        colony={"delivery": delivery},
    ) as harness:
        assert harness.colony.at_least_once is (delivery == "at_least_once")


@pytest.mark.sqlite_only  # a cluster member claims a partition's rows whole
async def test_a_journal_larger_than_the_mailbox_bounds_is_redelivered_a_page_at_a_time(
    tmp_path: Path,
) -> None:
    tree = _tree(tmp_path)
    work = tmp_path / "work"
    pad = "p" * 5_000
    closed = asyncio.Event()
    async with ColonyHarness(
        tree, capture=["/sink"], cell_types=_gate(closed, []), workdir=work
    ) as harness:
        for n in range(300):  # about 1.5 MB journalled for /slow
            body = _body(f"m{n}")
            body["pad"] = pad
            await harness.send("/slow", body)
    settings = work / "colony" / "colony.json"
    settings.write_text(json.dumps({"mailbox_max_bytes": 100_000}))

    started: list[str] = []
    opened = asyncio.Event()
    peak = [0]
    async with ColonyHarness(
        tree, capture=["/sink"], cell_types=_gate(opened, started), workdir=work
    ) as harness:
        colony = harness.colony
        stats = colony.runners["/slow"].mailbox.statistics()
        assert stats.queued == 300  # all of it is the cell's, most of it still on disk
        assert stats.queued_bytes == 0  # nothing is read before the cell asks
        assert colony.redelivered == 300

        async def watch() -> None:
            while True:
                peak[0] = max(peak[0], colony.queued.value)
                await asyncio.sleep(0)

        watcher = asyncio.create_task(watch())
        opened.set()
        await harness.settle()
        watcher.cancel()
        assert started == [f"m{n}" for n in range(300)]  # in order, each once
        assert [_n(m) for m in harness.captured("/sink")] == started
    assert 0 < peak[0] <= 100_000 + 6_000  # the bound, plus the one message always let in
    assert _journal(work) == []
