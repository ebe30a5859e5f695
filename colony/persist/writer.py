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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from colony.crashpoints import crash_point
from colony.dead_letters import DeadLetter
from colony.envelope import Envelope
from colony.persist.escape import storable_json, storable_optional, storable_text

BATCH = 1024
"""Items taken from the queue per transaction, at most."""

UNSTORABLE = "unstorable"
"""Dead-letter code of a message whose unit ``colony.db`` could not store."""

_RETRY_FIRST_S = 0.05
_RETRY_MAX_S = 2.0

# Primary SQLite result codes that say the storage, not the data, is at fault.
_STORAGE_CODES = frozenset(
    {
        5,  # SQLITE_BUSY
        6,  # SQLITE_LOCKED
        7,  # SQLITE_NOMEM
        8,  # SQLITE_READONLY
        10,  # SQLITE_IOERR
        11,  # SQLITE_CORRUPT
        13,  # SQLITE_FULL
        14,  # SQLITE_CANTOPEN
        15,  # SQLITE_PROTOCOL
        26,  # SQLITE_NOTADB
    }
)


class PersistenceError(Exception):
    """``colony.db`` could not be written."""


class StorageUnavailable(PersistenceError):
    """The storage refuses writes for now (disk full, I/O error, the file gone): nothing was
    committed; try again later."""


class UnitRejected(PersistenceError):
    """This unit alone cannot be stored; its message was dead-lettered ``unstorable``."""


def storage_trouble(exc: BaseException) -> bool:
    """True when ``exc`` says the storage failed (retry later), not the data written."""
    if isinstance(exc, OSError):
        return True
    if isinstance(exc, sqlite3.OperationalError):
        return True  # disk I/O, full, locked, no such table (the file was replaced), ...
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF in _STORAGE_CODES


def describe(exc: BaseException) -> str:
    return storable_text(f"{type(exc).__name__}: {exc}")


# -- what the queue carries -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LogRow:
    """One routing decision into a cell or hive (meclaw's ``message_log`` row)."""

    message: Envelope
    from_path: str
    to_path: str
    ttl: int


@dataclass(frozen=True, slots=True)
class Registry:
    path: str
    cell_id: str
    cell_type: str
    status: str
    at: int


@dataclass(frozen=True, slots=True)
class Forget:
    """Remove one journal row (its cell is gone; the caller dead-letters the message)."""

    seq: int


@dataclass(slots=True)
class Unit:
    """Everything one hand-off writes, committed in one transaction (at-least-once delivery).

    A unit is what the colony does with one message: the handling cell's emissions routed,
    their message-log rows and dead letters, every delivery they cause (journal inserts), and
    the removal of the handled message from the journal (``ack``). Committed together, a crash
    leaves either the handled message in the journal and none of its effects, or its effects
    and not the message. ``key`` makes an ingress idempotent: a unit whose key was seen before
    commits nothing and reports itself a duplicate.
    """

    ack: tuple[str, str] | None = None
    """``(message id, cell path)`` of the handled message, or None for an ingress."""
    key: str | None = None
    logs: list[LogRow] = field(default_factory=list)
    letters: list[DeadLetter] = field(default_factory=list)
    deliveries: list[tuple[Any, Envelope, str]] = field(default_factory=list)
    """``(runner, message, sender)``: put into the runner's mailbox once committed."""
    closed: bool = False
    duplicate: bool = False
    message: Envelope | None = None
    """The handled message (or the ingress's own): what is dead-lettered if the unit cannot
    be stored."""
    fail_fast: bool = False
    """An ingress whose caller answers at once: fail it while the storage is unavailable
    instead of keeping it for a retry."""

    def log(self, message: Envelope, from_path: str, to_path: str) -> None:
        self.logs.append(LogRow(message, from_path, to_path, message.ttl))

    def dead_letter(self, letter: DeadLetter) -> None:
        self.letters.append(letter)


Done = Callable[[BaseException | None], None]


class Commit:
    __slots__ = ("done", "unit")

    def __init__(self, unit: Unit, done: Done) -> None:
        self.unit = unit
        self.done = done


