"""Operator commands that work on ``colony.db`` directly: ``meclaw dead-letters`` (list,
follow, show), ``meclaw trace`` (the hop tree of a trace) and ``meclaw cells`` (list, revive).
Reads work beside a running daemon; the one write here (reviving a cell of a stopped colony)
takes the root lease first, so it never races a daemon."""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from colony.lease import RootLease
from colony.persist.db import (
    DeadLetterRow,
    MessageLogEntry,
    RegistryRow,
    read_dead_letters,
    read_messages,
    read_registry,
    revive_in_registry,
)


def _when(seconds: int) -> str:
    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def dead_letter_line(row: DeadLetterRow) -> str:
    """``time  code  sender → target  trace`` — one line an operator can grep."""
    return (
        f"{_when(row.created_at)}  #{row.id}  {row.error_code:<28} "
        f"{row.sender_path} → {row.resolved_target}  trace {row.trace_id}"
    )


def dead_letter_json(row: DeadLetterRow) -> str:
    return json.dumps(
        {
            "id": row.id,
            "created_at": row.created_at,
            "error_code": row.error_code,
            "sender_path": row.sender_path,
            "original_target": row.original_target,
            "resolved_target": row.resolved_target,
            "trace_id": row.trace_id,
            "message_id": row.message_id,
            "detail": row.detail,
        },
        ensure_ascii=False,
    )


def list_dead_letters(
    db: Path,
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
        if db.exists():
            for row in read_dead_letters(db, error_code, since):
                if row.id > last:
                    write(render(row))
                    last = row.id
        if not follow or stop():
            return last
        time.sleep(poll_s)


def trace_lines(db: Path, trace_id: str) -> list[str]:
    """The hop tree of a trace: each message under its parent, with the TTL left at each hop."""
    rows = read_messages(db, trace_id=trace_id, limit=100_000, oldest_first=True)
    children: dict[str | None, list[MessageLogEntry]] = {}
    ids = {r.id for r in rows}
    for row in rows:
        parent = row.parent_message_id if row.parent_message_id in ids else None
        children.setdefault(parent, []).append(row)
    out: list[str] = []

    def walk(parent: str | None, depth: int) -> None:
        for row in children.get(parent, []):
            hop = row.headers.get("hop", {}) if isinstance(row.headers, dict) else {}
            extra = ", ".join(f"{k}={_short(v)}" for k, v in list(hop.items())[:4])
            out.append(
                f"{'  ' * depth}{row.from_path} → {row.to_path}  ttl {row.ttl}"
                + (f"  [{extra}]" if extra else "")
            )
            walk(row.id, depth + 1)

    walk(None, 0)
    return out


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value
    return text if len(text) <= 24 else text[:21] + "…"


# -- cells ------------------------------------------------------------------------------------


class UnknownCellError(LookupError):
    """The registry has no cell at this path."""


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


def revive_offline(root: Path, path: str) -> Revival:
    """Revive a failed cell of a stopped colony (raises :class:`colony.lease.LeaseHeldError`
    when a daemon runs on ``root``: revive through its API instead)."""
    db = root / "colony.db"
    if not db.exists():
        raise UnknownCellError(f"{root} has no colony.db: no daemon has run there yet")
    with RootLease(root):
        before = revive_in_registry(db, path)
    if before is None:
        known = ", ".join(read_registry(db)) or "none"
        raise UnknownCellError(f"no cell {path} in the registry of {root} (cells: {known})")
    return Revival(path, before == "failed", before)
