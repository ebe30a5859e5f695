"""Every read of the colony's rows answers the same from ``colony.db`` and from the cluster
database: the same rows, written by each backend's own writer, read back through one
:class:`~colony.persist.source.Source` per backend (the PostgreSQL leg on a real server, a
schema of the test's own)."""

from __future__ import annotations

import dataclasses
import re
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from colony.dead_letters import DeadLetter
from colony.effects import LogRow
from colony.envelope import Envelope, source_message
from colony.operations import list_dead_letters
from colony.persist.db import ColonyDb
from colony.persist.pg.db import PgDb
from colony.persist.records import (
    DeadLetterRow,
    claim_replay,
    delete_dead_letters,
    read_dead_letter,
    read_dead_letter_message,
    read_dead_letters,
    read_dead_letters_after,
    read_log,
    read_registry,
    read_trace_dead_letters,
    release_replay,
    revive_in_registry,
    with_messages,
)
from colony.persist.source import Source, postgres_sql, source_for_root
from colony.queries import DeadLettersFilters, MessagesFilters, TraceFilters, parse
from colony.reads import select_dead_letters, select_messages, select_trace
from colony.traceview import trace_lines
from tests.pg import PgSchema

Db = ColonyDb | PgDb


@pytest.fixture
def db(either_db: ColonyDb | PgDb) -> ColonyDb | PgDb:
    return either_db


def message(
    target: str,
    at: int,
    *,
    trace: str | None = None,
    parent: Envelope | None = None,
    hop: dict[str, Any] | None = None,
    correlation: str | None = None,
) -> Envelope:
    m = source_message(target, {"text": target}, hop=hop, trace_id=trace)
    m.created_at = at
    m.parent_message_id = None if parent is None else parent.id
    m.correlation_id = correlation
    return m


def hop(m: Envelope, from_path: str = "/") -> LogRow:
    return LogRow(m, from_path, m.target, m.ttl)


def letter(code: str, m: Envelope) -> DeadLetter:
    return DeadLetter(code, "/sender", m.target, m.target, m, f"{code} detail")


async def store(db: Db, *rows: LogRow | DeadLetter) -> None:
    db.write(rows)
    await db.flush()


def ids(rows: list[Any]) -> list[Any]:
    return [r["id"] if isinstance(r, dict) else r.id for r in rows]


# -- the message log ----------------------------------------------------------------------------


async def test_the_message_log_of_a_trace_reads_in_the_order_it_was_written(db: Db) -> None:
    first = message("/a", 300)
    other = message("/b", 100)
    second = message("/a/x", 200, trace=first.trace_id, parent=first)
    third = message("/a/y", 100, trace=first.trace_id, parent=second)
    await store(db, *(hop(m) for m in (first, other, second, third)))
    source = db.source

    # Write order, never created_at order (the third is older than the first).
    assert ids(read_log(source, first.trace_id)) == [first.id, second.id, third.id]
    assert ids(read_log(source)) == [first.id, other.id, second.id, third.id]
    assert ids(read_log(source, limit=2)) == [first.id, other.id]
    [entry] = read_log(source, other.trace_id)
    assert (entry.to_path, entry.body, entry.created_at) == ("/b", {"text": "/b"}, 100)
    assert entry.headers == {"context": {}, "hop": {}}
    tree = [re.sub(r"  \+\d+ ms", "", line) for line in trace_lines(source, first.trace_id)]
    assert tree[1:] == [
        "└── / → /a  ttl 64",
        "    └── / → /a/x  ttl 64",
        "        └── / → /a/y  ttl 64",
    ]


# -- dead letters -------------------------------------------------------------------------------


