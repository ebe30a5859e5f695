"""The writer loop of :mod:`colony.persist.writer` on PostgreSQL, with the partition fence.

Everything about batches, isolation of a bad piece, outages and retries is the SQLite writer's
(this module overrides only what speaks SQL). Two things are new:

* **The fence.** Each transaction starts by reading, ``FOR KEY SHARE``, the partitions this
  node owns and their epochs. A unit made under an epoch that is no longer its partition's (the
  node was paused or cut off past its lease and another node took the partition over) fails
  alone with :class:`UnitFenced`: nothing of it is written, nothing is dead-lettered (the new
  owner runs the message from the journal), and ``unit_fenced`` is reported. The lock holds
  off any change of the row's epoch until this transaction ends, and the read sees one that
  committed after its snapshot, so no unit commits under an epoch that changed while it was
  being written; a renewal does not wait.
* **Claims.** A delivery into a partition this node does not own (epoch None) is journalled
  unclaimed and its owner is woken by ``NOTIFY`` (:data:`CLAIM_CHANNEL`), sent at commit.

Deadlocks and serialisation failures (two nodes' store writes on the same rows) are retried
like an outage: the whole batch again, nothing lost.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from colony.celltables import storage_failure
from colony.envelope import Envelope
from colony.persist.escape import storable_text
from colony.persist.items import Commit, Execute, Piece, Unit
from colony.persist.pg import schema
from colony.persist.pg.txid import landed, with_xid
from colony.persist.rows import Rows, describe
from colony.persist.schema import (
    HANDLING_COLUMNS,
    HANDLING_SELECT,
    MESSAGE_LOG_COLUMNS,
    MESSAGE_LOG_SELECT,
)
from colony.persist.writer import UnitFenced, Writer

CLAIM_CHANNEL = "colony_claim"
"""LISTEN/NOTIFY channel: the payload is a partition that has unclaimed journal rows."""

_FENCE = with_xid("SELECT partition, epoch FROM cluster_partitions WHERE owner = %s FOR KEY SHARE")
"""The fence's read (every partition this node owns, locked) and, in the same round trip, the
transaction's id, to ask after a COMMIT whose answer was lost.

The lock is ``FOR KEY SHARE``, the weakest: it holds off any change of a row's epoch, a key
column (:data:`colony.persist.pg.schema.EPOCH_KEY`; the argument is in
:mod:`colony.persist.pg.ownership`), and nothing else. A renewal (an ``UPDATE`` of
``expires_at``) or a release does not wait for it; under ``FOR SHARE`` every renewal of this
node waited for the writer's transaction in progress, so slow commits delayed the leases and
could cost the node its partitions."""


def fence_pairs(unit: Unit) -> set[tuple[int, int]]:
    """The ``(partition, epoch)`` ownerships a unit was made under: its handled message's, and
    each delivery's that this node owns (a delivery with epoch None is for another node)."""
    pairs: set[tuple[int, int]] = set()
    if unit.ack is not None and unit.message is not None and unit.message.epoch is not None:
        pairs.add((unit.message.partition, unit.message.epoch))
    for d in unit.deliveries:
        if d.message.epoch is not None:
            pairs.add((d.message.partition, d.message.epoch))
    return pairs


_LOG = (
    f"INSERT INTO message_log({MESSAGE_LOG_SELECT}) "
    f"VALUES ({','.join(['%s'] * len(MESSAGE_LOG_COLUMNS))})"
)
_HANDLING = (
    f"INSERT INTO handling({HANDLING_SELECT}) VALUES ({','.join(['%s'] * len(HANDLING_COLUMNS))})"
)


def pg_text(text: str) -> str:
    """``text`` with each NUL spelled ``\\u0000``: PostgreSQL's text cannot hold NUL (SQLite's
    can), and a path or an id may (a ``POST /messages`` target, say). JSON columns never do:
    their writer escapes it. The row's JSON keeps the exact value, as for a surrogate
    (:mod:`colony.persist.escape`)."""
    return text.replace("\x00", "\\u0000") if "\x00" in text else text


def _without_nul(rows: list[Any]) -> None:
    """:func:`pg_text` on every text value of ``rows``, in place (one ``in`` test a value)."""
    for n, row in enumerate(rows):
        if any(isinstance(v, str) and "\x00" in v for v in row):
            rows[n] = tuple(pg_text(v) if isinstance(v, str) else v for v in row)


