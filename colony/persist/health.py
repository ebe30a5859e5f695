"""``colony.db``'s health as the event loop sees it: the writer's reports turned into log
lines (and a stderr line for what an operator must see even when the log is on the full disk),
and the file checked on a timer for having been deleted or replaced under the daemon."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import Any

from colony.observability import Logger
from colony.persist.db import ColonyDb
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


async def watch_file(db: ColonyDb, log: Logger) -> None:
    """Notice ``colony.db`` deleted or replaced under the running daemon; say it once."""
    while True:
        await asyncio.sleep(CHECK_S)
        lost = db.check_file()
        if lost is not None:
            log.error("colony_db_lost", error=lost)
            say(lost)