async def test_dead_letters_read_with_their_filters_in_insertion_order(db: Db) -> None:
    trace = str(uuid.uuid4())
    one = message("/x1", 10, trace=trace)
    two = message("/y", 20)
    three = message("/x3", 30, trace=trace)
    await store(db, letter("x", one), letter("y", two), letter("x", three))
    source = db.source

    rows = read_dead_letters(source)
    assert [(r.error_code, r.message_id, r.created_at) for r in rows] == [
        ("x", one.id, 10),
        ("y", two.id, 20),
        ("x", three.id, 30),
    ]
    first, second, last = ids(rows)
    assert first < second < last
    assert ids(read_dead_letters(source, "x")) == [first, last]
    assert ids(read_dead_letters(source, since=20)) == [second, last]
    assert ids(read_dead_letters(source, limit=2)) == [first, second]
    assert ids(read_dead_letters_after(source, first)) == [second, last]
    assert ids(read_dead_letters_after(source, first, error_code="x")) == [last]
    assert ids(read_dead_letters_after(source, 0, since=30)) == [last]
    assert ids(read_trace_dead_letters(source, trace)) == [first, last]
    assert rows[0].detail == "x detail"
    assert rows[0].sender_path == "/sender"
    assert rows[0].source == source
    assert "message" not in vars(rows[0])  # a listing reads no body
    assert rows[0].message.body == {"text": "/x1"}
    filled = with_messages(read_dead_letters(source))
    assert [vars(r)["message"].target for r in filled] == ["/x1", "/y", "/x3"]

    listed = select_dead_letters(source, parse(DeadLettersFilters, {"error_code": "x"}))
    assert [(r["id"], r["message_id"], r["trace_id"]) for r in listed] == [
        (first, one.id, trace),
        (last, three.id, trace),
    ]
    paged = select_dead_letters(source, parse(DeadLettersFilters, {"since": 20, "limit": 1}))
    assert ids(paged) == [second]

    lines: list[str] = []
    assert (
        list_dead_letters(
            source, error_code="y", since=None, as_json=False, follow=False, write=lines.append
        )
        == second
    )
    assert len(lines) == 1
    assert f"#{second}" in lines[0]
    assert "y" in lines[0]


async def test_one_dead_letter_reads_with_its_message_until_it_is_deleted(db: Db) -> None:
    kept = message("/kept", 10)
    gone = message("/gone", 20)
    await store(db, letter("x", kept), letter("y", gone))
    source = db.source
    kept_id, gone_id = ids(read_dead_letters(source))

    row = read_dead_letter(source, kept_id)
    assert row is not None
    assert (row.message.id, row.message.target, row.message.body) == (
        kept.id,
        "/kept",
        {"text": "/kept"},
    )
    assert read_dead_letter(source, 999_999) is None
    text = read_dead_letter_message(source, kept_id)
    assert text is not None
    assert kept.id in text
    assert read_dead_letter_message(source, 999_999) is None

    [unread] = read_dead_letters(source, "y")  # its message not read yet
    deleted = delete_dead_letters(source, ids=[gone_id, kept_id + 1_000])
    assert ids(deleted) == [gone_id]
    assert ids(read_dead_letters(source)) == [kept_id]
    with pytest.raises(LookupError, match=f"no longer in {re.escape(str(source))}"):
        _ = unread.message
    assert ids(delete_dead_letters(source, error_code="nothing")) == []
    assert ids(delete_dead_letters(source)) == [kept_id]
    assert read_dead_letters(source) == []


