"""The message log's two tables (``message_log_recent``, unindexed, and ``message_log_indexed``)
read as one ``message_log``, and a file written by a version-1 daemon (one indexed table) is
brought to version 2 when a daemon opens it, rows, order and indexes kept."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from colony.effects import LogRow
from colony.envelope import follow_up, source_message
from colony.persist import rows as rows_module
from colony.persist.db import ColonyDb
from colony.persist.items import Unit
from colony.persist.records import read_log
from colony.persist.schema import ColonyDbError, probe
from colony.persist.source import Source

BODY = {"messages": [{"origin": "user", "type": "text", "text": "ping"}]}

VERSION_1 = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS registry (
    path TEXT PRIMARY KEY,
    cell_id TEXT NOT NULL,
    cell_type TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS message_log (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL,
    trace_id TEXT NOT NULL,
    parent_message_id TEXT,
    correlation_id TEXT,
    ttl INTEGER NOT NULL,
    from_path TEXT NOT NULL,
    to_path TEXT NOT NULL,
    reply_to TEXT,
    headers TEXT NOT NULL,
    body_kind TEXT NOT NULL,
    body_payload TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS message_log_trace ON message_log(trace_id);
CREATE INDEX IF NOT EXISTS message_log_parent ON message_log(parent_message_id);
CREATE INDEX IF NOT EXISTS message_log_to ON message_log(to_path);
CREATE INDEX IF NOT EXISTS message_log_created ON message_log(created_at);
CREATE INDEX IF NOT EXISTS message_log_id ON message_log(id);
CREATE TABLE IF NOT EXISTS dead_letters (
    id INTEGER PRIMARY KEY,
    sender_path TEXT NOT NULL,
    original_target TEXT NOT NULL,
    resolved_target TEXT NOT NULL,
    error_code TEXT NOT NULL,
    trace_id TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    detail TEXT,
    message_id TEXT,
    replayed_at INTEGER,
    replayed_as TEXT,
    message_json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS dead_letters_created ON dead_letters(created_at);
CREATE INDEX IF NOT EXISTS dead_letters_code ON dead_letters(error_code);
CREATE INDEX IF NOT EXISTS dead_letters_trace ON dead_letters(trace_id);
CREATE TABLE IF NOT EXISTS journal (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL,
    cell TEXT NOT NULL,
    sender TEXT NOT NULL,
    envelope TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS journal_id ON journal(id);
CREATE INDEX IF NOT EXISTS journal_cell ON journal(cell, seq);
CREATE TABLE IF NOT EXISTS ingress_keys (
    key TEXT PRIMARY KEY,
    trace_id TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
INSERT INTO meta(key, value) VALUES ('schema_version', '1');
"""
"""``colony.db`` as a version-1 daemon created it."""

LOG_INDEXES = {
    "message_log_trace",
    "message_log_parent",
    "message_log_to",
    "message_log_created",
    "message_log_id",
}


def _chain(hops: int) -> list[LogRow]:
    """The rows of one message routed through ``hops`` hives to /sink."""
    message = source_message("/", BODY)
    out = [LogRow(message, "@external", "/", 63)]
    for n in range(hops):
        message = follow_up(
            message,
            target=f"/h{n}",
            context={},
            hop={"n": n},
            body=message.body,
            reply_to=None,
            ttl=62 - n,
        )
        out.append(LogRow(message, "/", f"/h{n}", 62 - n))
    return out


def _schema(path: Path) -> dict[str, str]:
    with sqlite3.connect(path) as conn:
        return dict(
            conn.execute("SELECT name, type FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
        )


def _count(path: Path, table: str) -> int:
    with sqlite3.connect(path) as conn:
        (n,) = conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()
    return int(n)


def _old_row(seq: int, row: LogRow) -> tuple[object, ...]:
    """A message-log row as a daemon wrote it before ``at_ms`` and ``edges``."""
    m = row.message
    return (
        seq,
        m.id,
        m.trace_id,
        m.parent_message_id,
        None,
        row.ttl,
        row.from_path,
        row.to_path,
        None,
        '{"context": {}, "hop": {}}',
        "inline",
        '{"messages": []}',
        m.created_at,
    )


def _version_1_file(path: Path, traces: int) -> None:
    with sqlite3.connect(path) as conn:
        conn.executescript(VERSION_1)
        seq = 0
        for _ in range(traces):
            for row in _chain(3):
                seq += 1
                conn.execute(
                    "INSERT INTO message_log(seq, id, trace_id, parent_message_id, correlation_id, "
                    "ttl, from_path, to_path, reply_to, headers, body_kind, body_payload, "
                    "created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    _old_row(seq * 10, row),  # seq values need not be dense
                )


async def test_a_version_1_colony_db_opens_with_its_message_log_rows_order_and_indexes_kept(
    tmp_path: Path,
) -> None:
    path = tmp_path / "colony.db"
    _version_1_file(path, traces=4)
    before = read_log(Source.sqlite(path))  # a reader copes with a file no daemon has upgraded yet
    trace = before[4].trace_id
    assert probe(path) is None  # version 1 is one this daemon opens

    db = ColonyDb(path)
    try:
        schema = _schema(path)
        assert schema["message_log"] == "view"
        assert schema["message_log_indexed"] == "table"
        assert schema["message_log_recent"] == "table"
        assert {name for name, kind in schema.items() if kind == "index"} >= LOG_INDEXES
        assert read_log(Source.sqlite(path)) == before
        assert read_log(Source.sqlite(path), trace) == [
            row for row in before if row.trace_id == trace
        ]

        added = _chain(2)
        await db.commit(Unit(logs=added))
        after = await db.message_log()
        assert after[: len(before)] == before
        assert [row.id for row in after[len(before) :]] == [row.message.id for row in added]
    finally:
        db.close()
    with sqlite3.connect(path) as conn:
        (version,) = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        seqs = [s for (s,) in conn.execute("SELECT seq FROM message_log ORDER BY seq")]
    assert version == "2"
    last_old = len(before) * 10  # the version-1 rows keep their seq (10, 20, ...)
    assert seqs == [10 * n for n in range(1, len(before) + 1)] + [
        last_old + n for n in range(1, len(added) + 1)
    ]
    ColonyDb(path).close()  # a second open finds nothing to upgrade
    assert read_log(Source.sqlite(path))[: len(before)] == before


async def test_message_log_rows_move_to_the_indexed_table_in_bulk_and_read_as_one_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rows_module, "LOG_MOVE_ROWS", 10)
    path = tmp_path / "colony.db"
    db = ColonyDb(path)
    written: list[LogRow] = []
    try:
        for _ in range(6):  # 4 rows a unit: staged 4, 8, then 12 move; 4, 8, then 12 move
            unit_rows = _chain(3)
            written += unit_rows
            await db.commit(Unit(logs=unit_rows))
            await db.flush()
            staged = _count(path, "message_log_recent")
            indexed = _count(path, "message_log_indexed")
            assert staged + indexed == len(written)
            assert staged < 10
        assert (indexed, staged) == (24, 0)
        await db.commit(Unit(logs=_chain(1)))
        logged = await db.message_log()
        assert [row.id for row in logged[: len(written)]] == [r.message.id for r in written]
        assert _count(path, "message_log_recent") == 2
        trace = written[5].message.trace_id
        assert [row.id for row in await db.message_log(trace)] == [
            r.message.id for r in written if r.message.trace_id == trace
        ]
    finally:
        db.close()
    with sqlite3.connect(path) as conn:
        seqs = [s for (s,) in conn.execute("SELECT seq FROM message_log")]
    assert seqs == list(range(1, len(written) + 3))  # one numbering across both tables