class Fence:
    """Passes once everything queued before it was tried (committed, rejected, or kept for a
    retry while the storage is unavailable: reads then see what is committed)."""

    __slots__ = ("done",)

    def __init__(self, done: Done) -> None:
        self.done = done


class Stop:
    pass


Piece = LogRow | DeadLetter | Registry | Forget | Commit


# -- rows of one transaction ------------------------------------------------------------------


class _Rows:
    """Rows of one transaction, serialised (and escaped) on the writer thread."""

    __slots__ = ("_body", "_body_json", "acks", "forgets", "inserts", "letters", "logs", "registry")

    def __init__(self) -> None:
        self.logs: list[tuple[Any, ...]] = []
        self.letters: list[tuple[Any, ...]] = []
        self.inserts: list[tuple[Any, ...]] = []
        self.acks: list[tuple[str, str]] = []
        self.forgets: list[tuple[int]] = []
        self.registry: list[tuple[Any, ...]] = []
        self._body: Any = None
        self._body_json = ""

    def _body_of(self, m: Envelope) -> str:
        # Follow-ups of one emission and transit copies share a body object.
        if m.body is not self._body or not self._body_json:
            self._body_json = storable_json(m.body)
            self._body = m.body
        return self._body_json

    def log(self, item: LogRow) -> None:
        m = item.message
        self.logs.append(
            (
                storable_text(m.id),
                storable_text(m.trace_id),
                storable_optional(m.parent_message_id),
                storable_optional(m.correlation_id),
                item.ttl,
                storable_text(item.from_path),
                storable_text(item.to_path),
                storable_optional(m.reply_to),
                storable_json({"context": m.headers.context, "hop": m.headers.hop}),
                "inline",
                self._body_of(m),
                m.created_at,
            )
        )

    def letter(self, item: DeadLetter) -> None:
        self.letters.append(_letter_row(item))

    def journal(self, cell: str, sender: str, m: Envelope) -> None:
        # The envelope as dead letters store it, minus the body: that is kept apart, so a body
        # shared by follow-ups is serialised once (the journal reader joins them again).
        envelope = m.to_json()
        del envelope["body_kind"], envelope["body_payload"]
        self.inserts.append(
            (
                storable_text(m.id),
                storable_text(cell),
                storable_text(sender),
                storable_json(envelope),
                self._body_of(m),
            )
        )

    def unit(self, conn: sqlite3.Connection, unit: Unit) -> None:
        unit.duplicate = False
        if unit.key is not None:
            trace = unit.deliveries[0][1].trace_id if unit.deliveries else ""
            taken = conn.execute(
                "INSERT OR IGNORE INTO ingress_keys(key, trace_id, created_at) VALUES (?,?,?)",
                (storable_text(unit.key), storable_text(trace), int(time.time())),
            ).rowcount
            if not taken:
                unit.duplicate = True
                return
        for row in unit.logs:
            self.log(row)
        for letter in unit.letters:
            self.letter(letter)
        for runner, message, sender in unit.deliveries:
            self.journal(runner.path, sender, message)
        if unit.ack is not None:
            self.acks.append((storable_text(unit.ack[0]), storable_text(unit.ack[1])))

    def add(self, conn: sqlite3.Connection, piece: Piece) -> None:
        if isinstance(piece, Commit):
            self.unit(conn, piece.unit)
        elif isinstance(piece, LogRow):
            self.log(piece)
        elif isinstance(piece, DeadLetter):
            self.letter(piece)
        elif isinstance(piece, Forget):
            self.forgets.append((piece.seq,))
        else:
            self.registry.append(
                (
                    storable_text(piece.path),
                    storable_text(piece.cell_id),
                    storable_text(piece.cell_type),
                    piece.status,
                    piece.at,
                    piece.at,
                )
            )

    def write(self, conn: sqlite3.Connection) -> None:
        if self.inserts:
            conn.executemany(
                "INSERT INTO journal(id, cell, sender, envelope, body) VALUES (?,?,?,?,?)",
                self.inserts,
            )
        if self.acks:
            # ``+cell``: look rows up by id; the (cell, seq) index would scan a whole cell.
            conn.executemany("DELETE FROM journal WHERE id = ? AND +cell = ?", self.acks)
        if self.forgets:
            conn.executemany("DELETE FROM journal WHERE seq = ?", self.forgets)
        if self.logs:
            conn.executemany(
                "INSERT INTO message_log(id, trace_id, parent_message_id, correlation_id, ttl, "
                "from_path, to_path, reply_to, headers, body_kind, body_payload, created_at) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                self.logs,
            )
        if self.letters:
            conn.executemany(
                "INSERT INTO dead_letters(sender_path, original_target, resolved_target, "
                "error_code, trace_id, created_at, message_json, detail) "
                "VALUES (?,?,?,?,?,?,?,?)",
                self.letters,
            )
        if self.registry:
            conn.executemany(
                "INSERT INTO registry(path, cell_id, cell_type, status, created_at, updated_at) "
                "VALUES (?,?,?,?,?,?) ON CONFLICT(path) DO UPDATE SET cell_id=excluded.cell_id, "
                "cell_type=excluded.cell_type, status=excluded.status, "
                "updated_at=excluded.updated_at",
                self.registry,
            )