async def test_a_replay_claim_has_one_winner_and_a_release_undoes_it(db: Db) -> None:
    letters = [message(f"/r{n}", n) for n in range(12)]
    await store(db, *(letter("x", m) for m in letters))
    source = db.source
    rows = read_dead_letters(source)

    def race(row: DeadLetterRow) -> list[bool]:
        start = threading.Barrier(2)

        def claim(name: str) -> bool:
            start.wait()
            return claim_replay(source, row.id, f"{name}-{row.id}", force=False).granted

        with ThreadPoolExecutor(2) as pool:
            return list(pool.map(claim, ["left", "right"]))

    for row in rows:
        assert sorted(race(row)) == [False, True], f"dead letter #{row.id}"
    again = claim_replay(source, rows[0].id, "again", force=False)
    assert not again.granted
    assert again.letter is not None
    assert again.letter.replayed_as is not None
    assert again.letter.replayed_as.endswith(f"-{rows[0].id}")

    forced = claim_replay(source, rows[0].id, "forced", force=True)
    assert forced.granted
    assert forced.letter is not None
    release_replay(source, forced.letter)  # the forced replay could not be sent
    back = read_dead_letter(source, rows[0].id)
    assert back is not None
    assert back.replayed_as == forced.letter.replayed_as  # as it was before the forced claim

    fresh = read_dead_letter(source, rows[1].id)
    assert fresh is not None
    release_replay(source, dataclasses.replace(fresh, replayed_at=None, replayed_as=None))
    undone = read_dead_letter(source, rows[1].id)
    assert undone is not None
    assert (undone.replayed_at, undone.replayed_as) == (None, None)
    assert claim_replay(source, rows[1].id, "later", force=False).granted
    missing = claim_replay(source, 999_999, "none", force=False)
    assert (missing.letter, missing.granted) == (None, False)


# -- the registry -------------------------------------------------------------------------------


async def test_the_registry_reads_in_code_point_order_and_revives_a_failed_cell(db: Db) -> None:
    db.set_registry("/b", "id-b", "code", "active")
    db.set_registry("/B", "id-B", "code", "failed")
    db.set_registry("/a", "id-a", "store", "inactive")
    await db.flush()
    source = db.source

    rows = read_registry(source)
    assert list(rows) == ["/B", "/a", "/b"]
    assert (rows["/a"].cell_id, rows["/a"].cell_type, rows["/a"].status) == (
        "id-a",
        "store",
        "inactive",
    )
    assert revive_in_registry(source, "/B") == "failed"
    assert read_registry(source)["/B"].status == "active"
    assert revive_in_registry(source, "/a") == "inactive"  # not failed: left as it is
    assert read_registry(source)["/a"].status == "inactive"
    assert revive_in_registry(source, "/nobody") is None


# -- the /colony/* reads' SQL ---------------------------------------------------------------------


async def test_the_colony_reads_answer_the_same_filters_on_either_backend(db: Db) -> None:
    trace = str(uuid.uuid4())
    corr = str(uuid.uuid4())
    start = message("/main/a", 100, trace=trace, correlation=corr)
    failed = message("/main/ab", 110, trace=trace, parent=start, hop={"error_code": "boom"})
    # A lone surrogate's escape: SQLite reads these headers as JSON, PostgreSQL only after the
    # escape is replaced; the error code is found on both.
    odd = message("/other", 120, trace=trace, hop={"error_code": "odd", "s": "\ud800"})
    # A NaN beside a lone surrogate is written as NaN: JSON on neither engine, so no match,
    # and the read must not fail.
    broken = message("/other", 130, hop={"error_code": "nan", "s": "\ud800", "n": float("nan")})
    plain = message("/main/b", 140, correlation=corr)
    await store(
        db,
        hop(start),
        hop(failed, "/main/a"),
        hop(odd, "/main/ab"),
        hop(broken),
        hop(plain, "/main/a"),
    )
    source = db.source

    def trace_ids(**query: Any) -> list[str]:
        return ids(select_trace(source, parse(TraceFilters, query)))

    assert trace_ids(trace_id=trace) == [start.id, failed.id, odd.id]
    assert trace_ids(path_prefix="/main/a") == [start.id, failed.id]
    assert trace_ids(path_prefix="/main/") == [start.id, failed.id, plain.id]
    assert trace_ids(error=True) == [failed.id, odd.id]
    assert trace_ids(correlation_id=corr, since=101) == [plain.id]
    assert trace_ids(limit=2) == [start.id, failed.id]
    [row] = select_trace(source, parse(TraceFilters, {"error": True, "path_prefix": "/main"}))
    assert row["headers"]["hop"] == {"error_code": "boom"}
    assert row["from_path"] == "/main/a"

    def messages(**query: Any) -> tuple[list[str], int]:
        rows, scanned = select_messages(source, parse(MessagesFilters, query))
        return ids(rows), scanned

    newest_first = [plain.id, broken.id, odd.id, failed.id, start.id]
    assert messages() == (newest_first, 5)
    assert messages(limit=2) == (newest_first[:2], 5)
    assert messages(before_created_at=130, before_id=broken.id) == (newest_first[2:], 3)
    assert messages(before_created_at=120) == (newest_first[3:], 2)
    assert messages(id=odd.id) == ([odd.id], 1)
    assert messages(trace_id=trace, to_path_prefix="/main/a") == ([failed.id, start.id], 2)
    assert messages(from_path_prefix="/main/a") == ([plain.id, odd.id, failed.id], 5)
    assert messages(from_path_prefix="/main/a", scan_budget=2) == ([plain.id], 2)
    assert messages(correlation_id=corr, until=139) == ([start.id], 4)
    assert messages(parent_message_id=start.id, body_kind="inline") == ([failed.id], 1)
    assert messages(since=120, until=130) == ([broken.id, odd.id], 2)


