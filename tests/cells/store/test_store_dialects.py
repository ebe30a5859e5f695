"""The store's operations, guards, error codes and replies, on SQLite and on PostgreSQL alike.

Each test here runs twice: on SQLite, the store's tables in a real ``colony.db`` behind the
colony's writer, and on PostgreSQL, in a schema of the test's own through a small
:class:`~tests.cells.store.pg_tables.PgTables`. The store cell is driven directly (its
``handle``), as a colony would: same params, same calls, and the replies compared with the
same expectations. Where PostgreSQL cannot do what SQLite does, the test says which and pins
the clear error instead (docs/cells/store.md, "On PostgreSQL").
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cells.store.cell import StoreCell, open_store
from cells.store.dialect import pg_identifier
from colony.celltables import TablesHost
from colony.config.models import ColonyConfig
from colony.envelope import source_message
from colony.persist import writer
from colony.persist.celltables import ColonyTablesHost
from colony.persist.db import ColonyDb
from colony.testing import spec_for
from tests.cells.store.pg_tables import PgTablesHost
from tests.cells.store.test_store import SCHEMA, call, row
from tests.pg import PgSchema


@dataclass
class Backend:
    """Where the stores of one test keep their tables."""

    name: str
    host: TablesHost
    folder: Path

    async def open(
        self,
        path: str = "/memory",
        *,
        schema: dict[str, dict[str, str]] | None = None,
        folder: Path | None = None,
        host: TablesHost | None = None,
        colony: ColonyConfig | None = None,
        **params: Any,
    ) -> StoreCell:
        spec = spec_for(path, {"schema": schema or SCHEMA, **params})
        spec = dataclasses.replace(spec, tables=host or self.host, folder=folder)
        if colony is not None:
            spec = dataclasses.replace(spec, colony=colony)
        return await open_store(spec)


@pytest.fixture(params=["sqlite", "postgres"])
async def backend(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Backend]:
    if request.param == "sqlite":
        monkeypatch.setattr(writer, "LINGER_S", 0.001)  # no unit follows a write here
        db = ColonyDb(tmp_path / "colony.db")
        try:
            yield Backend("sqlite", ColonyTablesHost(db), tmp_path)
        finally:
            db.close()
    else:
        pg: PgSchema = request.getfixturevalue("pg_schema")
        yield Backend("postgres", PgTablesHost(pg.dsn), tmp_path)


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[StoreCell]:
    cell = await backend.open()
    try:
        yield cell
    finally:
        await cell.close()


@dataclass(frozen=True)
class Reply:
    hop: dict[str, Any]
    text: str
    id: str

    @property
    def rows(self) -> Any:
        return json.loads(self.text)


def reply_of(content: dict[str, Any]) -> Reply:
    [turn] = content["messages"]
    return Reply(content["header"], turn["text"], turn["id"])


async def ask(
    cell: StoreCell, args: dict[str, Any], call_id: str = "call-1", *, reply_to: str | None = None
) -> Reply:
    message = source_message(cell.path, args if "messages" in args else call(args, call_id))
    if reply_to is not None:
        message = dataclasses.replace(message, reply_to=reply_to)
    [emission] = await cell.handle(message)
    return reply_of(emission.content)


async def select(cell: StoreCell, **args: Any) -> Any:
    reply = await ask(cell, {"operation": "select", "table": "thread", **args})
    assert "error_code" not in reply.hop, reply
    return reply.rows


async def scalar(cell: StoreCell, sql: str) -> Any:
    """One value read from the store's own tables; ``{name}`` is a table's name there."""
    return await cell.tables.read(lambda conn: conn.execute(sql).fetchone()[0])


def named(cell: StoreCell, table: str) -> str:
    return cell.dialect.table(cell.prefix, table)


# -- operations ---------------------------------------------------------------------------


async def test_insert_then_select_returns_rows_as_json_text_on_the_call_id(
    store: StoreCell,
) -> None:
    inserted = await ask(store, row(turn_id="t1", iter=0, role="user", turn={"b": 1, "a": 2}))
    assert inserted.hop == {
        "operation": "insert",
        "rows_affected": 1,
        "duration_ms": inserted.hop["duration_ms"],
    }
    assert (inserted.text, inserted.id) == ("null", "call-1")
    selected = await ask(
        store,
        {"operation": "select", "table": "thread", "columns": ["turn", "turn_id", "iter"]},
        "call-2",
    )
    assert selected.hop["rows_affected"] == 1
    assert selected.id == "call-2"
    assert selected.text == '[{"iter":0,"turn":"{\\"a\\":2,\\"b\\":1}","turn_id":"t1"}]'


async def test_where_order_by_limit_and_distinct_select_the_same_rows(store: StoreCell) -> None:
    for i, role in enumerate(["user", "assistant", "tool", "tool", None]):
        await ask(store, row(turn_id="t", iter=i, role=role))
    assert await select(store, columns=["iter"], where={"role": "tool"}) == [
        {"iter": 2},
        {"iter": 3},
    ]
    assert await select(
        store,
        columns=["iter"],
        where={"iter": {"gte": 3}},
        order_by=[{"col": "iter", "dir": "desc"}],
    ) == [{"iter": 4}, {"iter": 3}]
    assert await select(store, columns=["iter"], where={"role": {"in": ["user", "assistant"]}}) == [
        {"iter": 0},
        {"iter": 1},
    ]
    assert await select(store, columns=["iter"], where={"role": {"is_null": True}}) == [{"iter": 4}]
    assert await select(store, columns=["iter"], where={"role": {"is_null": False}}) == [
        {"iter": i} for i in range(4)
    ]
    assert await select(store, columns=["iter"], where={"role": {"or_null": {"eq": "user"}}}) == [
        {"iter": 0},
        {"iter": 4},
    ]
    assert await select(
        store, columns=["iter"], where={"role": {"neq": "tool"}, "iter": {"lt": 2}}
    ) == [{"iter": 0}, {"iter": 1}]
    assert await select(store, columns=["role"], distinct=True, where={"role": "tool"}) == [
        {"role": "tool"}
    ]
    assert await select(store, columns=["iter"], order_by=[{"col": "iter"}], limit=2) == [
        {"iter": 0},
        {"iter": 1},
    ]
    assert await select(store, columns=["iter"], where={"role": None}) == []  # = NULL never


async def test_update_and_delete_report_the_rows_they_changed(store: StoreCell) -> None:
    for i in range(3):
        await ask(store, row(turn_id="t", iter=i, fired=0))
    update = {"operation": "update", "table": "thread", "set": {"fired": True}}
    updated = await ask(store, {**update, "where": {"iter": {"lt": 2}}})
    assert updated.hop["rows_affected"] == 2
    assert await select(store, columns=["fired"]) == [{"fired": 1}, {"fired": 1}, {"fired": 0}]
    deleted = await ask(store, {"operation": "delete", "table": "thread", "where": {"fired": 1}})
    assert deleted.hop["rows_affected"] == 2
    everything = await ask(store, {"operation": "delete", "table": "thread"})
    assert everything.hop["rows_affected"] == 1


async def test_create_table_adds_a_table_a_store_opened_later_knows(backend: Backend) -> None:
    cell = await backend.open()
    try:
        made = await ask(
            cell,
            {
                "operation": "create_table",
                "table": "notes",
                "columns": {"body": "text", "n": "int"},
            },
        )
        assert made.hop == {
            "operation": "create_table",
            "rows_affected": 0,
            "duration_ms": made.hop["duration_ms"],
        }
        inserted = await ask(
            cell, {"operation": "insert", "table": "notes", "row": {"body": "x", "n": "7"}}
        )
        assert inserted.hop["rows_affected"] == 1
        wider = {"operation": "create_table", "table": "notes", "columns": {"extra": "json"}}
        assert "error_code" not in (await ask(cell, wider)).hop
    finally:
        await cell.close()
    cell = await backend.open()  # the next start: the table is read back from the database
    try:
        assert cell.schema["notes"] == {"body": "text", "extra": "text", "n": "int"}
        found = await ask(
            cell, {"operation": "select", "table": "notes", "columns": ["body", "n", "extra"]}
        )
        assert found.rows == [{"body": "x", "extra": None, "n": 7}]
    finally:
        await cell.close()


async def test_a_call_naming_an_unknown_table_plans_anew_once_create_table_made_it(
    store: StoreCell,
) -> None:
    select_notes = {"operation": "select", "table": "notes", "columns": ["body"]}
    assert (await ask(store, select_notes)).hop["error_code"] == "unknown_table"
    await ask(store, {"operation": "create_table", "table": "notes", "columns": {"n": "int"}})
    assert (await ask(store, select_notes)).hop["error_code"] == "unknown_column"
    await ask(store, {"operation": "create_table", "table": "notes", "columns": {"body": "text"}})
    await ask(store, {"operation": "insert", "table": "notes", "row": {"body": "x"}})
    for call_id in ("call-a", "call-b"):  # the second is answered from the kept plan
        found = await ask(store, select_notes, call_id)
        assert (found.text, found.id) == ('[{"body":"x"}]', call_id)


@pytest.mark.parametrize(
    ("args", "operation", "needle"),
    [
        ({"operation": "upsert", "table": "thread"}, "error", "unknown operation"),
        (
            {"operation": "update", "table": "thread", "set": {"fired": 1}, "wher": {}},
            "update",
            'unknown argument "wher"',
        ),
        (
            {"operation": "select", "table": "nosuch", "columns": []},
            "select",
            "columns is required",
        ),
        ({"operation": "insert", "table": "thread", "row": {}}, "insert", "non-empty object"),
        (
            {"operation": "select", "table": "thread", "columns": ["iter"], "limit": 0},
            "select",
            "limit",
        ),
        (
            {"operation": "select", "table": "thread", "columns": ["turn"], "where": {"turn": {}}},
            "select",
            "exactly one operator",
        ),
        (
            {"operation": "update", "table": "thread", "set": {"a": 1}, "where": {"x": [1]}},
            "update",
            "must be a scalar",
        ),
    ],
)
async def test_a_malformed_call_is_invalid_input_with_the_operation_stamped(
    store: StoreCell, args: dict[str, Any], operation: str, needle: str
) -> None:
    reply = await ask(store, args)
    assert reply.hop["finish_reason"] == "error"
    assert reply.hop["error_code"] == "invalid_input"
    assert reply.hop["operation"] == operation
    assert reply.id == ""
    assert needle in reply.text


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        ({"operation": "select", "table": "nosuch", "columns": ["a"]}, "unknown_table", "nosuch"),
        (
            {"operation": "select", "table": "thread", "columns": ["nosuch"]},
            "unknown_column",
            "table thread has no column named nosuch",
        ),
        ({"operation": "insert", "table": "thread", "row": {"iter": 2**70}}, "type_mismatch", ""),
        (
            {"operation": "insert", "table": "thread", "row": {"iter": -(2**63) - 1}},
            "type_mismatch",
            "",
        ),
        (
            {
                "operation": "select",
                "table": "thread",
                "columns": ["iter"],
                "where": {"iter": 2**64},
            },
            "type_mismatch",
            "",
        ),
        (
            {"operation": "select", "table": "thread", "columns": ["iter"], "limit": 2**63},
            "type_mismatch",
            "",
        ),
        (
            {"operation": "update", "table": "thread", "set": {"turn_id": 2**70}},
            "type_mismatch",
            "",
        ),
    ],
)
async def test_sql_level_failures_are_ordinary_results_with_an_error_code(
    store: StoreCell, args: dict[str, Any], code: str, text: str
) -> None:
    await ask(store, row(turn_id="t", iter=1))
    reply = await ask(store, args)
    assert "finish_reason" not in reply.hop
    assert reply.hop["error_code"] == code
    assert reply.hop["rows_affected"] == 0
    assert reply.id == "call-1"
    assert text in reply.text
    assert await select(store, columns=["turn_id", "iter"]) == [{"iter": 1, "turn_id": "t"}]


async def many_rows(cell: StoreCell, count: int) -> None:
    """``count`` rows written straight into the store's thread table (a seed file of that
    size would take the test longer than the query it times)."""
    name = named(cell, "thread")
    if cell.dialect.name == "sqlite":
        sql = (
            f"INSERT INTO {name} (turn_id, iter, role) WITH RECURSIVE n(i) AS "
            f"(SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {count}) "
            "SELECT 't' || i, i, printf('%.50c', 'x') FROM n"
        )
    else:
        sql = (
            f"INSERT INTO {name} (turn_id, iter, role) SELECT 't' || i, i, repeat('x', 50) "
            f"FROM generate_series(1, {count}) AS i"
        )
    await cell.tables.write(lambda conn: conn.execute(sql))
    await cell.tables.committed()


async def test_a_select_past_query_timeout_ms_is_query_timeout_and_the_next_call_works(
    backend: Backend,
) -> None:
    cell = await backend.open(query_timeout_ms=1)
    try:
        await many_rows(cell, 300_000)
        reply = await ask(
            cell,
            {
                "operation": "select",
                "table": "thread",
                "columns": ["iter"],
                "where": {"role": {"lt": "y"}, "turn_id": {"gt": "a"}},
                "order_by": [{"col": "role"}, {"col": "turn_id", "dir": "desc"}],
            },
        )
        assert reply.hop["error_code"] == "query_timeout"
        assert reply.hop["finish_reason"] == "error"
        assert reply.text == "query exceeded query_timeout_ms"
        # The timeout was the select's only: a write and a short select go through.
        assert (await ask(cell, row(turn_id="after"))).hop["rows_affected"] == 1
        found = await ask(
            cell,
            {"operation": "select", "table": "thread", "columns": ["turn_id"], "limit": 1},
        )
        assert found.rows == [{"turn_id": "t1"}]
    finally:
        await cell.close()


@pytest.mark.parametrize(
    "args",
    [
        {"operation": "select", "table": 'thread"; DROP TABLE thread; --', "columns": ["iter"]},
        {"operation": "select", "table": "thread", "columns": ['iter" FROM thread; --']},
        {
            "operation": "select",
            "table": "thread",
            "columns": ["iter"],
            "where": {"1=1 OR iter": 1},
        },
        {"operation": "update", "table": "thread", "set": {'fired" = 1 --': 1}},
        {"operation": "select", "table": "sqlite_master", "columns": ["sql"]},
        {"operation": "select", "table": "pg_class", "columns": ["relname"]},
        {"operation": "select", "table": "thread", "columns": ["~row"]},
    ],
)
async def test_injection_through_names_is_refused(store: StoreCell, args: dict[str, Any]) -> None:
    await ask(store, row(turn_id="t", iter=1))
    reply = await ask(store, args)
    assert reply.hop["error_code"] in ("invalid_input", "unknown_table")
    assert await select(store, columns=["iter"]) == [{"iter": 1}]


async def test_injection_through_values_is_stored_verbatim(store: StoreCell) -> None:
    evil = "x'); DROP TABLE thread; -- %s %% $1 ?"
    await ask(store, row(turn_id=evil, role='" OR 1=1 --'))
    assert await select(store, columns=["turn_id", "role"], where={"turn_id": evil}) == [
        {"turn_id": evil, "role": '" OR 1=1 --'}
    ]


async def test_an_internal_write_surface_refuses_writers_outside_the_hive(
    backend: Backend,
) -> None:
    cell = await backend.open("/box/memory", write_surface="internal")
    try:
        denied = await ask(cell, row(turn_id="t"), reply_to="/outside")
        assert denied.hop["error_code"] == "write_denied"
        assert denied.id == "call-1"
        allowed = await ask(cell, row(turn_id="t"), reply_to="/box/writer")
        assert allowed.hop["rows_affected"] == 1
        read = {"operation": "select", "table": "thread", "columns": ["turn_id"]}
        assert (await ask(cell, read, reply_to="/outside")).hop["rows_affected"] == 1
        again = await ask(cell, row(turn_id="t"), reply_to="/outside")  # planned already
        assert again.hop["error_code"] == "write_denied"
    finally:
        await cell.close()


async def test_seed_rows_load_once_into_a_fresh_store(backend: Backend) -> None:
    folder = backend.folder / "memory"
    (folder / "seed").mkdir(parents=True)
    (folder / "seed" / "thread.jsonl").write_text(
        '{"schema": {"turn_id": "text", "iter": "int", "role": "text", "fired": "int", '
        '"turn": "json"}}\n'
        '{"turn_id": "seeded", "iter": "0", "turn": {"z": [1]}}\n\n'
        '{"turn_id": 2, "role": "user", "fired": true}\n'
    )
    for start in range(2):
        cell = await backend.open(folder=folder)
        try:
            if start == 0:
                await ask(cell, row(turn_id="live"))
            assert await select(cell, columns=["turn_id", "iter", "fired", "turn"]) == [
                {"fired": None, "iter": 0, "turn": '{"z":[1]}', "turn_id": "seeded"},
                {"fired": 1, "iter": None, "turn": None, "turn_id": "2"},
                {"fired": None, "iter": None, "turn": None, "turn_id": "live"},
            ]
        finally:
            await cell.close()


async def test_a_params_update_is_applied_silently_and_read_back_at_the_next_start(
    backend: Backend,
) -> None:
    cell = await backend.open()
    try:
        quiet = source_message("/memory", {"messages": [], "params": {"query_timeout_ms": 500}})
        assert await cell.handle(quiet) == []
        assert cell.query_timeout_ms == 500
        refused = await ask(cell, {"messages": [], "params": {"schema": {}}})
        assert (refused.hop["operation"], refused.hop["error_code"]) == (
            "params_update",
            "invalid_input",
        )
    finally:
        await cell.close()
    cell = await backend.open()
    try:
        assert cell.query_timeout_ms == 500
    finally:
        await cell.close()


async def test_a_redelivered_write_is_answered_from_its_receipt_not_written_twice(
    store: StoreCell,
) -> None:
    insert = source_message("/memory", call(row(turn_id="t1", iter=0, role="user", turn={}), "c1"))
    [first] = await store.handle(insert)
    [again] = await store.handle(insert)  # the journal gives it back after a crash
    assert again.content == first.content
    assert len(await select(store, columns=["turn_id"])) == 1
    await store.handle(source_message("/memory", insert.body))  # same body, a new message
    assert len(await select(store, columns=["turn_id"])) == 2
    assert await scalar(store, f"SELECT count(*) FROM {named(store, 'store_receipts')}") == 2


async def test_a_failed_write_is_answered_from_its_receipt_too(store: StoreCell) -> None:
    insert = source_message("/memory", call(row(iter=2**70), "c1"))
    [first] = await store.handle(insert)
    assert first.content["header"]["error_code"] == "type_mismatch"
    [again] = await store.handle(insert)
    assert again.content == first.content


async def test_under_at_most_once_a_write_keeps_no_receipt(backend: Backend) -> None:
    cell = await backend.open(colony=ColonyConfig(delivery="at_most_once"))
    try:
        insert = source_message("/memory", call(row(turn_id="t1")))
        await cell.handle(insert)
        await cell.handle(insert)
        assert len(await select(cell, columns=["turn_id"])) == 2
        assert await scalar(cell, f"SELECT count(*) FROM {named(cell, 'store_receipts')}") == 0
    finally:
        await cell.close()


async def test_one_guarded_update_among_50_concurrent_contenders_wins_every_round(
    store: StoreCell,
) -> None:
    for round_ in range(10):
        turn = f"t{round_}"
        await ask(store, row(turn_id=turn, iter=0, role="assistant", fired=0))
        guard = {
            "operation": "update",
            "table": "thread",
            "set": {"fired": 1},
            "where": {"turn_id": turn, "iter": 0, "role": "assistant", "fired": 0},
        }
        replies = await asyncio.gather(*(ask(store, guard, f"c{i}") for i in range(50)))
        assert sorted(r.hop["rows_affected"] for r in replies) == [0] * 49 + [1]


# -- what each database holds, and in which order -------------------------------------------


async def test_rows_keep_write_order_through_updates_indexes_and_ties(store: StoreCell) -> None:
    for i, role in enumerate(["b", "a", "b", "a", "b"]):
        await ask(store, row(turn_id=f"t{i}", iter=i, role=role, fired=0))
    # An update rewrites a row (PostgreSQL moves its tuple to the table's end), a lookup by
    # turn_id makes an index: neither changes the order a select gives.
    first = {"operation": "update", "table": "thread", "set": {"fired": 1}}
    await ask(store, {**first, "where": {"turn_id": "t0"}})
    await ask(store, {**first, "where": {"turn_id": "t2"}})
    assert [r["turn_id"] for r in await select(store, columns=["turn_id"])] == [
        f"t{i}" for i in range(5)
    ]
    assert await select(store, columns=["turn_id"], where={"fired": {"in": [0, 1]}}) == [
        {"turn_id": f"t{i}"} for i in range(5)
    ]
    by_role = await select(store, columns=["turn_id"], order_by=[{"col": "role"}])
    assert [r["turn_id"] for r in by_role] == ["t1", "t3", "t0", "t2", "t4"]
    by_fired = await select(store, columns=["turn_id"], order_by=[{"col": "fired", "dir": "desc"}])
    assert [r["turn_id"] for r in by_fired] == ["t0", "t2", "t1", "t3", "t4"]


async def test_nulls_sort_first_ascending_and_last_descending(store: StoreCell) -> None:
    for i, value in enumerate([2, None, 1]):
        await ask(store, row(turn_id=f"t{i}", iter=value))
    up = await select(store, columns=["iter"], order_by=[{"col": "iter"}])
    down = await select(store, columns=["iter"], order_by=[{"col": "iter", "dir": "desc"}])
    assert [r["iter"] for r in up] == [None, 1, 2]
    assert [r["iter"] for r in down] == [2, 1, None]


async def test_text_sorts_and_compares_by_its_bytes_whatever_the_server_locale(
    store: StoreCell,
) -> None:
    words = ["b", "B", "a", "é", "Z", "_", "a b", "ab", "10", "9", "Ω", "😀"]
    for word in words:
        await ask(store, row(turn_id=word))
    got = await select(store, columns=["turn_id"], order_by=[{"col": "turn_id"}])
    assert [r["turn_id"] for r in got] == sorted(words, key=lambda w: w.encode())
    below = await select(store, columns=["turn_id"], where={"turn_id": {"lt": "a"}})
    assert [r["turn_id"] for r in below] == [w for w in words if w.encode() < b"a"]


async def test_a_distinct_select_keeps_each_row_where_it_first_appears(store: StoreCell) -> None:
    for role, fired in [("c", 1), ("a", 0), ("c", 0), (None, 1), ("b", 1), ("a", 1), (None, 0)]:
        await ask(store, row(turn_id="t", role=role, fired=fired))
    assert await select(store, columns=["role"], distinct=True) == [
        {"role": "c"},
        {"role": "a"},
        {"role": None},
        {"role": "b"},
    ]
    assert await select(store, columns=["role"], distinct=True, limit=2) == [
        {"role": "c"},
        {"role": "a"},
    ]
    assert await select(store, columns=["role", "role"], distinct=True, where={"fired": 0}) == [
        {"role": "a"},
        {"role": "c"},
        {"role": None},
    ]
    assert await select(
        store, columns=["role"], distinct=True, order_by=[{"col": "role", "dir": "desc"}]
    ) == [{"role": "c"}, {"role": "b"}, {"role": "a"}, {"role": None}]


async def test_integers_to_64_bits_round_trip_and_past_them_are_type_mismatch(
    store: StoreCell,
) -> None:
    for value in (2**63 - 1, -(2**63), 0, -1):
        assert (await ask(store, row(turn_id=str(value), iter=value))).hop["rows_affected"] == 1
    assert await select(store, columns=["iter"]) == [
        {"iter": 2**63 - 1},
        {"iter": -(2**63)},
        {"iter": 0},
        {"iter": -1},
    ]
    found = await select(store, columns=["turn_id"], where={"iter": {"gt": 2**62}})
    assert found == [{"turn_id": str(2**63 - 1)}]
    for value in (2**63, -(2**63) - 1, 10**30):
        assert (await ask(store, row(iter=value))).hop["error_code"] == "type_mismatch"
    assert len(await select(store, columns=["iter"])) == 4


async def test_booleans_are_stored_and_compared_as_one_and_zero(store: StoreCell) -> None:
    await ask(store, row(turn_id=True, fired=True, turn=False))
    await ask(store, row(turn_id=False, fired=False, turn=[True]))
    assert await select(store, columns=["turn_id", "fired", "turn"], where={"fired": True}) == [
        {"fired": 1, "turn": "0", "turn_id": "1"}
    ]
    assert await select(store, columns=["fired", "turn"], where={"turn_id": False}) == [
        {"fired": 0, "turn": "[true]"}
    ]


async def test_values_are_stored_and_compared_as_sqlite_column_affinity_has_them(
    store: StoreCell,
) -> None:
    await ask(store, row(turn_id=5, iter="7", role=1.5, fired=2.0))
    await ask(store, row(turn_id=1e20, iter=" 8 ", role=0.1, fired="3.0e2"))
    await ask(store, row(turn_id=-0.0, iter="-9", role=2.0, fired="1e3"))
    assert await select(store, columns=["turn_id", "iter", "role", "fired"]) == [
        {"fired": 2, "iter": 7, "role": "1.5", "turn_id": "5"},
        {"fired": 300, "iter": 8, "role": "0.1", "turn_id": "1.0e+20"},
        {"fired": 1000, "iter": -9, "role": "2.0", "turn_id": "0.0"},
    ]
    assert await select(store, columns=["iter"], where={"turn_id": 5}) == [{"iter": 7}]
    assert await select(store, columns=["iter"], where={"iter": "8"}) == [{"iter": 8}]
    assert await select(store, columns=["iter"], where={"iter": {"in": ["7", -9]}}) == [
        {"iter": 7},
        {"iter": -9},
    ]
    assert await select(store, columns=["iter"], where={"iter": {"lt": 7.5}}) == [
        {"iter": 7},
        {"iter": -9},
    ]
    assert await select(store, columns=["iter"], where={"role": {"gt": 1}}) == [
        {"iter": 7},
        {"iter": -9},
    ]


async def test_a_json_column_keeps_the_exact_text_written(store: StoreCell) -> None:
    turn = {"z": {"é": "ü", "a": [1, 2.5, None, True]}, "nul": "a\u0000b", "big": 2**70}
    await ask(store, row(turn_id="t", turn=turn))
    [found] = await select(store, columns=["turn"])
    assert found["turn"] == (
        '{"big":1180591620717411303424,"nul":"a\\u0000b","z":{"a":[1,2.5,null,true],"é":"ü"}}'
    )
    by_text = await select(store, columns=["turn_id"], where={"turn": found["turn"]})
    assert by_text == [{"turn_id": "t"}]


async def test_what_postgresql_cannot_hold_is_type_mismatch_there_and_kept_on_sqlite(
    store: StoreCell,
) -> None:
    calls = {
        "nul": row(turn_id="a\u0000b"),
        "text_in_int": row(turn_id="t", iter="seven"),
        "fraction_in_int": row(turn_id="t", iter=1.5),
    }
    replies = {name: await ask(store, args) for name, args in calls.items()}
    compared = await ask(
        store,
        {"operation": "select", "table": "thread", "columns": ["iter"], "where": {"iter": "x"}},
    )
    if store.dialect.name == "sqlite":
        assert all(r.hop["rows_affected"] == 1 for r in replies.values())
        assert await select(store, columns=["turn_id", "iter"]) == [
            {"iter": None, "turn_id": "a\u0000b"},
            {"iter": "seven", "turn_id": "t"},
            {"iter": 1.5, "turn_id": "t"},
        ]
        assert compared.rows == []
        return
    assert {name: r.hop["error_code"] for name, r in replies.items()} == dict.fromkeys(
        calls, "type_mismatch"
    )
    assert replies["nul"].text == (
        "column turn_id: text holding a NUL character (\\u0000) cannot be kept on PostgreSQL"
    )
    assert replies["text_in_int"].text == (
        'column iter: "seven" is not a number; on PostgreSQL an int column holds integers only'
    )
    assert replies["fraction_in_int"].text == (
        "column iter: 1.5 is not an integer; on PostgreSQL an int column holds integers only"
    )
    assert compared.hop["error_code"] == "type_mismatch"
    assert await select(store, columns=["turn_id"]) == []


# -- indexes and names ------------------------------------------------------------------------


async def own_indexes(cell: StoreCell, table: str) -> list[str]:
    """The names of the indexes the store made on ``table`` (its full names)."""
    if cell.dialect.name == "sqlite":
        sql = "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?"
        args: tuple[Any, ...] = (cell.prefix + table,)
    else:
        sql = (
            "SELECT obj_description(indexrelid, 'pg_class') FROM pg_index "
            "WHERE indrelid = to_regclass(%s) AND NOT indisprimary"
        )
        args = (named(cell, table),)
    rows = await cell.tables.read(lambda conn: conn.execute(sql, args).fetchall())
    return sorted(str(name) for (name,) in rows)


async def test_a_store_indexes_lookup_columns_once_at_most_four_per_table_across_starts(
    backend: Backend,
) -> None:
    values = {"turn_id": "t1", "role": "user", "fired": 0, "iter": 0}

    def lookup(columns: list[str]) -> dict[str, Any]:
        where = {c: values[c] for c in columns}
        return {"operation": "select", "table": "thread", "columns": ["turn_id"], "where": where}

    by = [["turn_id", "role"], ["role"], ["fired"], ["iter"], ["turn_id"]]
    for start, keys in enumerate((by[:3], by[3:])):  # three in one start, two more in the next
        cell = await backend.open()
        try:
            if start == 0:
                await ask(cell, row(**values))
                guard = {
                    "operation": "update",
                    "table": "thread",
                    "set": {"fired": 0},
                    "where": {"turn_id": "t1", "role": {"eq": "user"}, "iter": {"gte": 0}},
                }
                await ask(cell, guard)  # the same key columns as the first lookup
            for columns in keys:
                assert (await ask(cell, lookup(columns))).hop["rows_affected"] == 1
            made = await own_indexes(cell, "thread")
        finally:
            await cell.close()
    assert made == [
        "/memory:thread:by:fired",
        "/memory:thread:by:iter",
        "/memory:thread:by:role",
        "/memory:thread:by:role,turn_id",
    ]


async def test_long_cell_paths_and_table_names_work_and_stay_apart(backend: Backend) -> None:
    long_table = "t" * 63
    schema = {long_table: {"c" * 63: "text", "n": "int"}}
    paths = ["/" + "hive/" * 12 + "memory-α", "/" + "hive/" * 12 + "memory-β"]
    cells = [await backend.open(path, schema=schema) for path in paths]
    try:
        for i, cell in enumerate(cells):
            insert = {"operation": "insert", "table": long_table, "row": {"c" * 63: f"row {i}"}}
            assert (await ask(cell, insert)).hop["rows_affected"] == 1
            make = {"operation": "create_table", "table": "u" * 63, "columns": {"n": "int"}}
            assert "error_code" not in (await ask(cell, make)).hop
            insert_u = {"operation": "insert", "table": "u" * 63, "row": {"n": i}}
            assert (await ask(cell, insert_u)).hop["rows_affected"] == 1
        for i, cell in enumerate(cells):
            lookup = {"operation": "select", "table": long_table, "columns": ["c" * 63]}
            found = await ask(cell, {**lookup, "where": {"c" * 63: f"row {i}"}})
            assert found.rows == [{"c" * 63: f"row {i}"}]
            assert await own_indexes(cell, long_table) == [
                f"{cell.prefix}{long_table}:by:{'c' * 63}"
            ]
            reply = await ask(cell, {"operation": "select", "table": "u" * 63, "columns": ["n"]})
            assert reply.rows == [{"n": i}]
    finally:
        for cell in cells:
            await cell.close()
    reopened = await backend.open(paths[1], schema=schema)
    try:
        assert reopened.schema["u" * 63] == {"n": "int"}
    finally:
        await reopened.close()
    if backend.name == "postgres":
        names = {pg_identifier(p + ":" + long_table) for p in paths}
        assert len(names) == 2
        assert all(len(n.encode()) <= 63 for n in names)


# -- both databases, one sequence of calls ----------------------------------------------------

DIFF_SCHEMA = {"t": {"s": "text", "n": "int", "j": "json", "k": "text"}}
TEXTS: list[Any] = ["", "a", "B", "é", "10", "9", " 7 ", "x'y", '"q"', "a b", "😀", "%s", "?"]
NUMBERS: list[Any] = [
    0,
    1,
    -1,
    7,
    2**62,
    -(2**63),
    2**63 - 1,
    2**63,
    1.5,
    2.0,
    0.1,
    1e20,
    True,
    False,
]
NUMERIC_TEXT = ["7", " 8 ", "-3", "2.0", "1e2", "+4"]


def _integral(number: float) -> bool:
    """A float SQLite stores as an integer in an int column (PostgreSQL then can too)."""
    return number.is_integer() and -(2**63) <= number < 2**63


def value_for(kind: str, rng: random.Random, *, compared: bool) -> Any:
    """A value both databases take: anything in a text or json column, a number or a text
    SQLite reads as one in an int column (docs/cells/store.md: what PostgreSQL refuses)."""
    pick = rng.random()
    if pick < 0.1:
        return None
    if kind == "int":
        pool: list[Any] = [v for v in NUMBERS if not isinstance(v, float) or _integral(v)]
        if compared:  # SQLite keeps these as reals: PostgreSQL compares them, cannot store them
            pool += [1.5, 0.1, 1e20, "1.5", "9223372036854775808"]
        return rng.choice(pool + NUMERIC_TEXT)
    if pick < 0.2 and kind == "json" and not compared:
        return rng.choice([{"b": 1, "a": [None, "é"]}, [1, "2"], {}])
    return rng.choice(TEXTS + NUMBERS)


def random_call(rng: random.Random) -> dict[str, Any]:
    columns = DIFF_SCHEMA["t"]
    operation = rng.choice(["insert", "insert", "select", "select", "update", "delete"])
    call: dict[str, Any] = {"operation": operation, "table": "t"}

    def where() -> dict[str, Any]:
        clauses: dict[str, Any] = {}
        for column in rng.sample(list(columns), rng.randint(0, 2)):
            kind = columns[column]
            shape = rng.random()
            if shape < 0.35:
                clauses[column] = value_for(kind, rng, compared=True)
            elif shape < 0.65:
                op = rng.choice(["eq", "neq", "lt", "lte", "gt", "gte"])
                clauses[column] = {op: value_for(kind, rng, compared=True)}
            elif shape < 0.8:
                values = [value_for(kind, rng, compared=True) for _ in range(rng.randint(1, 3))]
                clauses[column] = {"in": values}
            elif shape < 0.9:
                clauses[column] = {"is_null": rng.random() < 0.5}
            else:
                clauses[column] = {"or_null": {"gte": value_for(kind, rng, compared=True)}}
        return clauses

    if operation in ("insert", "update"):
        chosen = rng.sample(list(columns), rng.randint(1, 3))
        values = {c: value_for(columns[c], rng, compared=False) for c in chosen}
        call["row" if operation == "insert" else "set"] = values
    if operation in ("update", "delete", "select"):
        call["where"] = where()
    if operation == "select":
        call["columns"] = rng.sample(list(columns), rng.randint(1, 3))
        if rng.random() < 0.5:
            picked = rng.sample(list(columns), rng.randint(1, 2))
            call["order_by"] = [{"col": c, "dir": rng.choice(["asc", "desc"])} for c in picked]
        if rng.random() < 0.25:
            call["distinct"] = True
        if rng.random() < 0.3:
            call["limit"] = rng.choice([1, 3, 10])
    return call


async def test_a_random_run_of_calls_gets_the_same_replies_on_both_databases(
    tmp_path: Path, pg_schema: PgSchema, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer, "LINGER_S", 0.001)
    db = ColonyDb(tmp_path / "colony.db")
    sqlite_store = await Backend("sqlite", ColonyTablesHost(db), tmp_path).open(schema=DIFF_SCHEMA)
    pg_store = await Backend("postgres", PgTablesHost(pg_schema.dsn), tmp_path).open(
        schema=DIFF_SCHEMA
    )
    rng = random.Random(18)
    try:
        for number in range(400):
            args = random_call(rng)
            on_sqlite = await ask(sqlite_store, args, f"c{number}")
            on_pg = await ask(pg_store, args, f"c{number}")
            without_time = ("duration_ms",)
            seen = {k: v for k, v in on_pg.hop.items() if k not in without_time}
            expected = {k: v for k, v in on_sqlite.hop.items() if k not in without_time}
            assert seen == expected, (number, args, on_sqlite, on_pg)
            if "error_code" not in expected:
                assert on_pg.text == on_sqlite.text, (number, args)
        everything = {"operation": "select", "table": "t", "columns": list(DIFF_SCHEMA["t"])}
        assert (await ask(pg_store, everything)).text == (await ask(sqlite_store, everything)).text
    finally:
        await sqlite_store.close()
        await pg_store.close()
        db.close()


# -- PostgreSQL only: several daemons, a connection that dies ---------------------------------


async def test_a_guarded_update_raced_by_four_daemons_has_exactly_one_winner_in_200_rounds(
    pg_schema: PgSchema,
) -> None:
    # Four stores on one table, each with its connection, opened at once (as four daemons
    # booting); each write's transaction stays open a little, as the colony's writer keeps it
    # for the reply's hand-off, so racing updates wait for the row lock.
    host = PgTablesHost(pg_schema.dsn, linger_s=0.002)
    backend = Backend("postgres", host, Path("."))
    daemons = await asyncio.gather(*(backend.open() for _ in range(4)))
    try:
        for round_ in range(200):
            turn = f"t{round_}"
            await ask(daemons[round_ % 4], row(turn_id=turn, iter=0, role="assistant", fired=0))
            guard = {
                "operation": "update",
                "table": "thread",
                "set": {"fired": 1},
                "where": {"turn_id": turn, "iter": 0, "role": "assistant", "fired": 0},
            }
            replies = await asyncio.gather(
                *(ask(cell, guard, f"c{i}") for i, cell in enumerate(daemons))
            )
            assert sorted(r.hop["rows_affected"] for r in replies) == [0, 0, 0, 1], round_
        # Four stores made the guard's index at once, under the store's lock: one index.
        assert await own_indexes(daemons[0], "thread") == [
            "/memory:thread:by:fired,iter,role,turn_id"
        ]
        fired = await select(daemons[1], columns=["turn_id"], where={"fired": 1})
        assert fired == [{"turn_id": f"t{i}"} for i in range(200)]
    finally:
        for cell in daemons:
            await cell.close()


async def test_a_write_whose_statement_fails_still_commits_its_receipt_on_postgresql(
    pg_schema: PgSchema,
) -> None:
    import psycopg

    cell = await Backend("postgres", PgTablesHost(pg_schema.dsn), Path(".")).open()
    try:
        with psycopg.connect(pg_schema.dsn, autocommit=True) as other:
            other.execute(f"DROP TABLE {named(cell, 'thread')}")  # under the store's feet
        message = source_message("/memory", call(row(turn_id="t")))
        [reply] = await cell.handle(message)
        assert reply.content["header"]["error_code"] == "unknown_table"
        assert "does not exist" in reply.content["messages"][0]["text"]
        receipts = named(cell, "store_receipts")
        assert await scalar(cell, f"SELECT count(*) FROM {receipts}") == 1
    finally:
        await cell.close()


async def test_a_read_whose_connection_died_is_raised_not_answered_on_postgresql(
    pg_schema: PgSchema,
) -> None:
    import psycopg

    cell = await Backend("postgres", PgTablesHost(pg_schema.dsn), Path(".")).open()
    try:
        await select(cell, columns=["turn_id"])  # the read connection is open
        reader = cell.tables.reader  # type: ignore[attr-defined]
        with psycopg.connect(pg_schema.dsn, autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s)", (reader.info.backend_pid,))
        with pytest.raises(psycopg.OperationalError):
            await ask(cell, {"operation": "select", "table": "thread", "columns": ["iter"]})
    finally:
        await cell.close()


async def test_postgresql_columns_compare_bytes_and_hold_64_bit_integers_whatever_the_server(
    pg_schema: PgSchema,
) -> None:
    import psycopg

    cell = await Backend("postgres", PgTablesHost(pg_schema.dsn), Path(".")).open()
    await cell.close()
    with psycopg.connect(pg_schema.dsn) as conn:
        columns = conn.execute(
            "SELECT column_name, data_type, collation_name, is_identity "
            "FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = '/memory:thread' ORDER BY ordinal_position"
        ).fetchall()
    assert columns == [
        ("~row", "bigint", None, "YES"),
        ("fired", "bigint", None, "NO"),
        ("iter", "bigint", None, "NO"),
        ("role", "text", "C", "NO"),
        ("turn", "text", "C", "NO"),
        ("turn_id", "text", "C", "NO"),
    ]


async def test_an_old_cell_db_is_not_moved_onto_postgresql_and_the_log_says_so(
    pg_schema: PgSchema, tmp_path: Path
) -> None:
    from colony.observability import list_logger

    folder = tmp_path / "memory"
    folder.mkdir()
    (folder / "cell.db").write_bytes(b"")  # what an older daemon left
    records: list[dict[str, Any]] = []
    spec = spec_for("/memory", {"schema": SCHEMA})
    spec = dataclasses.replace(
        spec, tables=PgTablesHost(pg_schema.dsn), folder=folder, log=list_logger(records)
    )
    cell = await open_store(spec)
    try:
        assert (await ask(cell, row(turn_id="t"))).hop["rows_affected"] == 1
    finally:
        await cell.close()
    [ignored] = [r for r in records if r["event"] == "store_cell_db_ignored"]
    assert "tables are on postgres; an old cell.db is not moved there" in ignored["detail"]
    assert (folder / "cell.db").exists()
