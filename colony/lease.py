"""Who may run a daemon on a colony root: one alone, or the members of a cluster.

The lease is a ``flock`` on ``colony.db-lease`` beside ``colony.db``, in the colony's state
folder (:attr:`colony.statedir.StateDir.lease`: the root itself unless ``--state-dir`` moves
the state out of the tree; every function here takes that folder): the kernel drops it when the
holder dies, however it dies, so a crashed daemon never leaves a stale lock behind.

* Without a ``cluster`` block a daemon takes it **exclusively**: one daemon per root. The
  file names the holder (its pid, for the refusal message) and, once it serves one, the URL
  of its HTTP API, so an operator command given only ``--root`` can reach the running daemon.
* With one, a member takes it **shared**, so any number of members run beside each other and
  a daemon without the block is still refused while one runs (and a member is refused beside
  such a daemon). Ownership of the colony's work is the cluster's own business (leases in
  PostgreSQL); this file only keeps the two shapes apart. A member also takes an exclusive
  lock on ``colony.db-lease.<node>``: two daemons of one name on one root are refused, and
  that file names the member (pid, node, API URL) for :func:`holder`. A member deletes its
  file when it stops; the file of a member that died is deleted by the next member to start.
  Deleting is safe because only a holder of a file's lock deletes it, and every locker checks
  that the name still leads to the file it locked (a classic race otherwise gives two holders
  one name).
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
MEMBER_PREFIX = LEASE_NAME + "."
"""A cluster member's own file: ``colony.db-lease.<node>``."""


class LeaseHeldError(ColonyError):
    code = "root_leased"


@dataclass(frozen=True, slots=True)
class Holder:
    """A daemon running on a root."""

    pid: int | None
    api: str | None
    """Its HTTP API's URL, None when it serves none."""
    node: str | None = None
    """Its node name when it is a cluster member; None for a daemon running alone."""


def _parse(text: str) -> dict[str, Any]:
    with contextlib.suppress(ValueError):
        doc = json.loads(text)
        if isinstance(doc, dict):
            return doc
    return {}


def _holder_of(text: str) -> Holder:
    doc = _parse(text)
    pid, api, node = doc.get("pid"), doc.get("api"), doc.get("node")
    return Holder(
        pid if isinstance(pid, int) else None,
        api if isinstance(api, str) else None,
        node if isinstance(node, str) else None,
    )


def _held(path: Path) -> Holder | None:
    """What the file at ``path`` says, when someone holds an exclusive lock on it."""
    try:
        handle = open(path, encoding="utf-8")  # noqa: SIM115 (closed below)
    except (FileNotFoundError, IsADirectoryError):
        return None
    with handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder_of(handle.read())
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        return None


def members(root: Path) -> list[Holder]:
    """The cluster members running on ``root``, by node name."""
    found = []
    for path in sorted(root.glob(MEMBER_PREFIX + "*")):
        member = _held(path)
        if member is not None:
            found.append(member)
    return found


def holder(root: Path) -> Holder | None:
    """The daemon running on ``root``, or None when none is: the one running alone, or else
    a cluster member (one that serves an API first; any member reaches the whole colony)."""
    alone = _held(root / LEASE_NAME)
    if alone is not None:
        return alone
    running = members(root)
    return next((m for m in running if m.api is not None), running[0] if running else None)


def _holder(text: str) -> str:
    """``pid N`` from the lease file's text; the file is empty for the instant between the
    holder taking the lock and writing its pid."""
    with contextlib.suppress(ValueError, KeyError, TypeError):
        pid = json.loads(text)["pid"]
        if isinstance(pid, int):
            return f"pid {pid}"
    return "pid unknown: the holder is still starting"


def _shared_holders(handle: IO[str]) -> bool:
    """Whether the lock an exclusive request found is shared (cluster members hold it)."""
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    return True


def _named(running: list[Holder]) -> str:
    names = ", ".join(
        f"{m.node} (pid {m.pid})" if m.pid is not None else str(m.node) for m in running
    )
    return names or "starting"


class RootLease:
    """Hold the root for the life of a ``with`` block: alone, or as cluster member
    ``member``."""

    def __init__(self, root: Path, *, member: str | None = None) -> None:
        self.path = root / LEASE_NAME
        self.member = member
        """The node name of a cluster member (``meclaw --node``); None: the daemon runs alone."""
        self._root: IO[str] | None = None
        self._file: IO[str] | None = None
        """Where this holder writes its pid and API: the root's file, or its member file."""
        self._own: Path | None = None
        """A member's own file."""

    def acquire(self) -> None:
        handle = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 (held until release)
        if self.member is None:
            self._acquire_alone(handle)
        else:
            self._acquire_member(handle, self.member)

    def _acquire_alone(self, handle: IO[str]) -> None:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            text = handle.read().strip()
            cluster = _shared_holders(handle)
            handle.close()
            root = self.path.parent
            if cluster:
                raise LeaseHeldError(
                    f"cluster members are running on this root ({root}: "
                    f"{_named(members(root))}); a daemon without colony.json's cluster block "
                    "cannot run beside them: stop them, or start this one with the same "
                    "cluster block"
                ) from None
            raise LeaseHeldError(
                f"another meclaw is already running on this root ({root}, {_holder(text)}); "
                "stop it first: one daemon per colony root"
            ) from None
        self._root = self._file = handle
        self._write({"pid": os.getpid(), "started_at": int(time.time())})

    def _acquire_member(self, handle: IO[str], name: str) -> None:
        root = self.path.parent
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            text = handle.read().strip()
            handle.close()
            raise LeaseHeldError(
                f"a meclaw without a cluster block is already running on this root ({root}, "
                f"{_holder(text)}); stop it first: daemons share a root only when each runs "
                "with colony.json's cluster block"
            ) from None
        own = root / (MEMBER_PREFIX + name)
        try:
            mine = _lock_file(own)
        except BlockingIOError:
            handle.close()
            running = _held(own)
            pid = f"pid {running.pid}" if running and running.pid is not None else "starting"
            raise LeaseHeldError(
                f"node {name} is already running on this root ({root}, {pid}); give each "
                "daemon on a root its own --node"
            ) from None
        self._root, self._file, self._own = handle, mine, own
        self._write({"pid": os.getpid(), "node": name, "started_at": int(time.time())})
        _sweep(root, keep=own)

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
        if self._file is not None and self._own is not None:
            # Deleted while still locked: nobody can take the name between the two steps.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._own)
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()
        if self._root is not None:
            fcntl.flock(self._root.fileno(), fcntl.LOCK_UN)
            self._root.close()
        self._root = self._file = self._own = None

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


def _same_file(path: Path, handle: IO[str]) -> bool:
    """Whether ``path`` still names the file ``handle`` has open (not deleted, not replaced)."""
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    opened = os.fstat(handle.fileno())
    return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)


def _lock_file(path: Path) -> IO[str]:
    """``path`` opened and exclusively locked; raises BlockingIOError when someone holds it.
    A file deleted between the open and the lock is opened again."""
    while True:
        handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 (returned locked)
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise
        if _same_file(path, handle):
            return handle
        handle.close()


def _sweep(root: Path, *, keep: Path) -> None:
    """Delete the member files nobody holds (their members died without stopping)."""
    for path in root.glob(MEMBER_PREFIX + "*"):
        if path == keep:
            continue
        try:
            handle = open(path, encoding="utf-8")  # noqa: SIM115 (closed below)
        except OSError:
            continue
        with handle:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live member
            if _same_file(path, handle):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
