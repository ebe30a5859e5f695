"""The store cell through a real colony: operations, errors, guards, seeds, injection."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
from pathlib import Path
from typing import Any

import pytest

from colony.testing import ColonyHarness
from tests.conftest import CONTRACT, TreeFactory, hive

SCHEMA = {
    "thread": {"turn_id": "text", "iter": "int", "role": "text", "fired": "int", "turn": "json"}
}


def store_tree(**params: Any) -> dict[str, Any]:
    return {
        "main/config.json": hive(
            {"from": ".", "to": "./memory"}, {"from": "./memory", "to": "/sink"}
        ),
        "main/memory/config.json": {
            "cell": {"type": "store"},
            "params": {"schema": SCHEMA, **params},
            "contract": CONTRACT,
        },
    }


def call(args: dict[str, Any], call_id: str = "call-1") -> dict[str, Any]:
    return {
        "messages": [
            {"origin": "assistant", "type": "tool_call", "id": call_id, "text": json.dumps(args)}
        ]
    }


async def ask(colony: ColonyHarness, args: Any, call_id: str = "call-1", **kw: Any) -> Any:
    before = len(colony.captured("/sink"))
    body = args if "messages" in args else call(args, call_id)
    await colony.send("/memory", body, **kw)
    await colony.settle()
    [reply] = colony.captured("/sink")[before:]
    return reply


async def count(cell: Any, sql: str) -> int:
    """One number read from a store cell's own tables."""
    return int(await cell.tables.read(lambda conn: conn.execute(sql).fetchone()[0]))


def row(**values: Any) -> dict[str, Any]:
    return {"operation": "insert", "table": "thread", "row": values}


async def test_insert_then_select_returns_rows_as_json_text_on_the_call_id(
    make_tree: TreeFactory,
) -> None:
    async with ColonyHarness(make_tree(store_tree()), capture=["/sink"]) as colony:
        inserted = await ask(colony, row(turn_id="t1", iter=0, role="user", turn={"b": 1, "a": 2}))
        assert inserted.headers.hop["operation"] == "insert"
        assert inserted.headers.hop["rows_affected"] == 1
        assert isinstance(inserted.headers.hop["duration_ms"], int)
        assert inserted.body["messages"] == [
            {"origin": "tool", "type": "tool_result", "text": "null", "id": "call-1"}
        ]
        selected = await ask(
            colony,
            {"operation": "select", "table": "thread", "columns": ["turn", "turn_id", "iter"]},
            "call-2",
        )
        assert selected.headers.hop == {
            "operation": "select",
            "rows_affected": 1,
            "duration_ms": selected.headers.hop["duration_ms"],
        }
        turn = selected.body["messages"][0]
        assert turn["id"] == "call-2"
        assert turn["text"] == '[{"iter":0,"turn":"{\\"a\\":2,\\"b\\":1}","turn_id":"t1"}]'
        assert colony.rows("/memory", "thread") == [
            {"fired": None, "iter": 0, "role": "user", "turn": '{"a":2,"b":1}', "turn_id": "t1"}
        ]


async def test_where_order_by_limit_and_distinct_select_the_right_rows(
    make_tree: TreeFactory,
) -> None:
    async with ColonyHarness(make_tree(store_tree()), capture=["/sink"]) as colony:
        for i, role in enumerate(["user", "assistant", "tool", "tool", None]):
            await ask(colony, row(turn_id="t", iter=i, role=role))

        async def select(**args: Any) -> list[dict[str, Any]]:
            reply = await ask(colony, {"operation": "select", "table": "thread", **args})
            rows: list[dict[str, Any]] = json.loads(reply.body["messages"][0]["text"])
            return rows

        assert await select(columns=["iter"], where={"role": "tool"}) == [{"iter": 2}, {"iter": 3}]
        assert await select(
            columns=["iter"], where={"iter": {"gte": 3}}, order_by=[{"col": "iter", "dir": "desc"}]
        ) == [{"iter": 4}, {"iter": 3}]
        assert await select(columns=["iter"], where={"role": {"in": ["user", "assistant"]}}) == [
            {"iter": 0},
            {"iter": 1},
        ]
        assert await select(columns=["iter"], where={"role": {"is_null": True}}) == [{"iter": 4}]
        assert await select(columns=["iter"], where={"role": {"or_null": {"eq": "user"}}}) == [
            {"iter": 0},
            {"iter": 4},
        ]
        assert await select(
            columns=["iter"], where={"role": {"neq": "tool"}, "iter": {"lt": 2}}
        ) == [{"iter": 0}, {"iter": 1}]
        assert await select(columns=["role"], distinct=True, where={"role": "tool"}) == [
            {"role": "tool"}
        ]
        assert await select(columns=["iter"], order_by=[{"col": "iter"}], limit=2) == [
            {"iter": 0},
            {"iter": 1},
        ]
        assert await select(columns=["iter"], where={"role": None}) == []  # = NULL never matches


