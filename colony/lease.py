"""One daemon per colony root.

The lease is an exclusive ``flock`` on ``<root>/colony.db-lease``: the kernel drops it when the
holder dies, however it dies, so a crashed daemon never leaves a stale lock behind. The file
also names the holder (its pid, for the refusal message) and, once it serves one, the URL of
its HTTP API, so an operator command given only ``--root`` can reach the running daemon.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from colony.errors import ColonyError

LEASE_NAME = "colony.db-lease"


class LeaseHeldError(ColonyError):
    code = "root_leased"


@dataclass(frozen=True, slots=True)
class Holder:
    """The daemon holding a root's lease."""

    pid: int | None
    api: str | None
    """Its HTTP API's URL, None when it serves none."""


def _parse(text: str) -> dict[str, Any]:
    with contextlib.suppress(ValueError):
        doc = json.loads(text)
        if isinstance(doc, dict):
            return doc
    return {}


def holder(root: Path) -> Holder | None:
    """The daemon running on ``root``, or None when none is (the lease is free)."""
    path = root / LEASE_NAME
    try:
        handle = open(path, encoding="utf-8")  # noqa: SIM115 (closed below)
    except FileNotFoundError:
        return None
    with handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            doc = _parse(handle.read())
            pid, api = doc.get("pid"), doc.get("api")
            return Holder(
                pid if isinstance(pid, int) else None, api if isinstance(api, str) else None
            )
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        return None


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
        self._file = handle
        self._write({"pid": os.getpid(), "started_at": int(time.time())})

    def announce(self, *, api: str) -> None:
        """Record the URL of the HTTP API this holder serves."""
        if self._file is not None:
            self._file.seek(0)
            doc = _parse(self._file.read())
            self._write({**doc, "api": api})

    def _write(self, doc: dict[str, Any]) -> None:
        assert self._file is not None
        self._file.seek(0)
        self._file.truncate()
        self._file.write(json.dumps(doc))
        self._file.flush()

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
