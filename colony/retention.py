"""Retention: the record pruned a bounded batch at a time, beside routing (docs/retention.md).

A round plans what is past keeping (:func:`colony.persist.prune.plan`), then, table by table,
finds up to :data:`BATCH` keys, or fewer rows holding :data:`BATCH_BYTES` of headers and
bodies, on a read connection and deletes them, pausing :data:`PAUSE_S` between batches. The
daemon's :class:`Pruner` deletes through the colony's own writer
(:meth:`~colony.persist.backend.Backend.execute`): a batch is one more statement in the
writer's next transaction, so it never waits for the write lock nor makes routing's commits
wait for it, and what a commit waits for beyond its own rows is one batch's delete. The
``prune`` command (:mod:`colony.prune`) deletes on a connection of its own instead, one short
transaction per batch (on a running colony SQLite serialises it with the daemon's writer).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from colony.config.models import RetentionConfig
from colony.ids import now_ms
from colony.observability import Logger
from colony.persist import prune
from colony.persist.backend import Backend
from colony.persist.db import completion
from colony.persist.source import Source, postgres_sql

BATCH_MAX = 900
"""Rows deleted per statement, at most. With a target's few arguments a statement binds at
most 904 values: SQLite before 3.32 refuses a statement of more than 999."""

BATCH = 300
"""Rows deleted per batch by default: each batch's delete is one more statement in one of the
writer's transactions, which routing's commits wait behind. bench/prune.py: 300 rows held the
writer about 3 ms (routing's median latency 1.07x of without pruning, p99 2.4x); 900 rows
about 6 ms (1.37x, p99 6x). A 100,000-row backlog then takes 334 batches, about 8 s."""

BATCH_BYTES = 1_500_000
"""A batch stops early at rows holding this many bytes of headers and bodies: deleting a row
reads every page of its body, so the writer's transaction grows with the bytes, not the
rows (bench/prune.py --body-kb 50: a batch of 900 such rows held the writer 27 ms with
``secure_delete=FAST``, 307 ms without; one of 4 MB, 3.5 ms; see docs/retention.md)."""

PAUSE_S = 0.02
"""Between two batches: the writer commits what routing handed it meanwhile."""

FIRST_S = 60.0
"""The first round, this long after boot (a restart after a long stop prunes soon)."""

EVERY_S = 300.0
"""Then a round every this many seconds."""

RECORDS = ("message_log", "handling", "dead_letters", "ingress_keys")
"""What a round reports, in this order."""

Delete = Callable[[prune.Prunable, list[Any]], Awaitable[int]]
"""Deletes the rows of a target with these keys; how many went."""


def policy_of(config: RetentionConfig) -> prune.Policy:
    return prune.Policy(
        config.message_log_days, config.message_log_max_mb, config.dead_letters_days
    )


def keeps_everything(config: RetentionConfig) -> bool:
    """Every limit is 0: nothing is ever pruned (no pruner runs)."""
    return not (config.message_log_days or config.message_log_max_mb or config.dead_letters_days)


def _sql(dialect: str, sql: str) -> str:
    return postgres_sql(sql) if dialect == "postgres" else sql


def delete_statement(target: prune.Prunable, keys: list[Any]) -> tuple[str, tuple[Any, ...]]:
    """Delete these keys, and only while they still match (a staged table's ``rowid`` can
    be given to a newer row once its rows moved, between the find and the delete)."""
    return f"{target.delete(len(keys))} AND {target.where}", (*keys, *target.args)


def _plan(source: Source, policy: prune.Policy, now: int) -> list[prune.Prunable]:
    with source.connect() as session:
        return prune.plan(session, source.dialect.name, policy, now)


def _find(source: Source, target: prune.Prunable, limit: int, max_bytes: int) -> prune.Found:
    with source.connect() as session:
        return prune.find(session, target, limit, max_bytes)


async def prune_round(
    source: Source,
    policy: prune.Policy,
    delete: Delete,
    *,
    batch: int = BATCH,
    batch_bytes: int = BATCH_BYTES,
    pause: float = PAUSE_S,
    now: int | None = None,
) -> tuple[Counter[str], int]:
    """One round: rows deleted per record, and how many batches it took. A batch is at most
    ``batch`` rows (and never more than :data:`BATCH_MAX`) and stops at ``batch_bytes``."""
    targets = await asyncio.to_thread(_plan, source, policy, now_ms() if now is None else now)
    limit = max(1, min(batch, BATCH_MAX))
    counts: Counter[str] = Counter()
    batches = 0
    for target in targets:
        while True:
            found = await asyncio.to_thread(_find, source, target, limit, batch_bytes)
            if found.keys:
                counts[target.record] += await delete(target, found.keys)
                batches += 1
            if not found.more:
                break
            await asyncio.sleep(pause)
    return counts, batches


def through_writer(db: Backend) -> Delete:
    """Deletes handed to the colony's writer, awaited until committed."""
    dialect = db.dialect

    async def delete(target: prune.Prunable, keys: list[Any]) -> int:
        sql, args = delete_statement(target, keys)
        sql = _sql(dialect, sql)
        committed, done = completion()  # settled by the writer once it committed

        def work(conn: Any) -> int:
            return int(conn.execute(sql, args).rowcount)

        deleted = await db.execute(work, None, done)
        await committed
        return deleted

    return delete


def on_connection(source: Source) -> Delete:
    """Deletes on a connection of their own, one transaction per batch (the command)."""

    def run(target: prune.Prunable, keys: list[Any]) -> int:
        sql, args = delete_statement(target, keys)
        with source.connect(write=True) as session, session.transaction():
            return int(session.execute(sql, args).rowcount)

    async def delete(target: prune.Prunable, keys: list[Any]) -> int:
        return await asyncio.to_thread(run, target, keys)

    return delete


def report(counts: Counter[str]) -> dict[str, int]:
    """Rows per record, every record named (0 included), in :data:`RECORDS` order."""
    return {record: counts.get(record, 0) for record in RECORDS}


class Pruner:
    """The daemon's background pruning: a round :data:`FIRST_S` after boot, then every
    :data:`EVERY_S`; one ``pruned`` info line per round that deleted something. A round that
    fails (the database unreachable, busy) is logged and tried again at the next: pruning
    never stops the colony."""

    def __init__(
        self,
        db: Backend,
        config: RetentionConfig,
        log: Logger,
        *,
        first: float | None = None,
        every: float | None = None,
        batch: int = BATCH,
    ) -> None:
        self.db = db
        self.policy = policy_of(config)
        self.log = log
        self.first = FIRST_S if first is None else first
        self.every = EVERY_S if every is None else every
        self.batch = batch
        self.rounds = 0
        self.deleted: Counter[str] = Counter()

    async def run(self) -> None:
        await asyncio.sleep(self.first)
        while True:
            await self.round()
            await asyncio.sleep(self.every)

    async def round(self) -> Counter[str]:
        started = time.monotonic()
        try:
            counts, batches = await prune_round(
                self.db.source, self.policy, through_writer(self.db), batch=self.batch
            )
        except Exception as exc:  # never let a round's failure reach the colony's tasks
            self.log.warning(
                "prune_failed",
                error=f"{type(exc).__name__}: {exc}",
                detail="the record was not pruned this round; the next round tries again",
            )
            return Counter()
        self.rounds += 1
        self.deleted += counts
        if counts:
            self.log.info(
                "pruned",
                **report(counts),
                batches=batches,
                seconds=round(time.monotonic() - started, 2),
            )
        return counts


Spawn = Callable[[Coroutine[Any, Any, None], str], "asyncio.Task[None]"]


def start_pruner(
    db: Backend, config: RetentionConfig, log: Logger, spawn: Spawn
) -> asyncio.Task[None] | None:
    """The daemon's pruner, as one of the colony's tasks (None when everything is kept)."""
    if keeps_everything(config):
        return None
    return spawn(Pruner(db, config, log).run(), "pruner")
