"""``colony.db``'s write-ahead log is copied back into the file by a thread of its own, while
the writer keeps committing and long before the writer's own threshold (persist/checkpoint.py)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from colony.effects import LogRow
from colony.envelope import source_message
from colony.persist.checkpoint import PERIOD_S
from colony.persist.db import ColonyDb
from colony.persist.items import Unit
from colony.persist.schema import BACKSTOP_PAGES

PAGE = 4096


async def test_the_wal_is_checkpointed_by_its_own_thread_below_the_writers_threshold(
    tmp_path: Path,
) -> None:
    path = tmp_path / "colony.db"
    db = ColonyDb(path)
    try:
        empty = path.stat().st_size
        pages = 300  # far below the writer's own checkpoint
        assert pages < BACKSTOP_PAGES
        for _ in range(pages // 10):
            logs = [
                LogRow(source_message("/", {"text": "x" * PAGE}), "@external", "/", 63)
                for _ in range(10)
            ]
            await db.commit(Unit(logs=logs))
        deadline = time.monotonic() + 20 * PERIOD_S + 5
        while path.stat().st_size < empty + pages * PAGE:
            assert time.monotonic() < deadline, "the WAL was never copied back"
            await asyncio.sleep(PERIOD_S)
        assert len(await db.message_log()) == pages
    finally:
        db.close()
    assert not path.with_name("colony.db-wal").exists()  # the last connection removed it
