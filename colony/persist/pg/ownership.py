"""Who owns which partition, and who leads a singleton task: leases with epochs in the
cluster database.

A node renews its rows every third of ``lease_ms``; a row whose lease expired is free. Every
change of owner adds one to the partition's ``epoch``: a unit carries the epoch it was made
under and the writer's fence refuses it once the epoch moved on
(:mod:`colony.persist.pg.writer`), so a node paused past its lease writes nothing when it
wakes. Time is the database's clock (``now()``), never a node's: nodes' clocks may disagree.

A node takes free or expired partitions up to its fair share, ``ceil(partitions / live
nodes)``. Past its share (a node joined) it gives partitions back only by draining: the
kernel stops taking new work for the partition, waits for the units in flight, then calls
:meth:`Ownership.release`. A takeover is never forced on a live owner.

Why the fence holds. The writer's and a claim's transactions read this node's rows
``FOR KEY SHARE`` (READ COMMITTED) and commit only under the epochs they read. The rule they
need: no transaction commits under an epoch that another transaction has moved on. Two
orders can break it:

* *Lock first, change after.* A change of epoch must wait for a fence holding the row. It
  does because ``epoch`` is a column of a unique index (``cluster_partitions_epoch``, on
  ``(partition, epoch)``: see :data:`colony.persist.pg.schema.EPOCH_KEY`): PostgreSQL counts an
  UPDATE that changes a key column as a key update, and a key update conflicts with
  ``FOR KEY SHARE``. The takeover below skips (``SKIP LOCKED``) a row so held and takes it on a
  later tick; any other UPDATE of the epoch would wait for it.
* *Snapshot first, change, then lock.* The fence's statement takes its snapshot when it
  starts and locks a row only when its scan reaches it; an epoch change may commit in between.
  PostgreSQL re-reads the row's newest version (and re-checks ``owner`` and ``epoch``) only
  when the committed change conflicts with the lock asked for; a non-key update does not
  conflict with ``FOR KEY SHARE``, and the fence would lock and return the row as its snapshot
  saw it: the old epoch, under which its units would commit. With ``epoch`` in a key, every
  change of epoch conflicts, the fence re-reads the row, finds it no longer this node's, and
  refuses the units. (Without that index only an UPDATE preceded by ``FOR UPDATE`` was
  recorded as a key update: an undocumented detail of PostgreSQL, and any UPDATE of the epoch
  written without it, an admin's or a simplified takeover's, silently broke the fence.)

A renewal (``expires_at``) and a release (``owner``, ``expires_at``, ``draining``) change no
key column: they neither wait for a fence nor make one re-read, so slow commits never delay
a lease. A fence that read its row just before a release may still commit under that epoch;
harmless, since no other node holds the epoch: taking the partition changes it, which waits.
The index must stay unique, non-partial, non-deferrable and on plain columns: otherwise
PostgreSQL does not count its columns as a key.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from typing import Any

import psycopg

from colony.errors import ColonyError
from colony.persist.pg import schema


@dataclass(slots=True)
class Changes:
    """What one :meth:`Ownership.tick` changed."""

    gained: dict[int, int] = field(default_factory=dict)
    """Partitions taken, with their new epochs: replay their journal rows."""
    lost: set[int] = field(default_factory=set)
    """Partitions another node now owns (or that expired): drop their messages from memory."""
    drain: set[int] = field(default_factory=set)
    """Partitions to hand back (this node holds more than its share): drain, then release."""


class NodeNameTaken(ColonyError):
    """Two live daemons under one node name would share its partitions and pass each other's
    fence: the second is refused."""

    code = "node_name_taken"


class Ownership:
    """One node's leases (partitions, leaders, its own liveness) on an async connection."""

    def __init__(self, dsn: str, node: str, partitions: int, lease_ms: int) -> None:
        self.dsn = dsn
        self.node = node
        self.partitions = partitions
        self.lease_ms = lease_ms
        self.owned: dict[int, int] = {}
        """Partition → the epoch this node holds it under."""
        self.draining: set[int] = set()
        self.leading: dict[str, int] = {}
        """Leader name → epoch, for the leader leases this node holds."""
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self.token = uuid.uuid4().hex
        """This process's mark on its node row: a second live process of the same name is
        refused (:class:`NodeNameTaken`), whatever machine it runs on."""

    @property
    def lease(self) -> str:
        return f"{self.lease_ms} milliseconds"

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            conn = self._conn = await psycopg.AsyncConnection.connect(
                self.dsn, autocommit=True, connect_timeout=5
            )
            # A claim's transaction must not outlive a pause of this node (see PgWriter).
            await conn.execute(f"SET idle_in_transaction_session_timeout = {int(self.lease_ms)}")
            await conn.execute(schema.REGISTER, (self.node,))
        return conn

    async def tick(self, *, take: bool = True) -> Changes:
        """Renew this node's leases, notice those lost, take free partitions up to the fair
        share (``take``: False while the node stops or drains everything). A connection the
        server dropped is found broken only when used: one retry on a new one."""
        try:
            return await self._tick(take)
        except psycopg.OperationalError:
            if self._conn is not None and not self._conn.broken:
                raise
            return await self._tick(take)

    async def _tick(self, take: bool) -> Changes:
        conn = await self._connection()
        changes = Changes()
        cur = await conn.execute(
            "INSERT INTO cluster_nodes AS n (node, started_at, seen_at, expires_at, token) "
            "VALUES (%s, now(), now(), now() + %s::interval, %s) ON CONFLICT (node) DO UPDATE "
            "SET seen_at = now(), expires_at = excluded.expires_at, token = excluded.token "
            "WHERE n.token = excluded.token OR n.expires_at < now() RETURNING node",
            (self.node, self.lease, self.token),
        )
        if await cur.fetchone() is None:
            raise NodeNameTaken(
                f"another live daemon is cluster node {self.node!r} (its lease is current): "
                "give each daemon a name of its own with --node; if that daemon has just died, "
                "its lease ends within cluster.lease_ms and this one may start then"
            )
        cur = await conn.execute(
            "UPDATE cluster_partitions SET expires_at = now() + %s::interval "
            "WHERE owner = %s RETURNING partition, epoch",
            (self.lease, self.node),
        )
        still = dict(await cur.fetchall())
        for partition, epoch in self.owned.items():
            if still.get(partition) != epoch:
                changes.lost.add(partition)
        for partition in changes.lost:
            del self.owned[partition]
            self.draining.discard(partition)
        for partition, epoch in still.items():
            if partition not in self.owned:  # ours in the table, not in memory: give it up
                await self.release(partition, epoch)
        cur = await conn.execute("SELECT count(*) FROM cluster_nodes WHERE expires_at > now()")
        row = await cur.fetchone()
        live = max(1, int(row[0]) if row else 1)
        share = math.ceil(self.partitions / live)
        if take and len(self.owned) < share:
            # A node whose lease ran out may be paused holding its partitions' rows: end its
            # sessions first, or the take below would skip those rows for as long as it sleeps.
            await conn.execute(schema.FENCE_OUT, (self.node,))
            await conn.execute(schema.FORGET_GONE)
            # The fence's other half (see the module docstring): changing the epoch is a key
            # update, which conflicts with a writer's or a claim's FOR KEY SHARE; SKIP LOCKED
            # passes over a row so held (a later tick takes it) rather than waiting for it.
            cur = await conn.execute(
                "UPDATE cluster_partitions SET owner = %s, epoch = epoch + 1, "
                "expires_at = now() + %s::interval, draining = FALSE WHERE partition IN ("
                "SELECT partition FROM cluster_partitions WHERE owner IS NULL OR "
                "expires_at IS NULL OR expires_at < now() ORDER BY partition LIMIT %s "
                "FOR UPDATE SKIP LOCKED) RETURNING partition, epoch",
                (self.node, self.lease, share - len(self.owned)),
            )
            for partition, epoch in await cur.fetchall():
                self.owned[partition] = epoch
                changes.gained[partition] = epoch
        extra = len(self.owned) - len(self.draining) - share
        if extra > 0:
            for partition in sorted(set(self.owned) - self.draining, reverse=True)[:extra]:
                self.draining.add(partition)
                changes.drain.add(partition)
        for name in list(self.leading):
            await self.lead(name)
        return changes

    async def release(self, partition: int, epoch: int | None = None) -> None:
        """Give a drained partition back (free for any node at once)."""
        conn = await self._connection()
        epoch = self.owned.get(partition) if epoch is None else epoch
        await conn.execute(
            "UPDATE cluster_partitions SET owner = NULL, expires_at = NULL, draining = FALSE "
            "WHERE partition = %s AND owner = %s AND epoch = %s",
            (partition, self.node, epoch),
        )
        self.owned.pop(partition, None)
        self.draining.discard(partition)

    async def lead(self, name: str) -> bool:
        """Hold (or take, if free or expired) the leader lease ``name``; True while held."""
        conn = await self._connection()
        cur = await conn.execute(
            "INSERT INTO cluster_leaders AS l (name, owner, epoch, expires_at) "
            "VALUES (%s, %s, 1, now() + %s::interval) ON CONFLICT (name) DO UPDATE SET "
            "owner = excluded.owner, expires_at = excluded.expires_at, "
            "epoch = CASE WHEN l.owner = excluded.owner THEN l.epoch ELSE l.epoch + 1 END "
            "WHERE l.owner = excluded.owner OR l.owner IS NULL OR l.expires_at < now() "
            "RETURNING epoch",
            (name, self.node, self.lease),
        )
        row = await cur.fetchone()
        if row is None:
            self.leading.pop(name, None)
            return False
        self.leading[name] = int(row[0])
        return True

    async def resign(self, name: str) -> None:
        """Give the leader lease ``name`` up (free for any node at once)."""
        self.leading.pop(name, None)
        conn = await self._connection()
        await conn.execute(
            "UPDATE cluster_leaders SET owner = NULL, expires_at = NULL "
            "WHERE name = %s AND owner = %s",
            (name, self.node),
        )

    async def stop(self) -> None:
        """Hand everything back (a clean stop: other nodes take over at once, not after a
        lease) and close the connection. A connection the server ended (another node fenced
        this one out while it was paused) is replaced once for it."""
        if self._conn is None:
            return
        try:
            for attempt in (1, 2):
                try:
                    await self._release_all(await self._connection())
                    break
                except psycopg.OperationalError:
                    if attempt == 2:
                        raise
        finally:
            self.owned.clear()
            self.draining.clear()
            self.leading.clear()
            if self._conn is not None:
                await self._conn.close()

    async def _release_all(self, conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.execute(
            "UPDATE cluster_partitions SET owner = NULL, expires_at = NULL, "
            "draining = FALSE WHERE owner = %s",
            (self.node,),
        )
        await conn.execute(
            "UPDATE cluster_leaders SET owner = NULL, expires_at = NULL WHERE owner = %s",
            (self.node,),
        )
        await conn.execute("DELETE FROM cluster_nodes WHERE node = %s", (self.node,))
