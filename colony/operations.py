"""Operator commands that read ``colony.db`` directly (a running or a stopped daemon):
``meclaw dead-letters`` (list, follow) and ``meclaw trace`` (the hop tree of a trace)."""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from colony.persist.db import DeadLetterRow, MessageLogEntry, read_dead_letters, read_messages


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
