"""Retention prunes the record by age and by size, a bounded batch at a time, on either
backend; a dry run counts and deletes nothing; the newest rows and the journal are kept."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections import Counter
from typing import Any

import pytest

from colony.config.models import RetentionConfig
from colony.dead_letters import DeadLetter
from colony.effects import Handled, LogRow
from colony.envelope import source_message
from colony.ids import now_ms
from colony.persist import prune
from colony.persist.db import ColonyDb
from colony.persist.pg.db import PgDb
from colony.persist.records import read_log
from colony.persist.schema import WAL_LIMIT_BYTES, connect
from colony.persist.source import Source
from colony.retention import BATCH, BATCH_BYTES, policy_of, prune_round, through_writer

DAY = prune.DAY_MS
NOW = now_ms()
BODY = {"messages": [{"origin": "user", "type": "text", "text": "ping"}]}


def _log(age_days: float, body: Any = BODY) -> LogRow:
    at = int(NOW - age_days * DAY)
    m = source_message("/a", body)
    m.created_at = at // 1000
    return LogRow(m, "/", "/a", 5, at)


def _handled(age_days: float) -> Handled:
    return Handled("m", "t", "/a", "capture", int(NOW - age_days * DAY), 1, "ok")


def _letter(age_days: float, body: Any = BODY) -> DeadLetter:
    m = source_message("/gone", body)
    m.created_at = int(NOW - age_days * DAY) // 1000
    return DeadLetter("unresolved_path", "/", "/gone", "/gone", m, None, int(NOW - age_days * DAY))


async def _prune(
    db: ColonyDb | PgDb, retention: RetentionConfig, batch: int = BATCH
) -> tuple[Counter[str], int, list[int]]:
    sizes: list[int] = []
    delete = through_writer(db)

    async def recorded(target: prune.Prunable, keys: list[Any]) -> int:
        sizes.append(len(keys))
        return await delete(target, keys)

    counts, batches = await prune_round(
        db.source, policy_of(retention), recorded, batch=batch, pause=0, now=NOW
    )
    return counts, batches, sizes


def _count(source: Source, sql: str) -> int:
    return int(source.select(sql)[0][0])


async def test_rows_older_than_their_days_are_pruned_and_younger_ones_kept(
    either_db: ColonyDb | PgDb,
) -> None:
    db = either_db
    db.write([_log(20), _log(15), _log(1), _log(0)])
    db.write([_handled(20), _handled(2)])
    db.write([_letter(100), _letter(91), _letter(10)])
    await db.flush()

    counts, _, _ = await _prune(db, RetentionConfig())
    assert counts == Counter(message_log=2, handling=1, dead_letters=2)
    log = read_log(db.source)
    assert [r.at_ms for r in log] == [int(NOW - DAY), NOW]
    assert _count(db.source, "SELECT count(*) FROM handling") == 1
    assert _count(db.source, "SELECT count(*) FROM dead_letters") == 1


async def test_the_newest_row_is_kept_however_old_so_its_key_is_never_handed_out_again(
    either_db: ColonyDb | PgDb,
) -> None:
    db = either_db
    db.write([_log(30), _log(29), _letter(200), _letter(199)])
    await db.flush()
    counts, _, _ = await _prune(db, RetentionConfig())
    assert counts == Counter(message_log=1, dead_letters=1)
    db.write([_log(0)])
    await db.flush()
    seqs = [int(r[0]) for r in db.source.select("SELECT seq FROM message_log ORDER BY seq")]
    assert seqs == [2, 3]


async def test_past_the_size_cap_the_oldest_log_rows_go_first(either_db: ColonyDb | PgDb) -> None:
    db = either_db
    big = {"text": "x" * 400_000}
    db.write([_log(3, big), _log(2, big), _log(1, big), _log(0, big)])
    db.write([_handled(2.5), _handled(0.5)])
    await db.flush()
    counts, _, _ = await _prune(db, RetentionConfig(message_log_max_mb=1))
    # four rows of 0.4 MB: the two oldest go, the rest fits in 1 MB
    assert counts == Counter(message_log=2, handling=1)
    assert [r.at_ms for r in read_log(db.source)] == [int(NOW - DAY), NOW]


async def test_rows_are_deleted_in_batches_no_larger_than_the_batch(
    either_db: ColonyDb | PgDb,
) -> None:
    db = either_db
    db.write([_log(30) for _ in range(250)] + [_log(0)])
    await db.flush()
    counts, batches, sizes = await _prune(db, RetentionConfig(), batch=100)
    assert counts == Counter(message_log=250)
    assert max(sizes) <= 100
    assert batches == 3


async def test_a_limit_of_zero_keeps_that_part_forever(either_db: ColonyDb | PgDb) -> None:
    db = either_db
    db.write([_log(400), _log(0), _letter(4000), _letter(0)])
    await db.flush()
    keep = RetentionConfig(message_log_days=0, message_log_max_mb=0, dead_letters_days=0)
    counts, batches, _ = await _prune(db, keep)
    assert counts == Counter()
    assert batches == 0


async def test_a_dry_run_counts_what_would_go_and_deletes_nothing(
    either_db: ColonyDb | PgDb,
) -> None:
    from colony.prune import run

    db = either_db
    big = {"text": "x" * 400_000}
    db.write([_log(30), _log(3, big), _log(2, big), _log(1, big), _log(0, big), _letter(100)])
    db.write([_letter(0)])
    await db.flush()
    before = _count(db.source, "SELECT count(*) FROM message_log")
    dry = run(db.source, RetentionConfig(message_log_max_mb=1), dry_run=True, now=NOW)
    # the 30-day-old row is both old and past the cap: counted once
    assert dry.rows == {"message_log": 3, "handling": 0, "dead_letters": 1, "ingress_keys": 0}
    assert _count(db.source, "SELECT count(*) FROM message_log") == before


async def test_the_journal_is_never_pruned(tmp_path: Any) -> None:
    db = ColonyDb(tmp_path / "colony.db")
    try:
        old = (NOW - 400 * DAY) // 1000

        def journal(conn: Any) -> None:
            conn.execute(
                "INSERT INTO journal(id, cell, sender, envelope, body) VALUES ('m','/a','/','{}','{}')"
            )
            conn.execute(
                "INSERT INTO ingress_keys(key, trace_id, created_at) VALUES ('k', 't', ?)", (old,)
            )

        await db.execute(journal)
        db.write([_log(400), _log(0)])
        await db.flush()
        counts, _, _ = await _prune(db, RetentionConfig())
        assert counts == Counter(message_log=1, ingress_keys=1)
        assert _count(db.source, "SELECT count(*) FROM journal") == 1
    finally:
        db.close()


@pytest.mark.parametrize("table", ["message_log_recent", "handling_recent"])
async def test_rows_still_staged_are_pruned_too(tmp_path: Any, table: str) -> None:
    db = ColonyDb(tmp_path / "colony.db")
    try:
        db.write([_log(30), _log(0), _handled(30)])
        await db.flush()
        assert _count(db.source, f"SELECT count(*) FROM {table}") >= 1
        counts, _, _ = await _prune(db, RetentionConfig())
        assert counts == Counter(message_log=1, handling=1)
    finally:
        db.close()


async def test_the_command_prunes_on_a_connection_of_its_own(either_db: ColonyDb | PgDb) -> None:
    from colony.prune import run

    db = either_db
    db.write([_log(30), _log(20), _log(0), _letter(100), _letter(0), _handled(30)])
    await db.flush()
    done = await asyncio.to_thread(run, db.source, RetentionConfig(), now=NOW)
    assert done.rows == {"message_log": 2, "handling": 1, "dead_letters": 1, "ingress_keys": 0}
    assert done.batches == 3
    assert [r.at_ms for r in read_log(db.source)] == [NOW]


async def test_a_newest_row_larger_than_the_cap_is_kept_alone(either_db: ColonyDb | PgDb) -> None:
    db = either_db
    db.write([_log(2, {"text": "x" * 400_000}), _log(1), _log(0, {"text": "x" * 1_200_000})])
    await db.flush()
    counts, _, _ = await _prune(db, RetentionConfig(message_log_max_mb=1))
    assert counts == Counter(message_log=2)
    assert [r.at_ms for r in read_log(db.source)] == [NOW]


async def test_a_batch_of_large_rows_stops_at_its_bytes(either_db: ColonyDb | PgDb) -> None:
    db = either_db
    assert BATCH_BYTES == 1_500_000
    db.write([_log(30, {"text": "x" * 400_000}) for _ in range(25)] + [_log(0)])
    db.write([_letter(100, {"text": "x" * 1_500_000}) for _ in range(5)] + [_letter(0)])
    await db.flush()
    counts, batches, sizes = await _prune(db, RetentionConfig())
    assert counts == Counter(message_log=25, dead_letters=5)
    # 1.5 MB: four log rows of 0.4 MB (the fourth reaches it), one dead letter of 1.5 MB
    assert sizes == [4, 4, 4, 4, 4, 4, 1, 1, 1, 1, 1, 1]
    assert batches == 12


async def test_a_batch_binds_no_more_values_than_sqlite_before_3_32_allows(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from colony import prune as command
    from colony.persist import source as sources

    db = ColonyDb(tmp_path / "colony.db")
    try:
        db.write([_log(30) for _ in range(1000)] + [_log(0)])
        db.write([_letter(100) for _ in range(1000)] + [_letter(0)])
        await db.flush()
    finally:
        db.close()

    def limited(path: str, *, readonly: bool = False) -> sqlite3.Connection:
        conn = connect(path, readonly=readonly)
        conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)  # SQLite < 3.32's default
        return conn

    monkeypatch.setattr(sources, "connect", limited)
    done = await asyncio.to_thread(command.run, db.source, RetentionConfig(), now=NOW)
    assert done.rows == {
        "message_log": 1000,
        "handling": 0,
        "dead_letters": 1000,
        "ingress_keys": 0,
    }


def _truncate_wal(path: Any) -> None:
    """Copy the WAL into the file and empty it (retried while the checkpointer is at it)."""
    with contextlib.closing(connect(str(path))) as conn:
        for _ in range(100):
            if conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0:
                return
    raise AssertionError("the WAL could not be checkpointed")


async def test_pruning_large_bodies_writes_little_to_the_write_ahead_log(tmp_path: Any) -> None:
    path = tmp_path / "colony.db"
    db = ColonyDb(path)
    try:
        db.write([_log(30, {"text": "x" * 50_000}) for _ in range(160)] + [_log(0)])
        await db.flush()
        _truncate_wal(path)
        counts, _, _ = await _prune(db, RetentionConfig())
        assert counts == Counter(message_log=160)
        wal = path.with_name("colony.db-wal").stat().st_size
    finally:
        db.close()
    # 8 MB of bodies deleted: the pages they free are not zeroed through the WAL
    assert wal < 1_000_000, wal


async def test_the_writers_and_the_commands_connections_cut_the_wal_back(tmp_path: Any) -> None:
    path = tmp_path / "colony.db"
    db = ColonyDb(path)
    try:
        writer = await db.execute(
            lambda conn: [
                conn.execute(f"PRAGMA {name}").fetchone()[0]
                for name in ("journal_size_limit", "secure_delete")
            ]
        )
    finally:
        db.close()
    with Source.sqlite(path).connect(write=True) as session:
        command = [
            session.execute(f"PRAGMA {name}").fetchone()[0]
            for name in ("journal_size_limit", "secure_delete")
        ]
    assert writer == command == [WAL_LIMIT_BYTES, 2]  # secure_delete 2: FAST


def _plan_of(source: Source, target: prune.Prunable) -> str:
    """How the database searches ``target``'s rows (PostgreSQL told to use an index it has,
    as it would on a large table: on a test's few rows a scan is cheaper)."""
    with source.connect() as session:
        if source.dialect.name == "sqlite":
            rows = session.execute(f"EXPLAIN QUERY PLAN {target.find(BATCH)}", target.args)
            return " ".join(str(row[-1]) for row in rows.fetchall())
        session.execute("SET enable_seqscan = off")
        rows = session.execute(f"EXPLAIN {target.find(BATCH)}", target.args)
        return " ".join(str(row[0]) for row in rows.fetchall())


async def test_an_older_database_gains_the_indexes_retention_searches_by(
    either_db: ColonyDb | PgDb,
) -> None:
    db = either_db
    db.write([_log(30), _log(0), _handled(30)])
    await db.flush()
    indexed = "handling_indexed" if db.source.dialect.name == "sqlite" else "handling"
    with db.source.connect(write=True) as session:  # as a daemon made it before them
        session.execute("DROP INDEX IF EXISTS ingress_keys_created")
        if indexed == "handling":
            session.execute("DROP INDEX IF EXISTS handling_started")
    if isinstance(db, ColonyDb):
        ColonyDb(db.path).close()
    else:
        assert db.source.dsn is not None
        await asyncio.to_thread(lambda: PgDb(str(db.source.dsn), "reader", 1).close())
    with db.source.connect() as session:
        targets = prune.plan(session, db.source.dialect.name, policy_of(RetentionConfig()), NOW)
    plans = {t.table: _plan_of(db.source, t) for t in targets}
    assert "ingress_keys_created" in plans["ingress_keys"], plans
    assert "handling_started" in plans[indexed], plans
