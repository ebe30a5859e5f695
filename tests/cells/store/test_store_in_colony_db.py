"""A store in a colony keeps its tables in colony.db, and a write commits with its reply."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from cells.store.cell import StoreCell, open_store
from colony.envelope import Envelope, source_message
from colony.persist import writer
from colony.persist.celltables import ColonyTablesHost
from colony.persist.db import ColonyDb
from colony.persist.items import Unit
from colony.testing import ColonyHarness, spec_for
from tests.cells.store.test_store import SCHEMA, ask, call, row, store_tree
from tests.conftest import TreeFactory

pytestmark = pytest.mark.sqlite_only  # the store's tables as colony.db holds them


def committed_rows(db: Path, table: str = "/memory:thread") -> list[tuple[Any, ...]]:
    """What another connection sees: committed rows only."""
    conn = sqlite3.connect(db)
    try:
        return conn.execute(f'SELECT turn_id, fired FROM "{table}" ORDER BY rowid').fetchall()
    finally:
        conn.close()


@pytest.fixture
async def colony_db(tmp_path: Path) -> AsyncIterator[ColonyDb]:
    db = ColonyDb(tmp_path / "colony.db")
    try:
        yield db
    finally:
        db.close()


async def store_on(db: ColonyDb) -> StoreCell:
    spec = spec_for("/memory", {"schema": SCHEMA})
    return await open_store(dataclasses.replace(spec, tables=ColonyTablesHost(db)))


def insert(turn_id: str) -> Envelope:
    return source_message("/memory", call(row(turn_id=turn_id, iter=0, fired=0), f"c-{turn_id}"))


async def test_a_store_keeps_its_tables_in_colony_db_named_by_its_path(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    async with ColonyHarness(
        make_tree(store_tree()), capture=["/sink"], workdir=tmp_path / "run"
    ) as colony:
        await ask(colony, row(turn_id="t1", iter=0))
        root = tmp_path / "run" / "colony"
        assert committed_rows(root / "colony.db") == [("t1", None)]
        assert not (root / "main" / "memory" / "cell.db").exists()
        assert colony.rows("/memory", "thread")[0]["turn_id"] == "t1"


async def test_a_write_stays_uncommitted_until_the_unit_that_acknowledges_it_joins_it(
    colony_db: ColonyDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer, "LINGER_S", 30.0)  # the writer waits as long as it takes
    cell = await store_on(colony_db)
    try:
        message = insert("t1")
        [reply] = await cell.handle(message)
        assert reply.content["header"]["rows_affected"] == 1
        assert committed_rows(colony_db.path) == []  # ran, not committed: no reader sees it
        await colony_db.commit(Unit(ack=(message.id, "/memory")))
        assert committed_rows(colony_db.path) == [("t1", 0)]
    finally:
        await cell.close()


async def test_a_write_whose_unit_never_comes_commits_after_the_linger(
    colony_db: ColonyDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer, "LINGER_S", 0.01)
    cell = await store_on(colony_db)
    try:
        await cell.handle(insert("t1"))
        await cell.tables.committed()
        assert committed_rows(colony_db.path) == [("t1", 0)]
    finally:
        await cell.close()


async def test_a_write_committed_before_a_crash_is_answered_from_its_receipt_after_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer, "LINGER_S", 0.01)
    message = insert("t1")
    db = ColonyDb(tmp_path / "colony.db")
    cell = await store_on(db)
    [first] = await cell.handle(message)
    await cell.tables.committed()  # the write is in; its reply's unit never made it
    await cell.close()
    db.close()
    db = ColonyDb(tmp_path / "colony.db")  # the restart: the journal redelivers the message
    cell = await store_on(db)
    try:
        [again] = await cell.handle(message)
        assert again.content == first.content
        assert committed_rows(db.path) == [("t1", 0)]
    finally:
        await cell.close()
        db.close()


async def test_a_blob_another_writer_left_in_a_column_reads_back_as_its_byte_values(
    colony_db: ColonyDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer, "LINGER_S", 0.01)
    cell = await store_on(colony_db)
    try:
        sql = 'INSERT INTO "/memory:thread" (turn_id, iter, turn) VALUES (?, ?, ?)'
        await cell.tables.write(lambda conn: conn.execute(sql, ("t1", 0, b"\x00\xff")))
        await cell.tables.write(lambda conn: conn.execute(sql, ("t2", 1, "text")))
        select = {"operation": "select", "table": "thread", "columns": ["turn_id", "turn"]}
        [reply] = await cell.handle(source_message("/memory", call(select)))
        assert json.loads(reply.content["messages"][0]["text"]) == [
            {"turn": [0, 255], "turn_id": "t1"},
            {"turn": "text", "turn_id": "t2"},
        ]
    finally:
        await cell.close()


async def test_a_guarded_update_in_colony_db_has_one_winner_among_racing_conversations(
    make_tree: TreeFactory,
) -> None:
    import asyncio

    guard = {
        "operation": "update",
        "table": "thread",
        "set": {"fired": 1},
        "where": {"turn_id": "t", "fired": 0},
    }
    async with ColonyHarness(make_tree(store_tree()), capture=["/sink"]) as colony:
        await ask(colony, row(turn_id="t", fired=0))
        await asyncio.gather(*(colony.send("/memory", call(guard, f"c{i}")) for i in range(50)))
        await colony.settle()
        replies = colony.captured("/sink")[1:]
        assert sorted(r.headers.hop["rows_affected"] for r in replies) == [0] * 49 + [1]


async def test_an_old_cell_db_is_moved_into_colony_db_once(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    tree = make_tree(store_tree())
    root = tmp_path / "run" / "colony"
    shutil.copytree(tree, root)
    folder = root / "main" / "memory"
    spec = dataclasses.replace(spec_for("/memory", {"schema": SCHEMA}), folder=folder)
    old = await open_store(spec)  # what an older daemon left: the tables in cell.db
    try:
        for turn_id in ("a", "b"):
            await old.handle(insert(turn_id))
        made = call({"operation": "create_table", "table": "notes", "columns": {"body": "text"}})
        await old.handle(source_message("/memory", made))
        note = call({"operation": "insert", "table": "notes", "row": {"body": "kept"}})
        await old.handle(source_message("/memory", note))
        await old.handle(source_message("/memory", {"params": {"query_timeout_ms": 750}}))
    finally:
        await old.close()
    for boot in range(2):
        async with ColonyHarness(tree, capture=["/sink"], workdir=tmp_path / "run") as colony:
            assert [r["turn_id"] for r in colony.rows("/memory", "thread")] == ["a", "b"]
            reply = await ask(
                colony, {"operation": "select", "table": "notes", "columns": ["body"]}
            )
            assert json.loads(reply.body["messages"][0]["text"]) == [{"body": "kept"}]
            assert colony.rows("/memory", "store_params")[0]["value"] == "750"
            moved = colony.logs("store_migrated")
            assert len(moved) == (1 if boot == 0 else 0)
        assert not (folder / "cell.db").exists()
        assert (folder / "cell.db.migrated").exists()


async def test_a_cells_failing_sql_reaches_the_cell_undone_and_the_writer_stays_well(
    colony_db: ColonyDb,
) -> None:
    tables = ColonyTablesHost(colony_db).tables("/x")

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute('CREATE TABLE "/x:t" (a)')
        conn.execute("SELECT a FROM nowhere")

    with pytest.raises(sqlite3.OperationalError, match="no such table: nowhere"):
        await tables.write(broken)
    assert colony_db.unavailable() is None  # a cell's SQL is no storage outage
    present = await tables.write(
        lambda conn: conn.execute(
            "SELECT count(*) FROM sqlite_master WHERE name = '/x:t'"
        ).fetchone()[0]
    )
    assert present == 0  # nothing of the failed work was kept


async def test_under_at_most_once_a_store_in_colony_db_replies_after_its_write_committed(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    async with ColonyHarness(
        make_tree(store_tree()),
        capture=["/sink"],
        colony={"delivery": "at_most_once"},
        workdir=tmp_path / "run",
    ) as colony:
        reply = await ask(colony, row(turn_id="t1", fired=0))
        assert reply.headers.hop["rows_affected"] == 1
        # the reply was delivered, so the write is committed: another connection sees it
        assert committed_rows(tmp_path / "run" / "colony" / "colony.db") == [("t1", 0)]
        assert colony.rows("/memory", "store_receipts") == []  # no redelivery, no receipts


async def test_a_write_the_storage_refuses_is_kept_and_run_again_once_it_takes_writes(
    colony_db: ColonyDb,
) -> None:
    tables = ColonyTablesHost(colony_db).tables("/x")
    await tables.write(lambda conn: conn.execute('CREATE TABLE "/x:t" (a)'))
    runs = []

    def insert_once_the_disk_has_room(conn: sqlite3.Connection) -> int:
        runs.append(1)
        if len(runs) == 1:
            full = sqlite3.OperationalError("database or disk is full")
            full.sqlite_errorcode = 13  # SQLITE_FULL, as SQLite reports it
            raise full
        return conn.execute('INSERT INTO "/x:t" (a) VALUES (1)').rowcount

    assert await tables.write(insert_once_the_disk_has_room) == 1
    await tables.committed()
    assert len(runs) == 2
    assert committed_rows_of(colony_db.path, '"/x:t"') == [(1,)]
    assert colony_db.unavailable() is None  # the first commit that worked ended the outage


def committed_rows_of(db: Path, table: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(f"SELECT * FROM {table}").fetchall()
    finally:
        conn.close()


def _plan_of(db: Path, sql: str, *values: Any) -> str:
    conn = sqlite3.connect(db)
    try:
        return " ".join(row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + sql, values))
    finally:
        conn.close()


async def test_a_store_indexes_the_columns_its_calls_look_rows_up_by_once(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    async with ColonyHarness(
        make_tree(store_tree()), capture=["/sink"], workdir=tmp_path / "run"
    ) as colony:
        for turn in ("t1", "t2", "t3"):
            await ask(colony, row(turn_id=turn, iter=0, role="user", fired=0))
        guard = {
            "operation": "update",
            "table": "thread",
            "set": {"fired": 1},
            "where": {"turn_id": "t2", "role": {"eq": "user"}, "fired": 0, "iter": {"gte": 0}},
        }
        assert (await ask(colony, guard)).headers.hop["rows_affected"] == 1
        again = {"operation": "select", "table": "thread", "columns": ["turn_id"]}
        for turn in ("t1", "t3"):  # the same key columns: no second index
            where = {"turn_id": turn, "role": "user", "fired": {"in": [0, 1]}}
            await ask(colony, {**again, "where": where})
        db = tmp_path / "run" / "colony" / "colony.db"
        conn = sqlite3.connect(db)
        try:
            indexes = conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?",
                ("/memory:thread",),
            ).fetchall()
        finally:
            conn.close()
        # Pinned to one value (or a list) only: `iter >= 0` is a range, not a key.
        assert indexes == [("/memory:thread:by:fired,role,turn_id",)]
        used = _plan_of(
            db,
            'SELECT turn_id FROM "/memory:thread" WHERE turn_id = ? AND role = ? AND fired = ?',
            "t1",
            "user",
            0,
        )
        assert "INDEX /memory:thread:by:fired,role,turn_id" in used, used


async def test_a_store_makes_at_most_four_indexes_per_table_across_restarts(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    tree = make_tree(store_tree())
    by = [["turn_id"], ["role"], ["fired"], ["iter"], ["turn_id", "role"]]

    def lookup(columns: list[str]) -> dict[str, Any]:
        values = {"turn_id": "t1", "role": "user", "fired": 0, "iter": 0}
        where = {c: values[c] for c in columns}
        return {"operation": "select", "table": "thread", "columns": ["turn_id"], "where": where}

    for run, keys in enumerate((by[:3], by[3:])):  # three in one run, two more in the next
        async with ColonyHarness(tree, capture=["/sink"], workdir=tmp_path / "run") as colony:
            if run == 0:
                await ask(colony, row(turn_id="t1", iter=0, role="user", fired=0))
            for columns in keys:
                await ask(colony, lookup(columns))
    conn = sqlite3.connect(tmp_path / "run" / "colony" / "colony.db")
    try:
        names = [
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?",
                ("/memory:thread",),
            )
        ]
    finally:
        conn.close()
    assert len(names) == 4, names
    assert "/memory:thread:by:role,turn_id" not in names