class PgRows(Rows):
    """:class:`Rows` written with PostgreSQL's SQL."""

    __slots__ = ("epochs", "wake")

    def __init__(self, epochs: dict[int, int]) -> None:
        super().__init__()
        self.epochs = epochs
        """The partitions this node owns and their epochs, read under the fence's lock."""
        self.wake: set[int] = set()
        """Partitions given unclaimed rows: their owners are notified at commit."""

    def take_key(self, conn: Any, key: str, trace_id: str) -> bool:
        cur = conn.execute(
            "INSERT INTO ingress_keys(key, trace_id, created_at) VALUES (%s,%s,%s) "
            "ON CONFLICT (key) DO NOTHING",
            (pg_text(storable_text(key)), pg_text(storable_text(trace_id)), int(time.time())),
        )
        return bool(cur.rowcount)

    def unit(self, conn: Any, unit: Unit) -> None:
        if unit.ack is None:
            # An ingress or a long-running cell's emission: nothing has run yet, so nothing is
            # refused. A delivery made for a partition this node no longer owns is journalled
            # unclaimed instead, for the owner to claim (the colony, seeing epoch None once the
            # commit is in, does not deliver it here).
            for d in unit.deliveries:
                m = d.message
                if m.epoch is not None and self.epochs.get(m.partition) != m.epoch:
                    m.epoch = None
            super().unit(conn, unit)
            return
        for partition, epoch in fence_pairs(unit):
            if self.epochs.get(partition) != epoch:
                owned = self.epochs.get(partition)
                raise UnitFenced(
                    f"partition {partition} was owned here under epoch {epoch} and is now "
                    + ("owned by another node" if owned is None else f"at epoch {owned}")
                )
        super().unit(conn, unit)

    def add(self, conn: Any, piece: Piece) -> None:
        if isinstance(piece, Execute):
            fence = piece.fence
            if fence is not None and (fence[1] is None or self.epochs.get(fence[0]) != fence[1]):
                raise UnitFenced(
                    f"a cell's write for partition {fence[0]} (epoch {fence[1]}) came after "
                    "this node's ownership of it ended"
                )
            _run_cell_sql(piece, conn)
        else:
            super().add(conn, piece)

    def _journal_row(self, cell: str, sender: str, m: Envelope) -> tuple[Any, ...]:
        if m.epoch is None:
            self.wake.add(m.partition)
        return (*super()._journal_row(cell, sender, m), m.partition, m.epoch)

    def write(self, conn: Any) -> None:
        self._serialise_journal()
        for rows in (self.inserts, self.acks, self.logs, self.letters, self.handling):
            _without_nul(rows)
        cur = conn.cursor()
        if self.inserts:
            cur.executemany(
                "INSERT INTO journal(id, cell, sender, envelope, body, partition, epoch) "
                "VALUES (%s,%s,%s,%s,%s,%s,%s)",
                self.inserts,
            )
        if self.acks:
            cur.executemany("DELETE FROM journal WHERE id = %s AND cell = %s", self.acks)
        if self.forgets:
            cur.executemany("DELETE FROM journal WHERE seq = %s", self.forgets)
        if self.logs:
            cur.executemany(_LOG, self.logs)
        if self.handling:
            cur.executemany(_HANDLING, self.handling)
        if self.letters:
            cur.executemany(
                "INSERT INTO dead_letters(sender_path, original_target, resolved_target, "
                "error_code, trace_id, created_at, message_json, detail, message_id, at_ms) "
                "VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                self.letters,
            )
        if self.registry:
            cur.executemany(
                "INSERT INTO registry(path, cell_id, cell_type, status, created_at, updated_at) "
                "VALUES (%s,%s,%s,%s,%s,%s) ON CONFLICT (path) DO UPDATE SET "
                "cell_id = excluded.cell_id, cell_type = excluded.cell_type, "
                "status = excluded.status, updated_at = excluded.updated_at",
                self.registry,
            )
        for partition in sorted(self.wake):
            cur.execute("SELECT pg_notify(%s, %s)", (CLAIM_CHANNEL, str(partition)))


def scrub(text: str, dsn: str) -> str:
    """``text`` without the DSN's password (psycopg's error texts may quote the DSN)."""
    try:
        secret = psycopg.conninfo.conninfo_to_dict(dsn).get("password")
    except psycopg.Error:
        return text
    return text.replace(str(secret), "***") if secret else text


def _run_cell_sql(piece: Execute, conn: Any) -> None:
    """:meth:`Execute.run` on a psycopg connection: the work in a savepoint, its own failure
    undone and handed to the cell, the storage's passed on."""
    conn.execute("SAVEPOINT cell_sql")
    try:
        result = piece.work(conn)
    except Exception as exc:
        if storage_failure(exc) or conn.closed or conn.broken:
            raise
        conn.execute("ROLLBACK TO SAVEPOINT cell_sql")
        conn.execute("RELEASE SAVEPOINT cell_sql")
        piece.executed(None, exc)
        return
    conn.execute("RELEASE SAVEPOINT cell_sql")
    piece.executed(result, None)


def pg_trouble(exc: BaseException) -> bool:
    """The database or the way to it failed (retry the batch), not what was written."""
    # psycopg's OperationalError covers a lost connection, a server shutting down, and the
    # transaction rollbacks (deadlock detected, serialisation failure).
    return isinstance(exc, psycopg.OperationalError | OSError) or storage_failure(exc)


