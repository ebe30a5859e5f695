"""``meclaw prune --root DIR [--dry-run]``: prune the record now, by ``colony.json`` retention.

On a stopped colony it opens the database directly. On a running one it works beside the
daemon: each batch is one short transaction on its own connection, and SQLite serialises it
with the daemon's writer (WAL, a 30 s busy timeout), so the daemon's commits wait at most one
batch; the daemon's own pruner does the same work every few minutes anyway. ``--dry-run``
counts what would go and deletes nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from colony.config.diagnostics import Diagnostic, has_errors
from colony.config.loader import colony_config_of
from colony.config.models import RetentionConfig
from colony.errors import ColonyError
from colony.ids import now_ms
from colony.persist import prune
from colony.persist.source import Source
from colony.retention import RECORDS, on_connection, policy_of, prune_round, report


class PruneError(ColonyError):
    """The record cannot be pruned as asked: the message says why and what to do."""

    code = "prune_refused"


@dataclass(frozen=True, slots=True)
class Pruned:
    """What a run deleted (or, dry, would delete), per record."""

    rows: dict[str, int]
    batches: int
    dry_run: bool


def retention_of(root: Path) -> RetentionConfig:
    """``<root>/colony.json`` ``retention`` (the defaults without the file)."""
    problems: list[Diagnostic] = []
    config = colony_config_of(root, problems)
    if config is None or has_errors(problems):
        raise PruneError(
            f"{root / 'colony.json'} is invalid, so its retention is unknown; run "
            f"`meclaw --validate --root {root}` and fix what it names"
        )
    return config.retention


def run(
    source: Source,
    retention: RetentionConfig,
    *,
    dry_run: bool = False,
    now: int | None = None,
) -> Pruned:
    """Prune ``source`` (or count, ``dry_run``) by ``retention``, blocking."""
    policy = policy_of(retention)
    at = now_ms() if now is None else now
    if dry_run:
        with source.connect() as session:
            targets = prune.plan(session, source.dialect.name, policy, at)
            rows = prune.counts(session, targets)
        return Pruned({r: rows.get(r, 0) for r in RECORDS}, 0, True)
    counts, batches = asyncio.run(
        prune_round(source, policy, on_connection(source), pause=0.0, now=at)
    )
    return Pruned(report(counts), batches, False)


def lines(result: Pruned, source: Source, retention: RetentionConfig) -> list[str]:
    """What the command prints: one line per record, then what the limits are."""
    verb = "would be deleted" if result.dry_run else "deleted"
    width = max(len(r) for r in result.rows)
    out = [f"{record:<{width}}  {n:>9,} rows {verb}" for record, n in result.rows.items()]
    limits = (
        f"message_log_days {retention.message_log_days}, "
        f"message_log_max_mb {retention.message_log_max_mb}, "
        f"dead_letters_days {retention.dead_letters_days} (0: kept forever)"
    )
    done = "dry run, nothing deleted" if result.dry_run else f"{result.batches} batches"
    out.append(f"{source}: {done}; retention: {limits}")
    return out


def command(root: Path, source: Source, *, dry_run: bool, write: Callable[[str], None]) -> None:
    """The whole command, given the database it prunes (:func:`colony.cli` finds it)."""
    retention = retention_of(root)
    try:
        result = run(source, retention, dry_run=dry_run)
    except source.errors as exc:
        raise PruneError(
            f"{source} could not be pruned ({type(exc).__name__}: {exc}); what was deleted "
            "before stays deleted, and running the command again carries on"
        ) from None
    for line in lines(result, source, retention):
        write(line)