async def test_update_and_delete_report_the_rows_they_changed(make_tree: TreeFactory) -> None:
    async with ColonyHarness(make_tree(store_tree()), capture=["/sink"]) as colony:
        for i in range(3):
            await ask(colony, row(turn_id="t", iter=i, fired=0))
        updated = await ask(
            colony,
            {
                "operation": "update",
                "table": "thread",
                "set": {"fired": True},
                "where": {"iter": {"lt": 2}},
            },
        )
        assert updated.headers.hop["rows_affected"] == 2
        assert [r["fired"] for r in colony.rows("/memory", "thread")] == [1, 1, 0]
        deleted = await ask(
            colony, {"operation": "delete", "table": "thread", "where": {"fired": 1}}
        )
        assert deleted.headers.hop["rows_affected"] == 2
        everything = await ask(colony, {"operation": "delete", "table": "thread"})
        assert everything.headers.hop["rows_affected"] == 1


async def test_create_table_adds_a_table_that_survives_a_restart(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    root = make_tree(store_tree())
    async with ColonyHarness(root, capture=["/sink"], workdir=tmp_path / "run") as colony:
        made = await ask(
            colony,
            {
                "operation": "create_table",
                "table": "notes",
                "columns": {"body": "text", "n": "int"},
            },
        )
        assert made.headers.hop == {
            "operation": "create_table",
            "rows_affected": 0,
            "duration_ms": made.headers.hop["duration_ms"],
        }
        await ask(colony, {"operation": "insert", "table": "notes", "row": {"body": "x", "n": 1}})
    async with ColonyHarness(root, capture=["/sink"], workdir=tmp_path / "run") as colony:
        reply = await ask(
            colony, {"operation": "select", "table": "notes", "columns": ["body", "n"]}
        )
        assert json.loads(reply.body["messages"][0]["text"]) == [{"body": "x", "n": 1}]


@pytest.mark.parametrize(
    ("body", "operation", "needle"),
    [
        (call({"operation": "upsert", "table": "thread"}), "error", "unknown operation"),
        (
            call({"operation": "update", "table": "thread", "set": {"fired": 1}, "wher": {}}),
            "update",
            'unknown argument "wher"',
        ),
        (call({"operation": "select", "table": "thread"}), "select", "columns is required"),
        # The shape is judged before the table is looked up (issue 15 item 6).
        (
            call({"operation": "select", "table": "nosuch", "columns": []}),
            "select",
            "columns is required",
        ),
        (call({"operation": "update", "table": "nosuch", "set": {}}), "update", "non-empty"),
        (
            call(
                {
                    "operation": "select",
                    "table": "thread",
                    "columns": ["iter"],
                    "where": {"iter": {"like": 1}},
                }
            ),
            "select",
            "unknown operator",
        ),
        (call({"operation": "insert", "table": "thread", "row": {}}), "insert", "non-empty object"),
        (
            call({"operation": "select", "table": "thread", "columns": ["iter"], "limit": 0}),
            "select",
            "limit",
        ),
        (
            {
                "messages": [
                    {"origin": "assistant", "type": "tool_call", "id": "c", "text": "not json"}
                ]
            },
            "error",
            "not JSON",
        ),
        ({"messages": []}, "error", "messages[0]"),
        ({"messages": [{"origin": "user", "type": "text", "text": "{}"}]}, "error", "tool_call"),
    ],
)
async def test_a_malformed_call_is_invalid_input_with_the_operation_stamped(
    make_tree: TreeFactory, body: dict[str, Any], operation: str, needle: str
) -> None:
    async with ColonyHarness(make_tree(store_tree()), capture=["/sink"]) as colony:
        reply = await ask(colony, body)
        assert reply.headers.hop["finish_reason"] == "error"
        assert reply.headers.hop["error_code"] == "invalid_input"
        assert reply.headers.hop["operation"] == operation
        turn = reply.body["messages"][0]
        assert turn["id"] == ""
        assert needle in turn["text"]


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (
            {"operation": "select", "table": "nosuch", "columns": ["a"]},
            "unknown_table",
            "no such table: nosuch",
        ),
        (
            {"operation": "select", "table": "thread", "columns": ["nosuch"]},
            "unknown_column",
            "table thread has no column named nosuch",
        ),
        ({"operation": "insert", "table": "thread", "row": {"iter": 2**70}}, "type_mismatch", ""),
    ],
)
async def test_sql_level_failures_are_ordinary_results_with_an_error_code(
    make_tree: TreeFactory, args: dict[str, Any], code: str, text: str
) -> None:
    async with ColonyHarness(make_tree(store_tree()), capture=["/sink"]) as colony:
        reply = await ask(colony, args)
        assert "finish_reason" not in reply.headers.hop
        assert reply.headers.hop["error_code"] == code
        assert reply.headers.hop["rows_affected"] == 0
        assert reply.body["messages"][0]["id"] == "call-1"
        assert text in reply.body["messages"][0]["text"]