def _letter_row(item: DeadLetter) -> tuple[Any, ...]:
    m = item.message
    try:
        message_json = storable_json(m.to_json())
    except (ValueError, RecursionError) as exc:  # a cycle, or nesting no JSON can hold
        doc = m.to_json()
        doc["body_payload"] = {"unstorable_body": _stand_in(m.body)}
        message_json = storable_json(doc)
        item = DeadLetter(
            item.error_code,
            item.sender_path,
            item.original_target,
            item.resolved_target,
            m,
            f"{item.detail or ''} (body not storable as JSON: {describe(exc)})".strip(),
        )
    return (
        storable_text(item.sender_path),
        storable_text(item.original_target),
        storable_text(item.resolved_target),
        storable_text(item.error_code),
        storable_text(m.trace_id),
        m.created_at if -(2**63) <= m.created_at < 2**63 else 0,
        message_json,
        storable_optional(item.detail),
    )


def _stand_in(body: Any) -> str:
    """What a dead letter keeps of a body no JSON can hold: the start of its ``repr``."""
    try:
        return storable_text(repr(body)[:10_000])
    except (RecursionError, ValueError, TypeError):
        return f"<a {type(body).__name__} nested too deep to print>"


def _unstorable_letters(unit: Unit, reason: str) -> list[DeadLetter]:
    """What a rejected unit leaves in the dead letters: its handled (or ingress) message, or,
    for a long-running cell's own emissions, the messages they would have delivered."""
    detail = (
        f"colony.db could not store what this message caused ({reason}); it was removed from "
        "the journal and its effects were not delivered; replay it once the cause is fixed"
    )
    cell = unit.ack[1] if unit.ack is not None else None
    if unit.message is not None:
        m = unit.message
        return [DeadLetter(UNSTORABLE, cell or "/", m.target, cell or m.target, m, detail)]
    return [
        DeadLetter(UNSTORABLE, sender, m.target, runner.path, m, detail)
        for runner, m, sender in unit.deliveries
    ]


# -- the thread -------------------------------------------------------------------------------


Event = Callable[[str, dict[str, Any]], None]
"""``(event name, fields)``: what the writer reports (called on the writer thread)."""


