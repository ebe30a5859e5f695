"""Taking a partition's journal rows into this node's memory.

A row is claimed when its ``epoch`` is the partition's current one. Rows journalled by a node
that does not own the partition (an ingress elsewhere) arrive unclaimed (NULL); rows of an
owner that lost the partition carry its old epoch. Both are the new owner's to run: on gaining
a partition it claims every row (today's boot redelivery, per partition), and on a
``NOTIFY`` it claims the unclaimed ones. The claim is fenced like a unit: it runs only while
the partition's row says this node owns it under that epoch, and holds that row ``FOR SHARE``
until it commits.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg

from colony.envelope import Envelope
from colony.persist.journal import JournalEntry

PAGE = 1000
"""Rows claimed per statement, at most."""


async def claim(
    conn: psycopg.AsyncConnection[Any], node: str, partition: int, epoch: int
) -> list[JournalEntry]:
    """The partition's rows not yet claimed under ``epoch``, oldest first, now claimed; empty
    when this node no longer owns the partition under that epoch."""
    out: list[JournalEntry] = []
    async with conn.transaction():
        cur = await conn.execute(
            "SELECT 1 FROM cluster_partitions WHERE partition = %s AND owner = %s "
            "AND epoch = %s FOR SHARE",
            (partition, node, epoch),
        )
        if await cur.fetchone() is None:
            return []
        while True:
            cur = await conn.execute(
                "UPDATE journal SET epoch = %s WHERE seq IN (SELECT seq FROM journal "
                "WHERE partition = %s AND epoch IS DISTINCT FROM %s ORDER BY seq LIMIT %s) "
                "RETURNING seq, cell, sender, envelope, body",
                (epoch, partition, epoch, PAGE),
            )
            rows = await cur.fetchall()
            for seq, cell, sender, envelope, body in rows:
                doc = json.loads(envelope)
                doc["body_payload"] = json.loads(body)
                m = Envelope.from_json(doc)
                m.partition, m.epoch = partition, epoch
                out.append(JournalEntry(seq, cell, sender, m, len(envelope) + len(body) + 3))
            if len(rows) < PAGE:
                break
    out.sort(key=lambda e: e.seq)
    return out