async def test_a_query_past_query_timeout_ms_is_interrupted(make_tree: TreeFactory) -> None:
    tree = store_tree(query_timeout_ms=1)
    seed = [
        '{"schema": {"turn_id": "text", "iter": "int", "role": "text", "fired": "int", "turn": "json"}}'
    ]
    seed += [json.dumps({"turn_id": f"t{i}", "iter": i, "role": "x" * 50}) for i in range(300_000)]
    tree["main/memory/seed/thread.jsonl"] = "\n".join(seed)
    async with ColonyHarness(make_tree(tree), capture=["/sink"]) as colony:
        reply = await ask(
            colony,
            {
                "operation": "select",
                "table": "thread",
                "columns": ["iter"],
                "where": {"role": {"lt": "a"}, "turn_id": {"gt": "a"}},
                "order_by": [{"col": "role"}, {"col": "turn_id", "dir": "desc"}],
            },
        )
        assert reply.headers.hop["error_code"] == "query_timeout"
        assert reply.headers.hop["finish_reason"] == "error"
        assert reply.body["messages"][0]["text"] == "query exceeded query_timeout_ms"


@pytest.mark.parametrize(
    "args",
    [
        {"operation": "select", "table": 'thread"; DROP TABLE thread; --', "columns": ["iter"]},
        {
            "operation": "select",
            "table": "thread",
            "columns": ['iter" FROM thread; DROP TABLE thread; --'],
        },
        {
            "operation": "select",
            "table": "thread",
            "columns": ["iter"],
            "where": {"1=1 OR iter": 1},
        },
        {"operation": "update", "table": "thread", "set": {'fired" = 1 --': 1}},
        {
            "operation": "select",
            "table": "thread",
            "columns": ["iter"],
            "order_by": [{"col": "iter; DROP TABLE thread"}],
        },
        {"operation": "select", "table": "sqlite_master", "columns": ["sql"]},
    ],
)
async def test_injection_through_names_is_refused_as_invalid_input(
    make_tree: TreeFactory, args: dict[str, Any]
) -> None:
    async with ColonyHarness(make_tree(store_tree()), capture=["/sink"]) as colony:
        await ask(colony, row(turn_id="t", iter=1))
        reply = await ask(colony, args)
        assert reply.headers.hop["error_code"] == "invalid_input"
        assert len(colony.rows("/memory", "thread")) == 1


