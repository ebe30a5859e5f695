"""The SQL of retention: which rows of the record are past keeping, found and deleted a batch
at a time, on ``colony.db`` or the cluster database.

A round is planned once (:func:`plan`): the cutoffs by age, and, when the message log is larger
than its cap, the ``seq`` below which its oldest rows go. Each :class:`Prunable` is one physical
table and one condition. Its rows are *found* on a read connection (``SELECT key ... LIMIT n``:
on SQLite a WAL reader, so the search never holds the write lock), up to ``n`` rows or, first,
as many as make up a number of bytes of headers and bodies (:func:`find`), and *deleted* by
key, where the caller chooses (the daemon through its writer, the ``prune`` command on a
connection of its own). A delete by key touches exactly those rows, their index entries and
the pages of their bodies: its cost is bounded by the batch, whatever the table's size.

What is kept on purpose: the journal (messages not yet handled: never pruned), the registry,
the newest message-log row and the newest dead letter (their keys number the next rows; deleting
the highest would let SQLite hand the same ``seq``/``id`` out again, and a reader following
the log by ``seq`` would miss rows). Bodies are stored inline (``body_kind`` is ``inline``):
there is no blob store whose files a pruned row could leave behind.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from colony.persist.source import Session

DAY_MS = 86_400_000
MB = 1_000_000

LOG_TABLES = {"sqlite": ("message_log_indexed", "message_log_recent"), "postgres": ("message_log",)}
HANDLING_TABLES = {"sqlite": ("handling_indexed", "handling_recent"), "postgres": ("handling",)}
_ROW_KEY = {"sqlite": "rowid", "postgres": "seq"}
"""The key of a ``handling`` row (SQLite's tables have no column of their own for it)."""
_INGRESS_KEY = {"sqlite": "rowid", "postgres": "key"}
_LENGTH = {"sqlite": "length", "postgres": "octet_length"}
"""A text's length in the find's byte count: PostgreSQL's ``octet_length`` reads it from a
TOASTed value's header, without fetching the value (SQLite's ``length`` reads the text)."""

ROW_BYTES = 500
"""What a message-log row costs on disk besides its headers and body: its ids, paths and
numbers, its entries in five indexes, and the ``handling`` row of about every other hop
(measured: 420 bytes a row with 10-character texts, 560 with 1,000-character ones)."""

LOG_SIZE = f"length(headers) + length(body_payload) + {ROW_BYTES}"
"""What a message-log row counts towards ``message_log_max_mb``: the characters of its stored
headers and body (JSON text, nearly all ASCII, so about its bytes) and :data:`ROW_BYTES`, so
the cap bounds the log's share of ``colony.db`` whether its bodies are large or small."""


@dataclass(frozen=True, slots=True)
class Policy:
    """``colony.json`` ``retention`` in the units the SQL compares (0: keep forever)."""

    message_log_days: int
    message_log_max_mb: int
    dead_letters_days: int


@dataclass(frozen=True, slots=True)
class Prunable:
    """One table's rows past keeping: ``record`` is what the report calls them."""

    record: str
    table: str
    key: str
    where: str
    args: tuple[Any, ...]
    size: str = "0"
    """SQL for the bytes of a row's large columns (its headers and body), which a batch
    counts: deleting a row frees, and rewrites, a page for every 4 KB of them."""

    def find(self, limit: int) -> str:
        return (
            f"SELECT {self.key}, {self.size} FROM {self.table} WHERE {self.where} "
            f"LIMIT {int(limit)}"
        )

    def count(self) -> str:
        return f"SELECT count(*) FROM {self.table} WHERE {self.where}"

    def delete(self, keys: int) -> str:
        marks = ",".join("?" * keys)
        return f"DELETE FROM {self.table} WHERE {self.key} IN ({marks})"


def _one(session: Session, sql: str, args: Sequence[Any] = ()) -> Any:
    row = session.execute(sql, args).fetchone()
    return None if row is None else row[0]


def _newest(session: Session, tables: Sequence[str], key: str) -> int | None:
    found = [_one(session, f"SELECT max({key}) FROM {t}") for t in tables]
    present = [v for v in found if v is not None]
    return max(present) if present else None


def log_size(session: Session, dialect: str) -> int:
    """The message log's size as ``message_log_max_mb`` counts it (a scan of every row)."""
    total = 0
    for table in LOG_TABLES[dialect]:
        total += int(_one(session, f"SELECT coalesce(sum({LOG_SIZE}), 0) FROM {table}") or 0)
    return total


def _could_exceed(session: Session, dialect: str, cap: int) -> bool:
    """Whether the log may be past ``cap``: on SQLite, not when the pages in use, all of
    ``colony.db``, are fewer bytes (the scan of every body is then spared)."""
    if dialect != "sqlite":
        return True
    pages = int(_one(session, "PRAGMA page_count") or 0)
    free = int(_one(session, "PRAGMA freelist_count") or 0)
    return (pages - free) * int(_one(session, "PRAGMA page_size") or 0) > cap


def size_cutoff(session: Session, dialect: str, cap: int, below: int) -> int | None:
    """The ``seq`` at or below which the oldest message-log rows go so that the rest fits in
    ``cap`` (characters); None when it fits. Rows at or past ``below`` (the newest) stay."""
    if not _could_exceed(session, dialect, cap):
        return None
    excess = log_size(session, dialect) - cap
    if excess <= 0:
        return None
    union = " UNION ALL ".join(
        f"SELECT seq, {LOG_SIZE} AS size FROM {t} WHERE seq < ?" for t in LOG_TABLES[dialect]
    )
    running = f"SELECT seq, sum(size) OVER (ORDER BY seq) AS freed FROM ({union}) AS log"
    found = _one(
        session,
        f"SELECT seq FROM ({running}) AS cut WHERE freed >= ? ORDER BY seq LIMIT 1",
        (*[below] * len(LOG_TABLES[dialect]), excess),
    )
    if found is None:  # the newest row alone is past the cap: everything before it goes
        return _newest_below(session, LOG_TABLES[dialect], below)
    return int(found)


def _newest_below(session: Session, tables: Sequence[str], below: int) -> int | None:
    found = [_one(session, f"SELECT max(seq) FROM {t} WHERE seq < ?", (below,)) for t in tables]
    present = [int(v) for v in found if v is not None]
    return max(present) if present else None


def _age(column_ms: str, fallback_s: str | None) -> str:
    """Older than the cutoff by ``column_ms``, or (rows written before it existed, NULL) by
    the seconds column ``fallback_s``."""
    if fallback_s is None:
        return f"{column_ms} < ?"
    return f"({column_ms} < ? OR ({column_ms} IS NULL AND {fallback_s} < ?))"


def plan(session: Session, dialect: str, policy: Policy, now_ms: int) -> list[Prunable]:
    """What one round deletes, in order: the message log by age, then by size, the handling
    rows older than both (never reaching further back than the log), the dead letters by
    age, the ingress keys with the log."""
    targets: list[Prunable] = []
    logs, handling = LOG_TABLES[dialect], HANDLING_TABLES[dialect]
    length = _LENGTH[dialect]
    log_bytes = f"{length}(headers) + {length}(body_payload)"
    newest_log = _newest(session, logs, "seq")
    log_cut: int | None = None  # handling rows before this time go (epoch ms)
    if policy.message_log_days and newest_log is not None:
        log_cut = now_ms - policy.message_log_days * DAY_MS
        where = f"{_age('at_ms', 'created_at')} AND seq < ?"
        args = (log_cut, log_cut // 1000, newest_log)
        targets += [Prunable("message_log", t, "seq", where, args, log_bytes) for t in logs]
    if policy.message_log_max_mb and newest_log is not None:
        cutoff = size_cutoff(session, dialect, policy.message_log_max_mb * MB, newest_log)
        if cutoff is not None:
            targets += [
                Prunable("message_log", t, "seq", "seq <= ?", (cutoff,), log_bytes) for t in logs
            ]
            kept_from = _oldest_kept_ms(session, logs, cutoff)
            if kept_from is not None and (log_cut is None or kept_from > log_cut):
                log_cut = kept_from
    if log_cut is not None:
        key = _ROW_KEY[dialect]
        targets += [Prunable("handling", t, key, "started_ms < ?", (log_cut,)) for t in handling]
        if policy.message_log_days:
            ingress_cut = (now_ms - policy.message_log_days * DAY_MS) // 1000
            targets.append(
                Prunable(
                    "ingress_keys",
                    "ingress_keys",
                    _INGRESS_KEY[dialect],
                    "created_at < ?",
                    (ingress_cut,),
                )
            )
    if policy.dead_letters_days:
        newest = _newest(session, ("dead_letters",), "id")
        if newest is not None:
            cut = now_ms - policy.dead_letters_days * DAY_MS
            # created_at (the message's creation, seconds, indexed) comes before at_ms (when
            # it was dead-lettered): it narrows the search, at_ms decides.
            where = f"created_at < ? AND {_age('at_ms', 'created_at')} AND id < ?"
            targets.append(
                Prunable(
                    "dead_letters",
                    "dead_letters",
                    "id",
                    where,
                    (cut // 1000, cut, cut // 1000, newest),
                    f"{length}(message_json)",
                )
            )
    return targets


def _oldest_kept_ms(session: Session, logs: Sequence[str], cutoff: int) -> int | None:
    """When the oldest message-log row kept after a cut at ``cutoff`` was routed."""
    found = [
        _one(
            session,
            f"SELECT min(at_ms) FROM {t} WHERE seq = (SELECT min(seq) FROM {t} WHERE seq > ?)",
            (cutoff,),
        )
        for t in logs
    ]
    present = [int(v) for v in found if v is not None]
    return min(present) if present else None


@dataclass(frozen=True, slots=True)
class Found:
    """A batch's keys, and whether ``target`` may hold more rows past keeping after them."""

    keys: list[Any]
    more: bool


def find(session: Session, target: Prunable, limit: int, max_bytes: int) -> Found:
    """Keys of up to ``limit`` rows of ``target`` (on a read connection), fewer when their
    sizes reach ``max_bytes`` first (at least one row, however large). The rows are read one
    at a time, so on SQLite the search stops at the row that reaches the bytes."""
    rows = session.execute(target.find(limit), target.args)
    keys: list[Any] = []
    total = 0
    while (row := rows.fetchone()) is not None:
        keys.append(row[0])
        total += int(row[1] or 0)
        if total >= max_bytes:
            return Found(keys, True)
    return Found(keys, len(keys) >= limit)


def count(session: Session, target: Prunable) -> int:
    """How many rows ``target`` would delete (``--dry-run``)."""
    return int(_one(session, target.count(), target.args) or 0)


def counts(session: Session, targets: Sequence[Prunable]) -> dict[str, int]:
    """Rows each record would lose (``--dry-run``): a row two targets match (old, and past
    the size cap) counted once."""
    merged: dict[tuple[str, str], Prunable] = {}
    for t in targets:
        known = merged.get((t.record, t.table))
        merged[(t.record, t.table)] = (
            t
            if known is None
            else Prunable(
                t.record,
                t.table,
                t.key,
                f"({known.where}) OR ({t.where})",
                known.args + t.args,
                t.size,
            )
        )
    found: dict[str, int] = {}
    for t in merged.values():
        found[t.record] = found.get(t.record, 0) + count(session, t)
    return found
