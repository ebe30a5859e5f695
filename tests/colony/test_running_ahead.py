"""Running ahead: a delivery to a cell whose type allows it (code, store) reaches the mailbox
before the unit that carries it is committed; the writer commits in order, so nothing a later
hand-off writes is durable before the hand-off that caused it."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from cells.code.params import runs_ahead as code_runs_ahead
from colony.cell import CellClass, CellSpec, CellType
from colony.effects import Delivery, LogRow
from colony.envelope import Envelope, source_message
from colony.persist.backend import Backend
from colony.persist.db import ColonyDb
from colony.persist.items import Unit
from colony.persist.rows import Rows
from colony.persist.schema import open_for_writing
from colony.testing import ColonyHarness, spec_for

pytestmark = (
    pytest.mark.sqlite_only
)  # running ahead of the commit: a cluster's units wait for their fence


def _tree(tmp: Path, *, mailbox_size: int | None = None) -> Path:
    """``/first`` passes each message on to ``/second``, which passes it on to ``/sink``."""
    root = tmp / "tree"
    edges = [{"from": "first", "to": "second"}, {"from": "second", "to": "/sink"}]
    (root / "main").mkdir(parents=True)
    (root / "main" / "config.json").write_text(
        json.dumps({"cell": {"type": "hive"}, "params": {"graph": {"edges": edges}}})
    )
    for name in ("first", "second"):
        cell: dict[str, Any] = {"type": name, "timeout": -1}
        if mailbox_size is not None and name == "second":
            cell["mailbox_size"] = mailbox_size
        (root / "main" / name).mkdir()
        (root / "main" / name / "config.json").write_text(
            json.dumps({"cell": cell, "contract": {"version": "1", "settings": {}, "consumes": {}}})
        )
    return root


class _Relay:
    """Waits for ``opened``, records what it started, passes the body on (``copies`` times)."""

    def __init__(self, opened: asyncio.Event, started: list[str], copies: int = 1) -> None:
        self.opened = opened
        self.started = started
        self.copies = copies

    async def handle(self, message: Envelope) -> list[Any]:
        await self.opened.wait()
        self.started.append(message.body["messages"][0]["text"])
        return [message.body] * self.copies


def _types(first: _Relay, second: _Relay, *, second_runs_ahead: bool) -> dict[str, CellType]:
    def fixed(relay: _Relay) -> Callable[[CellSpec], _Relay]:
        return lambda spec: relay

    def always(spec: CellSpec) -> bool:
        return True

    return {
        "first": CellType("first", CellClass.STATEFUL, fixed(first), runs_ahead=always),
        "second": CellType(
            "second",
            CellClass.STATEFUL,
            fixed(second),
            runs_ahead=always if second_runs_ahead else None,
        ),
    }


def _journal_rows(db: Backend) -> int:
    assert isinstance(db, ColonyDb)
    conn = sqlite3.connect(db.path)
    try:
        (count,) = conn.execute("SELECT count(*) FROM journal").fetchone()
        return int(count)
    finally:
        conn.close()


def _body(text: str) -> dict[str, Any]:
    return {"messages": [{"origin": "user", "type": "text", "text": text}]}


@contextmanager
def _writer_held(db: Backend) -> Iterator[threading.Event]:
    """Hold the writer inside a transaction until the yielded event is set (or the block
    ends): nothing handed over meanwhile is committed."""
    assert isinstance(db, ColonyDb)
    release = threading.Event()
    entered = threading.Event()

    def hold(conn: sqlite3.Connection) -> None:
        entered.set()
        release.wait(30)

    db.execute(hold)
    assert entered.wait(10)
    try:
        yield release
    finally:
        release.set()


async def _until(predicate: Callable[[], bool], seconds: float = 5.0) -> bool:
    for _ in range(int(seconds / 0.01)):
        if predicate():
            return True
        await asyncio.sleep(0.01)
    return predicate()


def _chain(tmp_path: Path, *, second_runs_ahead: bool) -> tuple[ColonyHarness, _Relay, _Relay]:
    """The tree with /first held until its gate opens and /second open, and the relays."""
    first, second = _Relay(asyncio.Event(), []), _Relay(asyncio.Event(), [])
    second.opened.set()
    harness = ColonyHarness(
        _tree(tmp_path),
        capture=["/sink"],
        cell_types=_types(first, second, second_runs_ahead=second_runs_ahead),
    )
    return harness, first, second


async def test_a_delivery_to_a_cell_that_runs_ahead_is_handled_before_its_unit_is_committed(
    tmp_path: Path,
) -> None:
    harness, first, second = _chain(tmp_path, second_runs_ahead=True)
    gate = first.opened
    async with harness as h:
        await h.send("/first", _body("m0"))  # an ingress: committed before it returns
        with _writer_held(h.colony.db):
            gate.set()
            # /first's unit (delivering to /second) waits behind the held transaction, yet
            # /second has the message already.
            assert await _until(lambda: second.started == ["m0"])
            assert h.captured("/sink") == []  # /sink does not run ahead: it waits
        await h.settle()
        assert [m.body for m in h.captured("/sink")] == [_body("m0")]
        assert _journal_rows(h.colony.db) == 0


async def test_a_delivery_to_a_cell_that_does_not_run_ahead_waits_for_its_commit(
    tmp_path: Path,
) -> None:
    harness, first, second = _chain(tmp_path, second_runs_ahead=False)
    gate = first.opened
    async with harness as h:
        await h.send("/first", _body("m0"))
        with _writer_held(h.colony.db) as release:
            gate.set()
            assert await _until(lambda: first.started == ["m0"])
            await asyncio.sleep(0.2)
            assert second.started == []
            release.set()
            assert await _until(lambda: second.started == ["m0"])
        await h.settle()
        assert len(h.captured("/sink")) == 1


async def test_deliveries_that_would_overflow_their_mailbox_wait_for_their_commit(
    tmp_path: Path,
) -> None:
    # An overflow keeps journal ids only: what goes there must be committed first.
    gate = asyncio.Event()
    first, second = _Relay(gate, [], copies=4), _Relay(asyncio.Event(), [])
    second.opened.set()
    async with ColonyHarness(
        _tree(tmp_path, mailbox_size=1),
        capture=["/sink"],
        cell_types=_types(first, second, second_runs_ahead=True),
    ) as h:
        await h.send("/first", _body("m0"))
        with _writer_held(h.colony.db) as release:
            gate.set()  # four copies for /second, whose mailbox holds one
            assert await _until(lambda: first.started == ["m0"])
            await asyncio.sleep(0.2)
            assert second.started == []  # nothing ran ahead
            release.set()
        await h.settle()
        assert len(second.started) == 4
        assert len(h.captured("/sink")) == 4
        assert _journal_rows(h.colony.db) == 0


def test_a_code_cell_runs_ahead_unless_its_params_say_not() -> None:
    assert code_runs_ahead(spec_for("/c", {"script": "x.py"}))
    assert not code_runs_ahead(spec_for("/c", {"script": "x.py", "runs_ahead": False}))


async def test_a_unit_that_ran_ahead_and_cannot_be_stored_says_its_deliveries_already_ran(
    tmp_path: Path,
) -> None:
    db = ColonyDb(tmp_path / "colony.db")
    try:
        handled = source_message("/cell", _body("m0"))
        await db.commit(Unit(deliveries=[Delivery("/cell", handled, "/")]))
        poison = source_message("/next", _body("m1"))
        poison.created_at = 2**64  # no SQLite INTEGER holds it
        ahead = Unit(
            ack=(handled.id, "/cell"),
            message=handled,
            logs=[LogRow(poison, "/cell", "/next", 4)],
            deliveries=[Delivery("/next", poison, "/cell")],
        )
        db.commit_later(ahead)
        await db.flush()
        (letter,) = await db.dead_letters()
        assert letter.message_id == handled.id
        assert letter.detail is not None
        assert "had already run" in letter.detail
        assert "replay it once" not in letter.detail
    finally:
        db.close()


def _unit(ack: tuple[str, str] | None, *deliveries: tuple[str, Envelope]) -> Unit:
    return Unit(ack=ack, deliveries=[Delivery(cell, m, "/") for cell, m in deliveries])


def test_a_delivery_acknowledged_in_the_same_transaction_writes_no_journal_row(
    tmp_path: Path,
) -> None:
    db_path = tmp_path / "colony.db"
    conn = open_for_writing(db_path)
    try:
        kept, passed = source_message("/a", _body("kept")), source_message("/b", _body("passed"))
        rows = Rows()
        rows.unit(conn, _unit(None, ("/a", kept), ("/b", passed)))
        rows.unit(conn, _unit((passed.id, "/b")))  # /b handled it before the commit
        conn.execute("BEGIN")
        rows.write(conn)
        conn.execute("COMMIT")
        assert rows.dropped == 1
        assert rows.acks == []
        assert conn.execute("SELECT id, cell FROM journal").fetchall() == [(kept.id, "/a")]
    finally:
        conn.close()


def test_an_acknowledgement_of_a_message_delivered_twice_in_one_transaction_removes_both(
    tmp_path: Path,
) -> None:
    conn = open_for_writing(tmp_path / "colony.db")
    try:
        twice = source_message("/a", _body("twice"))
        rows = Rows()
        rows.unit(conn, _unit(None, ("/a", twice)))
        rows.unit(conn, _unit(None, ("/a", twice)))
        rows.unit(conn, _unit((twice.id, "/a")))
        conn.execute("BEGIN")
        rows.write(conn)
        conn.execute("COMMIT")
        # As if each unit had committed alone: two rows in, and the ack deletes both.
        assert rows.dropped == 0
        assert conn.execute("SELECT count(*) FROM journal").fetchone() == (0,)
    finally:
        conn.close()
