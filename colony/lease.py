"""One daemon per colony root.

The lease is an exclusive ``flock`` on ``<root>/colony.db-lease``: the kernel drops it when the
holder dies, however it dies, so a crashed daemon never leaves a stale lock behind. The file
also names the holder, for the refusal message.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from pathlib import Path
from types import TracebackType
from typing import IO

from colony.errors import ColonyError

LEASE_NAME = "colony.db-lease"


class LeaseHeldError(ColonyError):
    code = "root_leased"


def _holder(text: str) -> str:
    """``pid N`` from the lease file's text; the file is empty for the instant between the
    holder taking the lock and writing its pid."""
    with contextlib.suppress(ValueError, KeyError, TypeError):
        pid = json.loads(text)["pid"]
        if isinstance(pid, int):
            return f"pid {pid}"
    return "pid unknown: the holder is still starting"


class RootLease:
    """Hold the root for the life of a ``with`` block."""

    def __init__(self, root: Path) -> None:
        self.path = root / LEASE_NAME
        self._file: IO[str] | None = None

    def acquire(self) -> None:
        handle = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 (held until release)
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip()
            handle.close()
            raise LeaseHeldError(
                f"another meclaw is already running on this root ({self.path.parent}, "
                f"{_holder(holder)}); stop it first: one daemon per colony root"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "started_at": int(time.time())}))
        handle.flush()
        self._file = handle

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()
            self._file = None

    def __enter__(self) -> RootLease:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