class Writer:
    """Runs in its own thread (``run``) and owns the write connection."""

    def __init__(self, conn: sqlite3.Connection, items: queue.SimpleQueue[Any]) -> None:
        self.conn = conn
        self.items = items
        self.on_event: Event | None = None
        self.rows_written = 0
        self.journalled = 0
        """Journal inserts committed so far (deliveries made durable)."""
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
            for fence in fences:
                fence.done(None)
            if stop:
                self._stop()
                return
            wait = _RETRY_FIRST_S if self.storage_error is None else min(wait * 2, _RETRY_MAX_S)

    def _gather(self, timeout: float | None) -> tuple[list[Piece], list[Fence], bool]:
        """The kept pieces and up to ``BATCH`` new items (waiting at most ``timeout`` for the
        first one when something is kept; for ever otherwise)."""
        work: list[Piece] = self.kept
        self.kept = []
        fences: list[Fence] = []
        stop = False
        try:
            first = self.items.get(timeout=timeout) if timeout is not None else self.items.get()
        except queue.Empty:
            return work, fences, stop
        taken = [first]
        while len(taken) < BATCH:
            try:
                taken.append(self.items.get_nowait())
            except queue.Empty:
                break
        for item in taken:
            if isinstance(item, Fence):
                fences.append(item)
            elif isinstance(item, Stop):
                stop = True
            else:
                work.append(item)
        return work, fences, stop

    def _stop(self) -> None:
        if self.kept and self.lost is None:
            kept, self.kept = self.kept, []
            self._commit(kept)  # one last try
        self.abandoned = len(self.kept)
        for piece in self.kept:
            if isinstance(piece, Commit):
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
        with contextlib.suppress(sqlite3.Error):
            self.conn.close()

    # -- one batch ----------------------------------------------------------------------------

    def _commit(self, work: list[Piece]) -> None:
        if self.lost is not None:
            self._defer(work, StorageUnavailable(self.lost))
            return
        try:
            counts = self._transaction(work)
        except Exception as exc:
            self._rollback()
            if storage_trouble(exc):
                self._defer(work, exc)
            else:
                self._isolate(work)
            return
        self._committed(counts)
        for piece in work:
            if isinstance(piece, Commit):
                piece.done(None)

    def _transaction(self, work: Sequence[Piece]) -> tuple[int, int]:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        rows = _Rows()
        for piece in work:
            rows.add(conn, piece)
        rows.write(conn)
        if any(isinstance(piece, Commit) for piece in work):
            crash_point("journal.commit")
        conn.execute("COMMIT")
        return len(rows.logs) + len(rows.letters), len(rows.inserts)

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
            conn.execute("BEGIN IMMEDIATE")
            for piece in work:
                conn.execute("SAVEPOINT piece")
                try:
                    rows = _Rows()
                    rows.add(conn, piece)
                    rows.write(conn)
                except Exception as exc:
                    conn.execute("ROLLBACK TO piece")
                    conn.execute("RELEASE piece")
                    if storage_trouble(exc):
                        raise
                    failed.append((piece, exc))
                    self._reject(piece, exc)
                    continue
                conn.execute("RELEASE piece")
                counts[0] += len(rows.logs) + len(rows.letters)
                counts[1] += len(rows.inserts)
            conn.execute("COMMIT")
        except Exception as exc:
            self._rollback()
            if storage_trouble(exc):
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
            if isinstance(piece, Commit) and id(piece) not in bad:
                piece.done(None)
        for piece, error in failed:
            self.rejected += 1
            self._report_rejected(piece, error)

    def _reject(self, piece: Piece, exc: BaseException) -> None:
        """Inside the isolating transaction: what a failed piece leaves behind."""
        conn = self.conn
        reason = describe(exc)
        if isinstance(piece, Commit):
            letters = _unstorable_letters(piece.unit, reason)
            ack = piece.unit.ack
        elif isinstance(piece, DeadLetter):
            letters = [piece]
            ack = None
        else:
            return  # a message-log or registry row: reported, nothing else to keep
        conn.execute("SAVEPOINT fallback")
        try:
            rows = _Rows()
            for letter in letters:
                rows.letter(letter)
            if ack is not None:
                rows.acks.append((storable_text(ack[0]), storable_text(ack[1])))
            rows.write(conn)
        except Exception as second:
            conn.execute("ROLLBACK TO fallback")
            conn.execute("RELEASE fallback")
            if storage_trouble(second):
                raise
            return
        conn.execute("RELEASE fallback")

    def _report_rejected(self, piece: Piece, exc: BaseException) -> None:
        reason = describe(exc)
        if isinstance(piece, Commit):
            unit = piece.unit
            dead = _unstorable_letters(unit, reason)
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
