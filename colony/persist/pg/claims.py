"""Taking a partition's journal rows into this node's memory.

A row is claimed when its ``epoch`` is the partition's current one. Rows journalled by a node
that does not own the partition (an ingress elsewhere) arrive unclaimed (NULL); rows of an
owner that lost the partition carry its old epoch. Both are the new owner's to run: on gaining
a partition it claims every row (today's boot redelivery, per partition), and on a
``NOTIFY`` it claims the unclaimed ones. The claim is fenced like a unit: it runs only while
the partition's row says this node owns it under that epoch, and holds that row ``FOR KEY
SHARE`` until it commits.

A claim whose COMMIT got no answer and whose outcome the server cannot tell yet raises
:class:`ClaimOutcomeUnknown`. Committed, its rows carry this node's epoch and no later claim
takes them (a claim takes rows whose epoch is not the current one): the caller keeps the
transaction's id, asks again later (:func:`colony.persist.pg.txid.status_now`) and, once
committed, takes the rows in with :func:`claimed_by`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

import psycopg

from colony.envelope import Envelope
from colony.persist.journal import JournalEntry
from colony.persist.pg.txid import outcome_on, with_xid
from colony.persist.pg.writer import pg_trouble
from colony.persist.writer import PersistenceError

PAGE = 1000
"""Rows claimed per statement, at most."""

_FENCE = with_xid(
    "SELECT partition FROM cluster_partitions WHERE partition = %s AND owner = %s "
    "AND epoch = %s FOR KEY SHARE"
)
"""The partition's row while this node owns it under the epoch, locked as the writer's fence
locks it (a takeover waits, a renewal does not), and the transaction's id (see
:mod:`colony.persist.pg.txid`)."""


class ClaimOutcomeUnknown(PersistenceError):
    """A claim's COMMIT got no answer and the server could not tell whether it committed; the
    member asks again at its next rounds (:mod:`colony.cluster.member`)."""

    code = "claim_outcome_unknown"

    def __init__(self, partition: int, epoch: int, xid: int, cause: BaseException) -> None:
        super().__init__(f"the claim of partition {partition} (transaction {xid}): {cause}")
        self.partition = partition
        self.epoch = epoch
        self.xid = xid
        self.cause = cause


async def claim(
    conn: psycopg.AsyncConnection[Any],
    node: str,
    partition: int,
    epoch: int,
    *,
    dsn: str,
    patience_s: float,
    lost: Callable[[BaseException], None] | None = None,
) -> list[JournalEntry]:
    """The partition's rows not yet claimed under ``epoch``, oldest first, now claimed; empty
    when this node no longer owns the partition under that epoch.

    A COMMIT whose answer is lost is asked after on a new session of ``dsn`` (for at most
    ``patience_s`` while the old one is still finishing): committed, the rows are this node's
    and no later claim takes them again under ``epoch``, so they are returned (and ``lost``
    told); aborted, the error is raised and a later claim takes them; not known,
    :class:`ClaimOutcomeUnknown` is raised."""
    await conn.execute("BEGIN")
    try:
        cur = await conn.execute(_FENCE, (partition, node, epoch))
        row = await cur.fetchone()
        xid = None if row is None else int(row[0])
        out = [] if row is None or row[1] is None else await _take(conn, partition, epoch)
    except BaseException:
        with contextlib.suppress(Exception):
            if not (conn.closed or conn.broken):
                await conn.execute("ROLLBACK")
        raise
    try:
        await conn.execute("COMMIT")
    except Exception as exc:
        if xid is None or not pg_trouble(exc):
            raise
        status = await outcome_on(dsn, xid, patience_s)
        if status is None:
            raise ClaimOutcomeUnknown(partition, epoch, xid, exc) from exc
        if status != "committed":
            raise
        if lost is not None:
            lost(exc)
    return out


async def claimed_by(
    conn: psycopg.AsyncConnection[Any], partition: int, epoch: int, xid: int
) -> list[JournalEntry]:
    """The partition's rows that the committed claim ``xid`` took under ``epoch``, oldest
    first: those it wrote last (their ``xmin``, the 32-bit form of ``xid``). Rows this node
    journalled itself under ``epoch``, or claimed in other transactions, are not among them:
    they are in hand already."""
    cur = await conn.execute(
        "SELECT seq, cell, sender, envelope, body FROM journal WHERE partition = %s "
        "AND epoch = %s AND xmin = %s::text::xid ORDER BY seq",
        (partition, epoch, xid & 0xFFFFFFFF),
    )
    return [_entry(partition, epoch, *row) for row in await cur.fetchall()]


def _entry(
    partition: int, epoch: int, seq: int, cell: str, sender: str, envelope: str, body: str
) -> JournalEntry:
    """A journal row as claimed under ``epoch``."""
    doc = json.loads(envelope)
    doc["body_payload"] = json.loads(body)
    m = Envelope.from_json(doc)
    m.partition, m.epoch = partition, epoch
    return JournalEntry(seq, cell, sender, m, len(envelope) + len(body) + 3)


async def _take(
    conn: psycopg.AsyncConnection[Any], partition: int, epoch: int
) -> list[JournalEntry]:
    """Claim the rows, a page a statement, inside the caller's transaction."""
    out: list[JournalEntry] = []
    while True:
        cur = await conn.execute(
            "UPDATE journal SET epoch = %s WHERE seq IN (SELECT seq FROM journal "
            "WHERE partition = %s AND epoch IS DISTINCT FROM %s ORDER BY seq LIMIT %s) "
            "RETURNING seq, cell, sender, envelope, body",
            (epoch, partition, epoch, PAGE),
        )
        rows = await cur.fetchall()
        out += [_entry(partition, epoch, *row) for row in rows]
        if len(rows) < PAGE:
            break
    out.sort(key=lambda e: e.seq)
    return out
