"""Copying ``colony.db``'s write-ahead log back into the file, on a thread of its own.

In WAL mode a commit appends pages to ``colony.db-wal``; a checkpoint copies them back into the
database and syncs both files. SQLite runs one inside a commit once the WAL holds 1,000 pages,
so every few hundred hand-offs one of them paid for the copy and two ``fsync`` calls: measured
on the writer, a third of the average commit. Here a :class:`Checkpointer` runs a ``PASSIVE``
checkpoint (it never blocks the writer, nor waits for it) every ``PERIOD_S`` on its own
connection, and the writer's connection keeps SQLite's own as a backstop only, at
``BACKSTOP_PAGES`` (see :func:`colony.persist.schema.open_for_writing`). A checkpoint with
nothing to copy returns at once, so an idle colony costs one wake-up per period.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from pathlib import Path

from colony.persist.schema import connect

PERIOD_S = 0.1
"""Pause between two checkpoints."""


class Checkpointer:
    """A thread that checkpoints ``colony.db`` every ``period_s`` until :meth:`close`."""

    def __init__(self, path: Path, period_s: float = PERIOD_S) -> None:
        self._path = path
        self._period_s = period_s
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="colony-db-checkpoint", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            conn = connect(str(self._path))
        except sqlite3.Error:
            return  # the writer's own backstop checkpoints, and the writer reports the file
        with contextlib.closing(conn):
            while not self._stopping.wait(self._period_s):
                # The storage in trouble is the writer's to report; try again next period.
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def close(self) -> None:
        """Stop the thread and close its connection (before the writer closes its own, so the
        writer's, the last, checkpoints what is left and removes the WAL)."""
        self._stopping.set()
        self._thread.join()
