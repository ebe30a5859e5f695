"""Retention prunes the record by age and by size, a bounded batch at a time, on either
backend; a dry run counts and deletes nothing; the newest rows and the journal are kept."""

from __future__ import annotations

import asyncio
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
from colony.persist.source import Source
from colony.retention import BATCH, policy_of, prune_round, through_writer

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


def _letter(age_days: float) -> DeadLetter:
    m = source_message("/gone", BODY)
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