async def test_injection_through_values_is_stored_verbatim(make_tree: TreeFactory) -> None:
    evil = "x'); DROP TABLE thread; --"
    async with ColonyHarness(make_tree(store_tree()), capture=["/sink"]) as colony:
        await ask(colony, row(turn_id=evil, role='" OR 1=1 --'))
        reply = await ask(
            colony,
            {
                "operation": "select",
                "table": "thread",
                "columns": ["turn_id", "role"],
                "where": {"turn_id": evil},
            },
        )
        assert json.loads(reply.body["messages"][0]["text"]) == [
            {"turn_id": evil, "role": '" OR 1=1 --'}
        ]


async def test_an_internal_write_surface_refuses_writers_outside_the_hive(
    make_tree: TreeFactory,
) -> None:
    tree = store_tree(write_surface="internal")
    tree["main/config.json"] = hive(
        {"from": ".", "to": "./box/memory"}, {"from": "./box/memory", "to": "/sink"}
    )
    tree["main/box/memory/config.json"] = tree.pop("main/memory/config.json")
    tree["main/box/config.json"] = hive()
    async with ColonyHarness(make_tree(tree), capture=["/sink"]) as colony:
        denied = await colony_ask(colony, "/box/memory", row(turn_id="t"), reply_to="/outside")
        assert denied.headers.hop["error_code"] == "write_denied"
        assert denied.body["messages"][0]["id"] == "call-1"
        allowed = await colony_ask(colony, "/box/memory", row(turn_id="t"), reply_to="/box/writer")
        assert allowed.headers.hop["rows_affected"] == 1
        read = await colony_ask(
            colony,
            "/box/memory",
            {"operation": "select", "table": "thread", "columns": ["turn_id"]},
            reply_to="/outside",
        )
        assert read.headers.hop["rows_affected"] == 1
        # The same call text again, planned already: still judged by who sends it.
        again = await colony_ask(colony, "/box/memory", row(turn_id="t"), reply_to="/outside")
        assert again.headers.hop["error_code"] == "write_denied"


async def test_a_call_that_named_an_unknown_table_plans_anew_once_create_table_made_it(
    make_tree: TreeFactory,
) -> None:
    select = {"operation": "select", "table": "notes", "columns": ["body"]}
    async with ColonyHarness(make_tree(store_tree()), capture=["/sink"]) as colony:
        before = await ask(colony, select)
        assert before.headers.hop["error_code"] == "unknown_table"
        await ask(colony, {"operation": "create_table", "table": "notes", "columns": {"n": "int"}})
        unknown_column = await ask(colony, select)
        assert unknown_column.headers.hop["error_code"] == "unknown_column"
        await ask(
            colony, {"operation": "create_table", "table": "notes", "columns": {"body": "text"}}
        )
        await ask(colony, {"operation": "insert", "table": "notes", "row": {"body": "x"}})
        for call_id in ("call-a", "call-b"):  # the second is answered from the kept plan
            found = await ask(colony, select, call_id)
            assert found.headers.hop["rows_affected"] == 1
            assert found.body["messages"][0] == {
                "origin": "tool",
                "type": "tool_result",
                "text": '[{"body":"x"}]',
                "id": call_id,
            }


async def colony_ask(colony: ColonyHarness, target: str, args: dict[str, Any], **kw: Any) -> Any:
    before = len(colony.captured("/sink"))
    await colony.send(target, call(args), **kw)
    await colony.settle()
    # a reply_to outside the tree is unresolved, so the reply reaches /sink only via the edge:
    return colony.captured("/sink")[before]


