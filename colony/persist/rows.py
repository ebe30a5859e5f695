"""The rows of one writer transaction, serialised and escaped on the writer's thread.

Every string passes through :mod:`colony.persist.escape` on its way in, so no value a cell
produced can make SQLite refuse a row for its encoding. What a rejected unit leaves behind (its
``unstorable`` dead letters) is built here too.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any, assert_never

from colony.dead_letters import DeadLetter, DeadLetterCode
from colony.effects import Handled, LogRow
from colony.envelope import Envelope
from colony.ids import now_ms
from colony.persist.escape import storable_json, storable_optional, storable_text
from colony.persist.items import Commit, Execute, Forget, Piece, Registry, Unit
from colony.persist.schema import (
    HANDLING_COLUMNS,
    HANDLING_SELECT,
    MESSAGE_LOG_COLUMNS,
    MESSAGE_LOG_SELECT,
)

_LOG_MARKS = ",".join("?" * len(MESSAGE_LOG_COLUMNS))
_HANDLING = (
    f"INSERT INTO handling_recent({HANDLING_SELECT}) "
    f"VALUES ({','.join('?' * len(HANDLING_COLUMNS))})"
)
_HANDLING_MOVE = (
    f"INSERT INTO handling_indexed({HANDLING_SELECT}) SELECT {HANDLING_SELECT} FROM handling_recent"
)

LOG_MOVE_ROWS = 1024
"""Message-log rows staged in ``message_log_recent`` move, in one statement, to
``message_log_indexed`` (see :mod:`colony.persist.schema`) once the oldest of them is this many
rows old: large enough that each index is written a page at a time, small enough that the move
(a few milliseconds, inside the transaction of the unit that triggers it) and a read's scan of
the unindexed rows stay short."""

STAGE_MAX_CHARS = 2048
"""A row whose headers and body are longer than this goes straight to ``message_log_indexed``:
a move writes a row's bytes a second time, which costs more than the index pages staging saves
once a row is a few kilobytes (measured: a 50 KB body cost three times as much staged)."""

_LOG_ENDS = (
    "SELECT (SELECT min(seq) FROM message_log_recent), (SELECT max(seq) FROM message_log_recent), "
    "(SELECT max(seq) FROM message_log_indexed)"
)
_STAGE = f"INSERT INTO message_log_recent(seq, {MESSAGE_LOG_SELECT}) VALUES (?,{_LOG_MARKS})"
_DIRECT = f"INSERT INTO message_log_indexed(seq, {MESSAGE_LOG_SELECT}) VALUES (?,{_LOG_MARKS})"
_MOVE = (
    f"INSERT INTO message_log_indexed(seq, {MESSAGE_LOG_SELECT}) "
    f"SELECT seq, {MESSAGE_LOG_SELECT} FROM message_log_recent ORDER BY seq"
)

UNSTORABLE = DeadLetterCode.UNSTORABLE
"""Dead-letter code of a message whose unit ``colony.db`` could not store."""


def describe(exc: BaseException) -> str:
    """An exception as one storable line: its type and message."""
    return storable_text(f"{type(exc).__name__}: {exc}")


class Rows:
    """Rows of one transaction, serialised (and escaped) on the writer thread.

    A delivery's journal row is serialised only when the transaction is written: a message
    that is delivered and acknowledged within one transaction (a chain running ahead of its
    commits, :mod:`colony.journal`) needs neither its insert nor its delete, so both are
    dropped. The journal then holds exactly what it would hold had each unit committed alone.
    """

    __slots__ = (
        "_bodies",
        "_context",
        "_deliveries",
        "_headers_json",
        "_hop",
        "_repeated",
        "_unwritten",
        "acks",
        "dropped",
        "forgets",
        "handling",
        "inserts",
        "letters",
        "logs",
        "registry",
    )

    def __init__(self) -> None:
        self.logs: list[tuple[Any, ...]] = []
        self.letters: list[tuple[Any, ...]] = []
        self.inserts: list[tuple[Any, ...]] = []
        """Journal rows, serialised by :meth:`write`."""
        self.acks: list[tuple[str, str]] = []
        self.forgets: list[tuple[int]] = []
        self.registry: list[tuple[Any, ...]] = []
        self.handling: list[tuple[Any, ...]] = []
        self.dropped = 0
        """Deliveries acknowledged in this transaction: neither inserted nor deleted."""
        self._deliveries: list[tuple[str, str, Envelope] | None] = []
        self._unwritten: dict[tuple[str, str], int] = {}
        """``(message id, cell)`` of each delivery not yet written, to its index."""
        self._repeated: set[tuple[str, str]] = set()
        """Keys delivered twice here: their rows are all written, and the ack deletes them."""
        self._bodies: dict[int, tuple[Any, str]] = {}
        self._context: Any = None
        self._hop: Any = None
        self._headers_json = ""

    def _body_of(self, m: Envelope) -> str:
        # Follow-ups of one emission, transit copies and a delivery's log and journal rows
        # share a body object: each is serialised once per transaction (the object is kept
        # with its text, so its id cannot be reused meanwhile).
        body = m.body
        known = self._bodies.get(id(body))
        if known is None or known[0] is not body:
            known = self._bodies[id(body)] = (body, storable_json(body))
        return known[1]

    def _headers_of(self, m: Envelope) -> str:
        # A hive's transit copies carry the headers they arrived with (the same two objects)
        # unless an edge modified them: each pair is serialised once.
        context, hop = m.headers.context, m.headers.hop
        if context is not self._context or hop is not self._hop or not self._headers_json:
            self._headers_json = storable_json({"context": context, "hop": hop})
            self._context, self._hop = context, hop
        return self._headers_json

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
                self._headers_of(m),
                "inline",
                self._body_of(m),
                m.created_at,
                item.at_ms,
                ",".join(item.edges) or None,
            )
        )

    def handled(self, item: Handled) -> None:
        self.handling.append(
            (
                storable_text(item.message_id),
                storable_text(item.trace_id),
                storable_text(item.cell),
                item.cell_type,
                item.started_ms,
                item.duration_ms,
                item.outcome,
                storable_optional(item.error),
                storable_optional(item.model),
                item.llm_latency_ms,
                item.tokens_prompt,
                item.tokens_completion,
            )
        )

    def letter(self, item: DeadLetter) -> None:
        self.letters.append(letter_row(item))

    def journal(self, cell: str, sender: str, m: Envelope) -> None:
        key = (m.id, cell)
        if key in self._unwritten or key in self._repeated:
            self._repeated.add(key)
            self._unwritten.pop(key, None)
        else:
            self._unwritten[key] = len(self._deliveries)
        self._deliveries.append((cell, sender, m))

    def ack(self, message_id: str, cell: str) -> None:
        """Remove a handled message from the journal, or drop its row not yet written."""
        index = self._unwritten.pop((message_id, cell), None)
        if index is not None:
            self._deliveries[index] = None
            self.dropped += 1
            return
        self.acks.append((storable_text(message_id), storable_text(cell)))

    def _serialise_journal(self) -> None:
        row = self._journal_row
        for delivery in self._deliveries:
            if delivery is not None:
                self.inserts.append(row(*delivery))
        self._deliveries = []
        self._unwritten.clear()

    def _journal_row(self, cell: str, sender: str, m: Envelope) -> tuple[Any, ...]:
        """A delivery's journal row: the envelope as dead letters store it, minus the body
        (kept apart; the journal reader joins them)."""
        envelope = m.head_json()
        envelope["created_at"] = m.created_at
        return (
            storable_text(m.id),
            storable_text(cell),
            storable_text(sender),
            storable_json(envelope),
            self._body_of(m),
        )

    def take_key(self, conn: Any, key: str, trace_id: str) -> bool:
        """Remember an ingress key; False when it was taken before (a duplicate)."""
        return bool(
            conn.execute(
                "INSERT OR IGNORE INTO ingress_keys(key, trace_id, created_at) VALUES (?,?,?)",
                (storable_text(key), storable_text(trace_id), int(time.time())),
            ).rowcount
        )

    def unit(self, conn: sqlite3.Connection, unit: Unit) -> None:
        unit.duplicate = False
        if unit.key is not None:
            trace = unit.deliveries[0].message.trace_id if unit.deliveries else ""
            if not self.take_key(conn, unit.key, trace):
                unit.duplicate = True
                return
        for row in unit.logs:
            self.log(row)
        for letter in unit.letters:
            self.letter(letter)
        for d in unit.deliveries:
            self.journal(d.cell, d.sender, d.message)
        if unit.handled is not None:
            self.handled(unit.handled)
        if unit.ack is not None:
            self.ack(*unit.ack)

    def add(self, conn: sqlite3.Connection, piece: Piece) -> None:
        match piece:
            case Commit():
                self.unit(conn, piece.unit)
            case LogRow():
                self.log(piece)
            case DeadLetter():
                self.letter(piece)
            case Handled():
                self.handled(piece)
            case Forget():
                self.forgets.append((piece.seq,))
            case Execute():
                piece.run(conn)
            case Registry():
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
            case _:
                assert_never(piece)

    def write(self, conn: sqlite3.Connection) -> None:
        self._serialise_journal()
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
            stage_log(conn, self.logs)
        if self.letters:
            conn.executemany(
                "INSERT INTO dead_letters(sender_path, original_target, resolved_target, "
                "error_code, trace_id, created_at, message_json, detail, message_id, at_ms) "
                "VALUES (?,?,?,?,?,?,?,?,?,?)",
                self.letters,
            )
        if self.handling:
            conn.executemany(_HANDLING, self.handling)
        if self.registry:
            conn.executemany(
                "INSERT INTO registry(path, cell_id, cell_type, status, created_at, updated_at) "
                "VALUES (?,?,?,?,?,?) ON CONFLICT(path) DO UPDATE SET cell_id=excluded.cell_id, "
                "cell_type=excluded.cell_type, status=excluded.status, "
                "updated_at=excluded.updated_at",
                self.registry,
            )


def stage_log(conn: sqlite3.Connection, logs: list[tuple[Any, ...]]) -> None:
    """Write message-log rows, numbered after every row before them: small ones staged in
    ``message_log_recent``, large ones (``STAGE_MAX_CHARS``) straight into
    ``message_log_indexed``; move the staged rows once the oldest is ``LOG_MOVE_ROWS`` old."""
    oldest, newest, indexed = conn.execute(_LOG_ENDS).fetchone()
    first = max(newest or 0, indexed or 0) + 1
    staged: list[tuple[Any, ...]] = []
    direct: list[tuple[Any, ...]] = []
    for seq, row in enumerate(logs, first):
        # row[8] is the headers' JSON, row[10] the body's (see Rows.log)
        small = len(row[8]) + len(row[10]) <= STAGE_MAX_CHARS
        (staged if small else direct).append((seq, *row))
    if staged:
        conn.executemany(_STAGE, staged)
        oldest = staged[0][0] if oldest is None else oldest
    if direct:
        conn.executemany(_DIRECT, direct)
    if oldest is not None and first + len(logs) - oldest >= LOG_MOVE_ROWS:
        conn.execute(_MOVE)
        conn.execute("DELETE FROM message_log_recent")
        # The handling rows staged meanwhile go with them (each handling follows a routing
        # decision, so they never gather for long without the log moving).
        conn.execute(_HANDLING_MOVE)
        conn.execute("DELETE FROM handling_recent")


def letter_row(item: DeadLetter) -> tuple[Any, ...]:
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
            item.at_ms,
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
        storable_text(m.id),
        item.at_ms if item.at_ms is not None else now_ms(),
    )


def _stand_in(body: Any) -> str:
    """What a dead letter keeps of a body no JSON can hold: the start of its ``repr``."""
    try:
        return storable_text(repr(body)[:10_000])
    except (RecursionError, ValueError, TypeError):
        return f"<a {type(body).__name__} nested too deep to print>"


def unstorable_letters(unit: Unit, reason: str, *, ran_ahead: bool = False) -> list[DeadLetter]:
    """What a rejected unit leaves in the dead letters: its handled (or ingress) message, or,
    for a long-running cell's own emissions, the messages they would have delivered.
    ``ran_ahead``: its deliveries were handed on before the commit (:mod:`colony.journal`)."""
    if ran_ahead:
        detail = (
            f"colony.db could not store what this message caused ({reason}); it was removed "
            "from the journal, but what it delivered had already run (the hand-off ran ahead "
            "of its commit): replaying it would run that again"
        )
    else:
        detail = (
            f"colony.db could not store what this message caused ({reason}); it was removed "
            "from the journal and its effects were not delivered; replay it once the cause is "
            "fixed"
        )
    cell = unit.ack[1] if unit.ack is not None else None
    if unit.message is not None:
        m = unit.message
        return [DeadLetter(UNSTORABLE, cell or "/", m.target, cell or m.target, m, detail)]
    return [
        DeadLetter(UNSTORABLE, d.sender, d.message.target, d.cell, d.message, detail)
        for d in unit.deliveries
    ]
