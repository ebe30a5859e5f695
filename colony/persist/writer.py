"""The thread that commits everything ``colony.db`` is given, and how a write may fail.

Items arrive through a queue and are committed in batches (group commit): one transaction for
up to 1,024 items, which is what makes the journal affordable. A failure has one of two causes,
and each is handled so that it cannot outlive itself:

* **the content of one piece** (a string SQLite cannot encode, a body with a cycle, an integer
  past 64 bits): the batch is rolled back and applied again piece by piece, each in a
  savepoint, so every other piece commits. The failing unit's handled message is
  dead-lettered ``unstorable`` with the reason, and removed from the journal in the same
  transaction: it is neither lost nor redelivered at every boot. A caller awaiting the unit
  gets :class:`UnitRejected`.
* **the storage** (disk full, I/O error, locked, the file gone): nothing is anyone's fault and
  nothing is dropped. Ingress units (``fail_fast``) fail at once with
  :class:`StorageUnavailable`, so the ingress answers 503 instead of holding its caller; every
  other piece is kept, in order, and retried with a growing pause (50 ms to 2 s). While
  nothing is kept, a one-row probe checks now and then whether writes work again. The first
  commit that succeeds ends the outage: the writer is never left failed.

The writer thread never dies of an error: everything it cannot apply is reported through
``on_event`` (which the colony turns into log lines) and the callers' futures.
"""

from __future__ import annotations

import contextlib
import queue
import sqlite3
import time
from collections.abc import Callable, Iterable
from typing import Any

from colony.celltables import storage_failure
from colony.crashpoints import crash_point
from colony.dead_letters import DeadLetter
from colony.errors import ColonyError
from colony.metrics.tally import Tally
from colony.persist.items import Commit, Execute, Fence, Item, Piece, Stop
from colony.persist.rows import UNSTORABLE, Rows, describe, unstorable_letters

BATCH = 1024
"""Items taken from the queue per transaction, at most."""

GATHER_S = 0.002
"""How long a transaction whose units nobody waits for stays open for more: units that run
ahead (:mod:`colony.journal`) then share a transaction with the units that acknowledge their
deliveries, and neither's journal row is written. Anything somebody waits for (a unit, a
cell's write, a fence) ends the wait at once."""

LINGER_S = 0.05
"""How long a transaction that ran a cell's write stays open for the unit that answers it."""

COMMIT_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
"""Bounds of the commit-latency tally (seconds, ``colony_journal_commit_seconds``)."""

BATCH_ITEMS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
"""Bounds of the batch-size tally (pieces per transaction, ``colony_journal_batch_items``)."""

_RETRY_FIRST_S = 0.05
_RETRY_MAX_S = 2.0


class PersistenceError(ColonyError):
    """``colony.db`` could not be written."""

    code = "persistence_failed"


class StorageUnavailable(PersistenceError):
    """The storage refuses writes for now (disk full, I/O error, the file gone): nothing was
    committed; try again later."""

    code = "storage_unavailable"


class UnitFenced(PersistenceError):
    """The unit was made under an ownership of its partition that has ended (a cluster,
    :mod:`colony.persist.pg.writer`): nothing of it was written, and the partition's new owner
    runs the message again from the journal."""

    code = "unit_fenced"


class UnitRejected(PersistenceError):
    """This unit alone cannot be stored; its message was dead-lettered ``unstorable``."""

    code = "unstorable"


def storage_trouble(exc: BaseException) -> bool:
    """True when ``exc`` says the storage failed (retry later), not the data written: what
    :func:`~colony.celltables.storage_failure` says, and any ``OperationalError`` too (disk
    I/O, full, locked, no such table when the file was replaced, ...)."""
    return isinstance(exc, sqlite3.OperationalError) or storage_failure(exc)


Event = Callable[[str, dict[str, Any]], None]
"""``(event name, fields)``: what the writer reports (called on the writer thread)."""


def _waited(piece: Piece) -> bool:
    """Somebody waits for this piece: a unit's caller, or a cell for its write's result."""
    return isinstance(piece, Execute) or (isinstance(piece, Commit) and piece.waited)