async def test_a_large_row_goes_straight_to_the_indexed_table_and_reads_in_its_place(
    tmp_path: Path,
) -> None:
    path = tmp_path / "colony.db"
    db = ColonyDb(path)
    small = _chain(1)
    large = source_message("/", {"text": "x" * (rows_module.STAGE_MAX_CHARS + 1)})
    written = [small[0], LogRow(large, "@external", "/", 63), small[1]]
    try:
        await db.commit(Unit(logs=written))
        assert [row.id for row in await db.message_log()] == [r.message.id for r in written]
    finally:
        db.close()
    with sqlite3.connect(path) as conn:
        indexed = [i for (i,) in conn.execute("SELECT id FROM message_log_indexed")]
        staged = [i for (i,) in conn.execute("SELECT id FROM message_log_recent ORDER BY seq")]
    assert indexed == [large.id]  # a move would write its bytes twice
    assert staged == [small[0].message.id, small[1].message.id]


def test_a_colony_db_of_an_unknown_schema_version_is_refused_naming_the_versions(
    tmp_path: Path,
) -> None:
    path = tmp_path / "colony.db"
    ColonyDb(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value = '9' WHERE key = 'schema_version'")
    problem = probe(path)
    assert problem is not None
    assert "schema_version 9" in problem
    assert "reads 2" in problem
    with pytest.raises(ColonyDbError, match="schema_version 9"):
        ColonyDb(path)


def _before_hop_timing(path: Path) -> None:
    """Make ``path`` what a daemon wrote before the message log had ``at_ms`` and ``edges``,
    dead letters ``at_ms``, and before the ``handling`` table."""
    ColonyDb(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("DROP VIEW message_log")
        conn.execute("DROP INDEX message_log_at")
        for table in ("message_log_indexed", "message_log_recent"):
            conn.execute(f"ALTER TABLE {table} DROP COLUMN at_ms")
            conn.execute(f"ALTER TABLE {table} DROP COLUMN edges")
        names = "seq, id, trace_id, parent_message_id, correlation_id, ttl, from_path, to_path, "
        names += "reply_to, headers, body_kind, body_payload, created_at"
        conn.execute(
            f"CREATE VIEW message_log AS SELECT {names} FROM message_log_indexed "
            f"UNION ALL SELECT {names} FROM message_log_recent"
        )
        conn.execute("DROP VIEW handling")
        conn.execute("DROP TABLE handling_recent")
        conn.execute("DROP TABLE handling_indexed")
        conn.execute("ALTER TABLE dead_letters DROP COLUMN at_ms")
        for seq, row in enumerate(_chain(2), 1):
            conn.execute(
                f"INSERT INTO message_log_recent({names}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                _old_row(seq, row),
            )


async def test_a_colony_db_from_before_hop_timing_gains_it_and_its_old_rows_read_without(
    tmp_path: Path,
) -> None:
    path = tmp_path / "colony.db"
    _before_hop_timing(path)
    old = read_log(Source.sqlite(path))  # a reader copes before any daemon upgraded the file
    assert [row.at_ms for row in old] == [None, None, None]
    db = ColonyDb(path)
    try:
        added = [
            LogRow(row.message, row.from_path, row.to_path, row.ttl, 1_700_000_000_123, ("/#0",))
            for row in _chain(1)
        ]
        await db.commit(Unit(logs=added))
        after = await db.message_log()
    finally:
        db.close()
    assert after[:3] == old
    assert [(row.at_ms, row.edges) for row in after[3:]] == [(1_700_000_000_123, ("/#0",))] * 2
    with sqlite3.connect(path) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        letters = {r[1] for r in conn.execute("PRAGMA table_info(dead_letters)")}
    assert {"handling", "handling_recent", "handling_indexed"} <= tables
    assert "at_ms" in letters
