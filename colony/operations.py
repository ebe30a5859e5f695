"""Operator commands that work on the colony's database directly: ``meclaw dead-letters``
(list, follow, show) and ``meclaw cells`` (list, revive); ``meclaw trace`` is
:mod:`colony.traceview`. The reads take a :class:`~colony.persist.source.Source`
(``colony.db`` or the cluster database) and work beside running daemons; the one write here
(reviving a cell of a stopped colony) is on ``colony.db`` and takes the root lease first, so
it never races a daemon."""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from colony.errors import ColonyError
from colony.lease import RootLease
from colony.persist.records import (
    DeadLetterRow,
    RegistryRow,
    read_dead_letters_after,
    read_registry,
    revive_in_registry,
)
from colony.persist.source import Source
from colony.statedir import StateDir


def _when(seconds: int) -> str:
    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def dead_letter_line(row: DeadLetterRow) -> str:
    """``time  code  sender → target  trace`` — one line an operator can grep."""
    replayed = f"  replayed as {row.replayed_as}" if row.replayed_as is not None else ""
    return (
        f"{_when(row.created_at)}  #{row.id}  {row.error_code:<28} "
        f"{row.sender_path} → {row.resolved_target}  trace {row.trace_id}{replayed}"
    )


def dead_letter_json(row: DeadLetterRow) -> str:
    return json.dumps(row.fields(), ensure_ascii=False)


def dead_letter_report(row: DeadLetterRow, *, as_json: bool = False) -> str:
    """One dead letter in full for ``meclaw dead-letters show``: what, why, when, whether it
    was replayed, and the stored message (headers and body) as indented JSON."""
    message = row.message.to_json()
    if as_json:
        return json.dumps({**row.fields(), "message": message}, ensure_ascii=False)
    replayed = (
        f"{_when(row.replayed_at)} as message {row.replayed_as}"
        if row.replayed_at is not None
        else "never (meclaw dead-letters replay ID)"
    )
    lines = [
        f"dead letter #{row.id}  {row.error_code}",
        f"  died      {_when(row.created_at)} (the message's created_at)",
        f"  route     {row.sender_path} → {row.original_target} (resolved {row.resolved_target})",
        f"  why       {row.detail or '(no detail recorded)'}",
        f"  trace     {row.trace_id}  (meclaw trace {row.trace_id})",
        f"  message   {row.message_id or '(its id is unreadable)'}",
        f"  replayed  {replayed}",
        "  stored message:",
    ]
    body = json.dumps(message, ensure_ascii=False, indent=2)
    lines += [f"    {line}" for line in body.splitlines()]
    return "\n".join(lines)


def list_dead_letters(
    db: Source,
    *,
    error_code: str | None,
    since: int | None,
    as_json: bool,
    follow: bool,
    write: Callable[[str], None],
    poll_s: float = 0.2,
    stop: Callable[[], bool] = lambda: False,
) -> int:
    """Print matching dead letters; with ``follow`` keep printing new ones until ``stop()``."""
    last = 0
    render = dead_letter_json if as_json else dead_letter_line
    while True:
        if db.exists():  # only the letters not printed yet, and never a body
            for row in read_dead_letters_after(db, last, error_code=error_code, since=since):
                write(render(row))
                last = row.id
        if not follow or stop():
            return last
        time.sleep(poll_s)


# -- cells ------------------------------------------------------------------------------------


class UnknownCellError(ColonyError, LookupError):
    """The registry has no cell at this path."""

    code = "unknown_cell"


@dataclass(frozen=True, slots=True)
class Revival:
    path: str
    revived: bool
    """False when the cell was not failed (nothing to do)."""
    status: str
    """The status before reviving."""


def cell_line(row: RegistryRow) -> str:
    """``path  type  status  id`` — one line per registry row."""
    return f"{row.path:<32} {row.cell_type:<12} {row.status:<8}  {row.cell_id}"


def cell_json(row: RegistryRow) -> str:
    return json.dumps(
        {
            "path": row.path,
            "cell_type": row.cell_type,
            "status": row.status,
            "cell_id": row.cell_id,
            "updated_at": row.updated_at,
        },
        ensure_ascii=False,
    )


def revive_offline(root: Path, path: str, state_dir: Path | None = None) -> Revival:
    """Revive a failed cell of a stopped colony (raises :class:`colony.lease.LeaseHeldError`
    when a daemon runs on ``root``: revive through its API instead). ``state_dir``: the
    daemon's ``--state-dir`` (None: the state is in the tree)."""
    state = StateDir.of(root, state_dir)
    db = Source.sqlite(state.colony_db)
    if not db.exists():
        raise UnknownCellError(f"{state.path} has no colony.db: no daemon has run there yet")
    with RootLease(state.lease):
        before = revive_in_registry(db, path)
    if before is None:
        known = ", ".join(read_registry(db)) or "none"
        raise UnknownCellError(f"no cell {path} in the registry of {root} (cells: {known})")
    return Revival(path, before == "failed", before)
