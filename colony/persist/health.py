"""``colony.db``'s health as the event loop sees it: the writer's reports turned into log
lines (and a stderr line for what an operator must see even when the log is on the full disk),
and the file checked on a timer for having been deleted or replaced under the daemon."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import Any

from colony.observability import Logger
from colony.persist.backend import Backend
from colony.persist.db import DbStatistics
from colony.persist.writer import Event

CHECK_S = 1.0
"""How often the file is compared with the one opened at boot (device and inode)."""


def say(text: str) -> None:
    """One ``meclaw:`` line on stderr; never raises."""
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"meclaw: {text}\n")
        sys.stderr.flush()


def reporter(log: Logger) -> Event:
    """What the writer calls (on its own thread): the event is logged on the running loop."""
    loop = asyncio.get_running_loop()

    def report(event: str, fields: dict[str, Any]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody listens
            loop.call_soon_threadsafe(_logged, log, event, fields)

    return report


def _logged(log: Logger, event: str, fields: dict[str, Any]) -> None:
    if event == "colony_db_recovered":
        log.warning(event, **fields)
        say(f"colony.db takes writes again (after {fields.get('after_s')} s)")
        return
    log.error(event, **fields)
    if event == "colony_db_unavailable":
        say(f"colony.db cannot be written ({fields.get('error')}); ingress is refused")


async def watch_file(db: Backend, log: Logger) -> None:
    """Notice ``colony.db`` deleted or replaced under the running daemon; say it once."""
    while True:
        await asyncio.sleep(CHECK_S)
        lost = db.check_file()
        if lost is not None:
            log.error("colony_db_lost", error=lost)
            say(lost)


def shutdown_report(log: Logger, stats: DbStatistics, queued: int, durable: bool) -> None:
    """What a stopping colony leaves behind: queued messages kept in the journal for the next
    boot (at-least-once) or dropped (at-most-once), and writes the storage refused."""
    if queued and durable:
        log.info(
            "shutdown_kept_messages",
            queued=queued,
            detail="queued messages stay in the journal and are delivered at the next boot",
        )
    elif queued:
        log.warning("shutdown_dropped_messages", queued=queued)
    if stats.unavailable is not None:
        log.error(
            "shutdown_storage_unavailable",
            error=stats.unavailable,
            kept=stats.kept,
            detail="colony.db could not be written at shutdown; the writer tries once more, "
            "and handled messages whose effects were not committed run again at the next "
            "boot",
        )
