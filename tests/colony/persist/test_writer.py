"""The colony.db writer: one unit that cannot be stored fails alone, and the writer is never
left failed (issue 15, item 11)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from colony.cell import CellClass, CellType
from colony.effects import Delivery, LogRow
from colony.envelope import Envelope, source_message
from colony.persist.db import ColonyDb, UnitRejected
from colony.persist.items import Unit
from colony.persist.records import read_registry
from colony.persist.rows import UNSTORABLE
from colony.testing import ColonyHarness
from tests.conftest import TreeFactory, cell, hive

BODY = {"messages": [{"origin": "user", "type": "text", "text": "ping"}]}


def _text(body: dict[str, Any]) -> str:
    text: str = body["messages"][0]["text"]
    return text


def _journal_rows(db: Path) -> list[tuple[str, str]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT id, cell FROM journal ORDER BY seq").fetchall()
    finally:
        conn.close()


async def test_a_unit_that_cannot_be_stored_fails_alone_and_its_message_is_dead_lettered(
    tmp_path: Path,
) -> None:
    db = ColonyDb(tmp_path / "colony.db")
    handled = [source_message("/cell", BODY) for _ in range(3)]
    try:
        # Three messages journalled for /cell, as deliveries are.
        await db.commit(Unit(deliveries=[Delivery("/cell", m, "/") for m in handled]))
        assert [row[0] for row in _journal_rows(db.path)] == [m.id for m in handled]

        # Hold the write lock so the next three units queue up and share one batch.
        blocker = sqlite3.connect(db.path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        poison = source_message("/sink", BODY)
        poison.created_at = 2**64  # no SQLite INTEGER holds it
        units = [
            Unit(ack=(m.id, "/cell"), message=m, logs=[LogRow(m, "/", "/cell", 5)]) for m in handled
        ]
        units[1].logs.append(LogRow(poison, "/cell", "/sink", 4))
        commits = [asyncio.ensure_future(db.commit(unit)) for unit in units]
        await asyncio.sleep(0.05)  # all three are queued behind the lock
        blocker.execute("ROLLBACK")
        blocker.close()
        results = await asyncio.gather(*commits, return_exceptions=True)

        assert results[0] is None
        assert results[2] is None
        assert isinstance(results[1], UnitRejected)
        assert "too large" in str(results[1])
        assert _journal_rows(db.path) == []  # neither kept for a redelivery at every boot
        (letter,) = await db.dead_letters()
        assert letter.error_code == UNSTORABLE
        assert letter.message_id == handled[1].id
        assert letter.detail is not None
        assert "too large" in letter.detail
        logged = await db.message_log()
        assert [row.id for row in logged] == [handled[0].id, handled[2].id]

        # The writer is not left failed: later units commit and reads work.
        await db.commit(Unit(deliveries=[Delivery("/cell", source_message("/cell", BODY), "/")]))
        assert len(_journal_rows(db.path)) == 1
        assert db.unavailable() is None
    finally:
        db.close()


async def test_a_lone_surrogate_is_stored_escaped_and_reads_back_as_the_same_string(
    tmp_path: Path,
) -> None:
    db = ColonyDb(tmp_path / "colony.db")
    odd = "bad \ud800 and caf\udce9"
    runner = SimpleNamespace(path="/caf\udce9")  # a folder whose name is not UTF-8
    message = source_message(
        "/caf\udce9", {"messages": [{"origin": "user", "type": "text", "text": odd}]}
    )
    message.headers.context["k\udc80"] = odd
    try:
        unit = Unit(deliveries=[Delivery(runner.path, message, "/")], key="http:\udcff")
        unit.logs.append(LogRow(message, "@external", "/caf\udce9", message.ttl))
        await db.commit(unit)
        (row,) = await db.message_log()
        assert _text(row.body) == odd
        assert row.headers["context"] == {"k\udc80": odd}
        assert row.to_path == "/caf\\udce9"  # plain text columns spell the surrogate out
        snapshot = db.journal()
        (entry,) = snapshot.page("/caf\\udce9", 0)
        assert entry.message.body == message.body
        assert entry.message.target == "/caf\udce9"
        db.set_registry("/caf\udce9", "id-1", "code", "active")
        await db.flush()
        assert {p: r.cell_id for p, r in read_registry(db.source).items()} == {
            "/caf\\udce9": "id-1"
        }
        assert db.statistics().rejected == 0
    finally:
        db.close()


class _Emitter:
    """Emits whatever the message asks for: a lone surrogate, or a body no JSON can hold."""

    async def handle(self, message: Envelope) -> list[Any]:
        text = _text(message.body)
        if text == "surrogate":
            return [{"messages": [{"origin": "assistant", "type": "text", "text": "\ud800!"}]}]
        if text == "deep":
            deep: list[Any] = []
            for _ in range(100_000):
                deep = [deep]
            return [{**message.body, "deep": deep}]
        return [message.body]


def _emitter_tree(make_tree: TreeFactory) -> Path:
    return make_tree(
        {
            "main/config.json": hive(
                {"from": ".", "to": "./emitter"}, {"from": "emitter", "to": "/sink"}
            ),
            "main/emitter/config.json": cell("emitter"),
        }
    )


def _emitter_type() -> dict[str, CellType]:
    make = lambda spec: _Emitter()  # noqa: E731
    factory: Any = make
    return {"emitter": CellType("emitter", CellClass.STATEFUL, factory)}


def _say(text: str) -> dict[str, Any]:
    return {"messages": [{"origin": "user", "type": "text", "text": text}]}


async def test_a_cell_emission_that_cannot_be_stored_dead_letters_its_input_and_the_colony_goes_on(
    make_tree: TreeFactory,
) -> None:
    async with ColonyHarness(
        _emitter_tree(make_tree), capture=["/sink"], cell_types=_emitter_type()
    ) as colony:
        await colony.send("/emitter", _say("surrogate"))
        await colony.send("/emitter", _say("deep"))
        await colony.send("/emitter", _say("after"))
        await colony.settle()
        texts = [_text(m.body) for m in colony.captured("/sink")]
        assert texts == ["\ud800!", "after"]  # the unstorable one was not delivered
        (letter,) = await colony.dead_letters()
        assert letter.error_code == UNSTORABLE
        assert _text(letter.message.body) == "deep"
        (line,) = colony.logs("unit_rejected", "error")
        assert line["cell"] == "/emitter"
        assert "RecursionError" in line["error"]
        bodies = [_text(r.body) for r in await colony.message_log() if r.to_path == "/sink"]
        assert bodies == ["\ud800!", "after"]
        assert colony.colony.db.unavailable() is None
        assert colony.colony.admission() is None


async def test_an_ingress_that_cannot_be_stored_is_refused_not_acknowledged(
    make_tree: TreeFactory,
) -> None:
    async with ColonyHarness(
        _emitter_tree(make_tree), capture=["/sink"], cell_types=_emitter_type()
    ) as colony:
        deep: list[Any] = []
        for _ in range(100_000):
            deep = [deep]
        message = source_message("/emitter", {**_say("x"), "deep": deep})
        with pytest.raises(UnitRejected):
            await colony.colony.send(message)
        await colony.send("/emitter", _say("after"))
        await colony.settle()
        assert [_text(m.body) for m in colony.captured("/sink")] == ["after"]
        assert [d.message_id for d in await colony.dead_letters(UNSTORABLE)] == [message.id]