class Writer:
    """Runs in its own thread (``run``) and owns the write connection."""

    def __init__(self, conn: Any, items: queue.SimpleQueue[Item]) -> None:
        # ``conn``: a sqlite3.Connection here; a subclass's own connection (psycopg's)
        self.conn = conn
        self.items = items
        self.on_event: Event | None = None
        self.rows_written = 0
        self.journalled = 0
        """Deliveries committed so far: journal rows written, and those acknowledged in the
        same transaction (neither inserted nor deleted, :class:`~colony.persist.rows.Rows`)."""
        self.rejected = 0
        """Pieces that could not be stored (dead-lettered or reported)."""
        self.kept: list[Piece] = []
        """Pieces waiting for the storage to come back, oldest first."""
        self.storage_error: BaseException | None = None
        """Why the last write failed for want of storage; None once a commit succeeds."""
        self.storage_error_since: float | None = None
        self.lost: str | None = None
        """Set when ``colony.db`` was deleted or replaced: nothing is written any more."""
        self.abandoned = 0
        """Pieces still kept when the writer was stopped."""
        self._late: list[Fence | Stop] = []
        """Barriers met while a transaction waited for a unit (see ``_linger``)."""
        self.commit_seconds = Tally(COMMIT_S)
        """How long each committed batch's transaction took, from BEGIN to COMMIT (a linger
        for a unit included); ``batch_items``: how many pieces it held. Added to on this
        thread, read by a metrics scrape (:mod:`colony.metrics`)."""
        self.batch_items = Tally(BATCH_ITEMS)

    def _event(self, name: str, **fields: Any) -> None:
        if self.on_event is not None:
            with contextlib.suppress(Exception):  # a report must never stop the writer
                self.on_event(name, fields)

    # -- the loop -----------------------------------------------------------------------------

    def run(self) -> None:
        wait = _RETRY_FIRST_S
        while True:
            timeout = wait if (self.kept or self.storage_error is not None) else None
            work, fences, stop = self._gather(timeout)
            if work:
                self._commit(work)
            elif self.storage_error is not None and self.lost is None and not stop:
                self._probe()
            if self._late:
                late, self._late = self._late, []
                fences += [b for b in late if isinstance(b, Fence)]
                stop = stop or any(isinstance(b, Stop) for b in late)
            for fence in fences:
                fence.done(None)
            if stop:
                self._stop()
                return
            wait = _RETRY_FIRST_S if self.storage_error is None else min(wait * 2, _RETRY_MAX_S)

    def _gather(self, pause: float | None) -> tuple[list[Piece], list[Fence], bool]:
        """The kept pieces and up to ``BATCH`` new items. With nothing wrong, it waits for
        the first item and takes what else is queued. While the storage is out it collects
        for ``pause`` seconds first, so a retry is not made for every item that arrives; a
        fence or a stop ends the pause (a reader, or shutdown, is waiting)."""
        work: list[Piece] = self.kept
        self.kept = []
        fences: list[Fence] = []
        stop = False
        deadline = None if pause is None else time.monotonic() + pause
        # While nobody waits for what was taken, wait up to GATHER_S for more (``window``).
        gather = pause is None and not work
        window = False
        taken = 0
        while taken < BATCH:
            try:
                if taken == 0 and deadline is None:
                    item = self.items.get()
                elif deadline is None:
                    item = self.items.get_nowait()
                else:
                    item = self.items.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                if not gather:
                    break
                gather, window = False, True
                deadline = time.monotonic() + GATHER_S
                continue
            taken += 1
            if isinstance(item, Fence):
                fences.append(item)
                deadline, gather, window = None, False, False
            elif isinstance(item, Stop):
                stop = True
                deadline, gather, window = None, False, False
            else:
                work.append(item)
                if (gather or window) and _waited(item):
                    gather = False
                    if window:
                        deadline, window = None, False
        return work, fences, stop

    def _stop(self) -> None:
        if self.kept and self.lost is None:
            kept, self.kept = self.kept, []
            self._commit(kept)  # one last try
        self.abandoned = len(self.kept)
        for piece in self.kept:
            if isinstance(piece, Commit | Execute):
                piece.done(StorageUnavailable("the daemon stopped before colony.db came back"))
        if self.kept:
            self._event(
                "colony_db_writes_abandoned",
                pieces=len(self.kept),
                units=sum(isinstance(p, Commit) for p in self.kept),
                error=describe(self.storage_error) if self.storage_error else self.lost,
                detail="colony.db could not be written before the daemon stopped; handled "
                "messages whose effects were not committed stay in the journal and run again "
                "at the next boot; message-log rows and dead letters among these are lost",
            )
        with contextlib.suppress(Exception):
            self.conn.close()

    # -- one batch ----------------------------------------------------------------------------

    def _commit(self, work: list[Piece]) -> None:
        if self.lost is not None:
            self._defer(work, StorageUnavailable(self.lost))
            return
        started = time.perf_counter()
        try:
            counts = self._transaction(work)
        except Exception as exc:
            self._rollback()
            if self._trouble(exc):
                self._defer(work, exc)
            else:
                self._isolate(work)
            return
        self.commit_seconds.add(time.perf_counter() - started)
        self.batch_items.add(len(work))
        self._committed(counts)
        for piece in work:
            if isinstance(piece, Commit | Execute):
                piece.done(None)

    # -- what a database other than SQLite changes (colony/persist/pg/writer.py) --------------

    def _begin(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def _rows(self) -> Rows:
        return Rows()

    def _end(self) -> None:
        """Commit the batch's transaction."""
        self.conn.execute("COMMIT")

    def _trouble(self, exc: BaseException) -> bool:
        return storage_trouble(exc)

    def _before_commit(self, rows: Rows, work: list[Piece]) -> None:
        """Last step inside a batch's transaction, before its rows are written."""

    def _transaction(self, work: list[Piece]) -> tuple[int, int]:
        conn = self.conn
        self._begin()
        rows = self._rows()
        for piece in work:
            rows.add(conn, piece)
        self._linger(conn, rows, work)
        self._before_commit(rows, work)
        rows.write(conn)
        if any(isinstance(piece, Commit) for piece in work):
            crash_point("journal.commit")
        self._end()
        return len(rows.logs) + len(rows.letters), len(rows.inserts) + rows.dropped

    def _linger(self, conn: sqlite3.Connection, rows: Rows, work: list[Piece]) -> None:
        """Keep the transaction open until the unit acknowledging each message whose cell
        wrote in it has arrived, applying whatever comes meanwhile, so a write and its reply
        commit together. After ``LINGER_S`` it commits anyway (the reply's unit then commits
        in a later transaction; a crash between is what the store's receipts are for)."""
        waiting = {p.ack for p in work if isinstance(p, Execute) and p.ack is not None}
        if not waiting:
            return
        waiting.difference_update(p.unit.ack for p in work if isinstance(p, Commit))
        deadline = time.monotonic() + LINGER_S
        while waiting:
            try:
                item = self.items.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return
            if isinstance(item, Fence | Stop):
                self._late.append(item)
                if isinstance(item, Stop):
                    return
                continue
            work.append(item)
            rows.add(conn, item)
            if isinstance(item, Commit):
                waiting.discard(item.unit.ack)
            elif isinstance(item, Execute) and item.ack is not None:
                waiting.add(item.ack)

    def _rollback(self) -> None:
        try:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass

    def _committed(self, counts: tuple[int, int]) -> None:
        self.rows_written += counts[0]
        self.journalled += counts[1]
        if self.storage_error is not None:
            self._event(
                "colony_db_recovered",
                after_s=round(time.monotonic() - (self.storage_error_since or 0), 1),
                error=describe(self.storage_error),
                detail="colony.db takes writes again; everything kept meanwhile is committed",
            )
            self.storage_error = None
            self.storage_error_since = None

    def _defer(self, work: Iterable[Piece], exc: BaseException) -> None:
        """Storage trouble: fail the ingress units, keep the rest for a retry."""
        if self.storage_error is None and self.lost is None:  # a loss was reported already
            self.storage_error_since = time.monotonic()
            self._event(
                "colony_db_unavailable",
                error=describe(exc),
                detail="colony.db cannot be written; ingress is refused (503) and everything "
                "else is kept and retried until it can (nothing accepted is dropped)",
            )
        self.storage_error = exc
        for piece in work:
            if isinstance(piece, Commit) and piece.unit.fail_fast:
                piece.done(StorageUnavailable(f"colony.db cannot be written: {describe(exc)}"))
            else:
                self.kept.append(piece)

    def _isolate(self, work: list[Piece]) -> None:
        """The batch failed on content: apply each piece alone, in a savepoint, so that only
        the pieces that fail are left out."""
        conn = self.conn
        failed: list[tuple[Piece, BaseException]] = []
        counts = [0, 0]
        try:
            self._begin()
            for piece in work:
                conn.execute("SAVEPOINT piece")
                try:
                    rows = self._rows()
                    rows.add(conn, piece)
                    rows.write(conn)
                except Exception as exc:
                    conn.execute("ROLLBACK TO piece")
                    conn.execute("RELEASE piece")
                    if self._trouble(exc):
                        raise
                    failed.append((piece, exc))
                    self._reject(piece, exc)
                    continue
                conn.execute("RELEASE piece")
                counts[0] += len(rows.logs) + len(rows.letters)
                counts[1] += len(rows.inserts) + rows.dropped
            self._end()
        except Exception as exc:
            self._rollback()
            if self._trouble(exc):
                self._defer(work, exc)
                return
            # A bug, not a piece: report it and keep everything for the next round.
            self._event("colony_db_writer_error", error=describe(exc))
            self.kept.extend(work)
            self.storage_error = self.storage_error or exc
            return
        self._committed((counts[0], counts[1]))
        bad = {id(piece) for piece, _ in failed}
        for piece in work:
            if isinstance(piece, Commit | Execute) and id(piece) not in bad:
                piece.done(None)
        for piece, error in failed:
            self.rejected += 1
            self._report_rejected(piece, error)

    def _reject(self, piece: Piece, exc: BaseException) -> None:
        """Inside the isolating transaction: what a failed piece leaves behind."""
        conn = self.conn
        reason = describe(exc)
        if isinstance(piece, Commit):
            letters = unstorable_letters(piece.unit, reason, ran_ahead=not piece.waited)
            ack = piece.unit.ack
        elif isinstance(piece, DeadLetter):
            letters = [piece]
            ack = None
        else:
            return  # a message-log or registry row: reported, nothing else to keep
        conn.execute("SAVEPOINT fallback")
        try:
            rows = self._rows()
            for letter in letters:
                rows.letter(letter)
            if ack is not None:
                rows.ack(*ack)
            rows.write(conn)
        except Exception as second:
            conn.execute("ROLLBACK TO fallback")
            conn.execute("RELEASE fallback")
            if self._trouble(second):
                raise
            return
        conn.execute("RELEASE fallback")

    def _report_rejected(self, piece: Piece, exc: BaseException) -> None:
        reason = describe(exc)
        if isinstance(piece, Commit):
            unit = piece.unit
            dead = unstorable_letters(unit, reason)
            self._event(
                "unit_rejected",
                error=reason,
                cell=unit.ack[1] if unit.ack else None,
                message_id=unit.message.id if unit.message else None,
                trace_id=unit.message.trace_id if unit.message else None,
                dead_lettered=[d.message.id for d in dead],
                detail="colony.db could not store what handling this message caused; the rest "
                "of the batch was committed without it and the message is dead-lettered "
                f"{UNSTORABLE}",
            )
            piece.done(UnitRejected(reason))
        elif isinstance(piece, Execute):
            self._event(
                "cell_sql_failed",
                error=reason,
                detail="a cell's SQL failed inside the colony.db transaction; the rest of the "
                "transaction was committed without it and the cell was given the error",
            )
            piece.executed(None, exc)
            piece.done(None)
        else:
            self._event(
                "colony_db_row_rejected",
                kind=type(piece).__name__,
                error=reason,
                detail="one row could not be stored; everything else was committed",
            )

    def _probe(self) -> None:
        """While the storage is out and nothing is kept: does a one-row write work again?"""
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.execute(
                "INSERT INTO meta(key, value) VALUES ('writer_probe', ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (str(time.time()),),
            )
            self.conn.execute("COMMIT")
        except Exception as exc:
            self._rollback()
            self.storage_error = exc
            return
        self._committed((0, 0))
