"""``meclaw backup --root DIR OUT``: a consistent copy of ``colony.db`` while the daemon runs.

Copying the file with ``cp`` while a daemon writes is not a backup: ``colony.db`` is in WAL
mode, so committed rows may still sit in ``colony.db-wal``, and a copy taken mid-checkpoint
can be torn. SQLite's online backup API (``sqlite3.Connection.backup``) copies the database as
one reader sees it. It runs in one step: in WAL mode a reader never blocks the writer, so the
copy is one snapshot of the committed state and the daemon goes on routing meanwhile (a
stepwise backup would start over each time the daemon commits between steps).

The copy is written beside ``OUT`` under a temporary name, checked (``PRAGMA
integrity_check``), flushed to disk and only then renamed to ``OUT``: an ``OUT`` that exists is
a whole, checked copy. It is a single file (rollback journal mode, no ``-wal`` beside it); the
daemon switches it back to WAL when it boots on it.

A cluster keeps its state in PostgreSQL, not in ``colony.db``: ``pg_dump`` backs it up, and
this command says so. Cells that keep state of their own (an ``llm`` cell's ``cell.db``, a
store cell's database) are not in ``colony.db``; docs/deploy.md says how to copy those.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from colony.errors import ColonyError
from colony.statedir import StateDir

__all__ = ["BackupDone", "BackupRefused", "backup_colony_db", "colony_db"]

BUSY_TIMEOUT_MS = 10_000
"""How long the copy waits for a lock the daemon holds (a checkpoint) before giving up."""


class BackupRefused(ColonyError):
    """``meclaw backup`` cannot copy this colony's state (no colony.db, a cluster, OUT exists,
    or the copy failed its check)."""

    code = "backup_refused"


@dataclass(frozen=True, slots=True)
class BackupDone:
    source: Path
    target: Path
    pages: int


def colony_db(root: Path, state_dir: Path | None = None) -> Path:
    """Where the colony on ``root`` keeps ``colony.db`` (in ``state_dir`` when given:
    ``--state-dir``): the one place this module asks."""
    return StateDir.of(root, state_dir).colony_db


def _refuse_a_cluster(root: Path) -> None:
    from colony.config.loader import cluster_of

    if cluster_of(root) is not None:
        raise BackupRefused(
            f"{root}/colony.json has a cluster block: the colony's state is in its PostgreSQL "
            "database, not in colony.db; back it up with pg_dump (docs/deploy.md#backups)"
        )


def backup_colony_db(root: Path, out: Path, state_dir: Path | None = None) -> BackupDone:
    """Copy ``root``'s ``colony.db`` (kept in ``state_dir`` when given) to ``out`` (a new
    file) while a daemon may be writing it."""
    _refuse_a_cluster(root)
    source = colony_db(root, state_dir)
    if not source.is_file():
        raise BackupRefused(f"no colony.db at {source} (has a daemon run on --root {root}?)")
    if out.exists():
        raise BackupRefused(f"{out} exists; name a new file (a backup never overwrites one)")
    if not out.parent.is_dir():
        raise BackupRefused(f"{out.parent} is not a folder; create it first")
    partial = out.with_name(f".{out.name}.partial-{os.getpid()}")
    try:
        # The copy holds every message and transcript: readable by its owner only, as the
        # state folder is (colony.statedir).
        os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        pages = _copy(source, partial)
        _place(partial, out)
    except FileExistsError:
        raise BackupRefused(
            f"{out} exists; name a new file (a backup never overwrites one)"
        ) from None
    except OSError as exc:
        raise BackupRefused(
            f"cannot write {exc.filename or out}: {exc.strerror or exc}; name a new file in a "
            "folder this user can write, with room for a copy of colony.db"
        ) from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
    return BackupDone(source=source, target=out, pages=pages)


def _place(partial: Path, out: Path) -> None:
    """Give the finished copy its name without replacing a file that appeared meanwhile: a
    hard link fails if ``out`` exists (a rename would not). A filesystem without hard links
    gets the rename, after one more look."""
    try:
        os.link(partial, out)
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        if out.exists():
            raise FileExistsError(errno.EEXIST, "exists", str(out)) from None
        os.replace(partial, out)


def _copy(source: Path, target: Path) -> int:
    """The online backup of ``source`` into ``target``, checked and on disk; its page count."""
    src = sqlite3.connect(f"{source.resolve().as_uri()}?mode=ro", uri=True)
    try:
        dst = sqlite3.connect(target)
    except sqlite3.Error as exc:
        src.close()
        raise BackupRefused(f"cannot write {target}: {exc}") from None
    try:
        src.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        try:
            src.backup(dst)  # one step: one snapshot (see the module's docstring)
        except sqlite3.Error as exc:
            # Either side may have failed: a locked or corrupt source, or a full disk.
            raise BackupRefused(f"could not copy {source} to {target}: {exc}") from None
        dst.execute("PRAGMA journal_mode = DELETE")
        check = [row[0] for row in dst.execute("PRAGMA integrity_check")]
        if check != ["ok"]:
            raise BackupRefused(f"the copy of {source} failed its integrity check: {check[:5]}")
        pages = int(dst.execute("PRAGMA page_count").fetchone()[0])
    finally:
        dst.close()
        src.close()
    with open(target, "rb") as written:
        os.fsync(written.fileno())
    return pages