# -- PostgreSQL only ------------------------------------------------------------------------------


async def test_prefixes_and_orders_compare_by_code_point_whatever_the_database_collation(
    pg_schema: PgSchema,
) -> None:
    db = PgDb(pg_schema.dsn, "reader", 1)
    try:
        upper = message("/Ba/x", 100)
        lower = message("/ba/y", 200)
        await store(db, hop(upper), hop(lower))
        db.set_registry("/a", "id-a", "code", "active")
        db.set_registry("/B", "id-B", "code", "active")
        await db.flush()
    finally:
        db.close()
    source = db.source
    # A language's collation ("und": case is a tertiary difference, so "/ba/y" sorts between
    # "/B" and "/C"); the reads must still compare as SQLite does, by code point.
    with source.connect(write=True) as session:
        for table, column in (("message_log", "to_path"), ("registry", "path")):
            session.execute(
                f'ALTER TABLE {table} ALTER COLUMN {column} TYPE text COLLATE "und-x-icu"'
            )
        ordered = session.execute("SELECT path FROM registry ORDER BY path").fetchall()
    assert [p for (p,) in ordered] == ["/a", "/B"]  # the collation is in force

    assert ids(select_trace(source, parse(TraceFilters, {"path_prefix": "/B"}))) == [upper.id]
    rows, _ = select_messages(source, parse(MessagesFilters, {"to_path_prefix": "/b"}))
    assert ids(rows) == [lower.id]
    assert list(read_registry(source)) == ["/B", "/a"]


def test_a_cluster_database_that_does_not_answer_fails_a_read_with_one_of_its_errors() -> None:
    source = Source.postgres("postgresql://postgres:secret@127.0.0.1:1/test")
    with pytest.raises(source.errors):
        read_log(source)
    assert "secret" not in str(source) + repr(source)
    assert str(source) == "the cluster database (127.0.0.1:1/test)"


def test_the_sql_is_written_once_with_question_marks_and_translated_for_postgresql() -> None:
    assert postgres_sql("SELECT ? WHERE a LIKE '5%' AND b = ?") == (
        "SELECT %s WHERE a LIKE '5%%' AND b = %s"
    )


def test_a_root_reads_its_colony_db_unless_a_cluster_dsn_is_given(tmp_path: Path) -> None:
    assert source_for_root(tmp_path, None) == Source.sqlite(tmp_path / "colony.db")
    assert source_for_root(tmp_path, "postgresql://h/db") == Source.postgres("postgresql://h/db")
    with pytest.raises(ValueError, match="exactly one"):
        Source()