class PgWriter(Writer):
    """The colony writer on a psycopg connection (autocommit mode: the transactions are the
    writer's own ``BEGIN``/``COMMIT``). It reconnects before a batch when the connection broke:
    an outage of the server is an outage of the storage, retried until it ends."""

    def __init__(self, dsn: str, node: str, items: Any, idle_timeout_ms: int = 10_000) -> None:
        self.dsn = dsn
        self.node = node
        self.idle_timeout_ms = idle_timeout_ms
        """The server ends this connection's session when it sits in a transaction this long:
        a node paused (SIGSTOP, a VM frozen) mid-transaction would otherwise hold the fence's
        row lock, and with it its partitions, for as long as the pause lasts."""
        super().__init__(None, items)
        self._epochs: dict[int, int] = {}
        self._xid: int | None = None
        """The id of the transaction in progress (see :meth:`_landed`)."""

    def _event(self, name: str, **fields: Any) -> None:
        clean = {k: scrub(v, self.dsn) if isinstance(v, str) else v for k, v in fields.items()}
        super()._event(name, **clean)

    def _connection(self) -> Any:
        conn = self.conn
        if conn is None or conn.closed or conn.broken:
            with contextlib.suppress(Exception):
                if conn is not None:
                    conn.close()
            self.conn = None
            self.conn = conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=5)
            conn.execute(f"SET idle_in_transaction_session_timeout = {int(self.idle_timeout_ms)}")
            conn.execute(schema.REGISTER, (self.node,))
        return conn

    def _begin(self) -> None:
        conn = self._connection()
        conn.execute("BEGIN")
        rows = conn.execute(_FENCE, (self.node,)).fetchall()
        self._xid = int(rows[0][0])
        self._epochs = {partition: epoch for _, partition, epoch in rows if partition is not None}

    def _end(self) -> None:
        xid, self._xid = self._xid, None
        try:
            self.conn.execute("COMMIT")
        except Exception as exc:
            if xid is None or not pg_trouble(exc) or not self._landed(xid):
                raise
            self._event(
                "commit_answer_lost",
                error=describe(exc),
                detail="the connection failed while committing and the transaction turned out "
                "committed; it is not applied a second time",
            )

    def _landed(self, xid: int) -> bool:
        """Whether the transaction ``xid``, whose COMMIT got no answer, committed
        (:mod:`colony.persist.pg.txid`): applied again, the batch would journal every delivery
        twice. Asked on a new session, for as long as the server lets a session idle in a
        transaction; when it cannot tell, the batch is retried."""
        return landed(self._connection, xid, self.idle_timeout_ms / 1000 + 1)

    def _rows(self) -> Rows:
        return PgRows(self._epochs)

    def _trouble(self, exc: BaseException) -> bool:
        return pg_trouble(exc)

    def _rollback(self) -> None:
        conn = self.conn
        if conn is None or conn.closed:
            return
        with contextlib.suppress(Exception):
            if conn.info.transaction_status != TransactionStatus.IDLE:
                conn.execute("ROLLBACK")

    def _commit(self, work: list[Piece]) -> None:
        try:
            self._connection()
        except Exception as exc:
            self._defer(work, exc)
            return
        super()._commit(work)

    def _reject(self, piece: Piece, exc: BaseException) -> None:
        if isinstance(exc, UnitFenced):
            return  # nothing of it is written: the partition's owner has the message
        super()._reject(piece, exc)

    def _report_rejected(self, piece: Piece, exc: BaseException) -> None:
        if isinstance(exc, UnitFenced) and isinstance(piece, Commit):
            self.rejected -= 1  # counted by _isolate as rejected; a fenced unit is not
            unit = piece.unit
            self._event(
                "unit_fenced",
                error=str(exc),
                cell=unit.ack[1] if unit.ack else None,
                message_id=unit.message.id if unit.message else None,
                trace_id=unit.message.trace_id if unit.message else None,
                detail="this node lost the partition's lease while handling the message; "
                "nothing of the hand-off was written and the partition's new owner runs the "
                "message again from the journal",
            )
            piece.done(exc)
            return
        if isinstance(exc, UnitFenced) and isinstance(piece, Execute):
            self.rejected -= 1
            self._event("cell_write_fenced", error=str(exc), cell_ack=piece.ack)
            piece.executed(None, exc)
            piece.done(exc)
            return
        super()._report_rejected(piece, exc)

    def _probe(self) -> None:
        try:
            conn = self._connection()
            conn.execute(
                "INSERT INTO meta(key, value) VALUES ('writer_probe', %s) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (str(time.time()),),
            )
        except Exception as exc:
            self._rollback()
            self.storage_error = exc
            return
        self._committed((0, 0))