async def test_seed_rows_load_once_into_a_fresh_database(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    tree = store_tree()
    tree["main/memory/seed/thread.jsonl"] = (
        '{"schema": {"turn_id": "text", "iter": "int", "role": "text", "fired": "int", "turn": "json", "extra": "text"}}\n'
        '{"turn_id": "seeded", "iter": 0}\n\n{"turn_id": "second", "role": "user"}\n'
    )
    root = make_tree(tree)
    async with ColonyHarness(root, capture=["/sink"], workdir=tmp_path / "run") as colony:
        await ask(colony, row(turn_id="live"))
        assert [r["turn_id"] for r in colony.rows("/memory", "thread")] == [
            "seeded",
            "second",
            "live",
        ]
    async with ColonyHarness(root, capture=["/sink"], workdir=tmp_path / "run") as colony:
        await ask(colony, {"operation": "select", "table": "thread", "columns": ["iter"]})
        assert [r["turn_id"] for r in colony.rows("/memory", "thread")] == [
            "seeded",
            "second",
            "live",
        ]


async def test_a_params_update_is_applied_silently_and_persisted(make_tree: TreeFactory) -> None:
    async with ColonyHarness(make_tree(store_tree()), capture=["/sink"]) as colony:
        await colony.send("/memory", {"messages": [], "params": {"query_timeout_ms": 500}})
        await colony.settle()
        assert colony.captured("/sink") == []
        assert colony.rows("/memory", "store_params")[0]["key"] == "query_timeout_ms"
        refused = await ask(colony, {"messages": [], "params": {"schema": {}}})
        assert refused.headers.hop["operation"] == "params_update"
        assert refused.headers.hop["error_code"] == "invalid_input"


async def test_one_guarded_update_among_200_concurrent_contenders_wins_every_time(
    make_tree: TreeFactory,
) -> None:
    async with ColonyHarness(
        make_tree(store_tree()), capture=["/sink"], log_messages=False
    ) as colony:
        for round_ in range(20):
            turn = f"t{round_}"
            await ask(colony, row(turn_id=turn, iter=0, role="assistant", fired=0))
            before = len(colony.captured("/sink"))
            guard = {
                "operation": "update",
                "table": "thread",
                "set": {"fired": 1},
                "where": {"turn_id": turn, "iter": 0, "role": "assistant", "fired": 0},
            }
            contenders = [colony.send("/memory", call(guard, f"c{i}")) for i in range(200)]
            random.shuffle(contenders)
            await asyncio.gather(*contenders)
            await colony.settle()
            replies = colony.captured("/sink")[before:]
            assert len(replies) == 200
            assert sorted(r.headers.hop["rows_affected"] for r in replies) == [0] * 199 + [1]


async def test_a_redelivered_write_is_answered_from_its_receipt_not_written_twice() -> None:
    from cells.store.cell import open_store
    from colony.envelope import source_message
    from colony.testing import spec_for

    cell = await open_store(spec_for("/memory", {"schema": SCHEMA}))
    try:
        insert = source_message(
            "/memory", call(row(turn_id="t1", iter=0, role="user", turn={}), "c1")
        )
        first = await cell.handle(insert)
        again = await cell.handle(insert)  # the journal gives it back after a crash
        assert again[0].content == first[0].content
        assert await count(cell, "SELECT count(*) FROM thread") == 1
        other = source_message("/memory", insert.body)  # same body, a new message
        await cell.handle(other)
        assert await count(cell, "SELECT count(*) FROM thread") == 2
    finally:
        await cell.close()


async def test_under_at_most_once_a_write_keeps_no_receipt() -> None:
    from cells.store.cell import open_store
    from colony.config.models import ColonyConfig
    from colony.envelope import source_message
    from colony.testing import spec_for

    spec = spec_for("/memory", {"schema": SCHEMA})
    cell = await open_store(dataclasses.replace(spec, colony=ColonyConfig(delivery="at_most_once")))
    try:
        insert = source_message("/memory", call(row(turn_id="t1", iter=0, role="user", turn={})))
        await cell.handle(insert)
        await cell.handle(insert)
        assert await count(cell, "SELECT count(*) FROM thread") == 2
        assert await count(cell, "SELECT count(*) FROM store_receipts") == 0
    finally:
        await cell.close()
