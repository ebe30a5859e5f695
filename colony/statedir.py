"""Where a colony keeps what it writes: one answer, for the daemon and every command.

A colony root is configuration (``colony.json``, the node folders, seeds, scripts); what the
daemon writes while it runs is state: ``colony.db`` (and its ``-wal``/``-shm``), the log, the
lease, and each cell's ``cell.db``. By default the state lives in the tree, beside the config,
as meclaw keeps it (a meclaw root is a colony root unchanged). ``meclaw --state-dir DIR`` puts
all of it under ``DIR`` instead, so the tree can be read-only or managed by git:

* ``DIR/colony.db``, ``DIR/log.jsonl``, ``DIR/colony.db-lease``;
* ``DIR/cells/<cell path>/cell.db`` for each cell that keeps a file (``/support/agent`` →
  ``DIR/cells/support/agent/cell.db``), its folder made when the cell first opens it.

Every reader of a colony's state (``meclaw dead-letters``, ``cells``, ``trace``, ``watch``…)
takes the same ``--state-dir`` and asks the same :class:`StateDir`, so a command finds what
the daemon wrote.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from colony.errors import ColonyError

__all__ = ["COLONY_DB", "LOG_FILE", "StateDir", "StateDirError"]

COLONY_DB = "colony.db"
LOG_FILE = "log.jsonl"
CELLS = "cells"
"""The folder of ``DIR`` that mirrors the cell paths."""
MODE = 0o700
"""A state folder the daemon makes is its user's alone: it holds transcripts and messages."""


class StateDirError(ColonyError):
    """``--state-dir`` names something the daemon cannot keep its state in."""

    code = "state_dir_unusable"


@dataclass(frozen=True, slots=True)
class StateDir:
    """The state locations of the colony at ``root``: in ``path`` (``root`` itself unless
    ``--state-dir`` says otherwise)."""

    root: Path
    """The colony root (the tree: configuration only, when :attr:`separate`)."""
    path: Path
    """The folder that holds the state."""

    @classmethod
    def of(cls, root: Path, state_dir: Path | None = None) -> StateDir:
        """The state of ``root``: under ``state_dir`` when given, else in the tree (also when
        ``state_dir`` is the root itself, however it is spelled)."""
        if state_dir is None or state_dir.resolve() == root.resolve():
            return cls(root, root)
        return cls(root, state_dir)

    @property
    def separate(self) -> bool:
        """Whether the state lives outside the tree (``--state-dir`` given)."""
        return self.path != self.root

    @property
    def colony_db(self) -> Path:
        return self.path / COLONY_DB

    @property
    def log_file(self) -> Path:
        """Where the JSON log goes when ``--log`` names no file."""
        return self.path / LOG_FILE

    @property
    def lease(self) -> Path:
        """The folder whose ``colony.db-lease`` decides who runs this state
        (:class:`colony.lease.RootLease` takes a folder)."""
        return self.path

    def cell(self, cell_path: str, folder: Path | None) -> Path | None:
        """Where the cell at ``cell_path`` keeps its own files (``cell.db``): its ``folder``
        in the tree by default, ``DIR/cells/<cell path>`` with a separate state folder. None
        for a cell without a folder (made in code: it keeps its state in memory)."""
        if folder is None or not self.separate:
            return folder
        parts = [part for part in cell_path.split("/") if part]
        if any(part in (".", "..") for part in parts):  # cannot come from a folder name
            raise ValueError(f"{cell_path!r} is not a cell path")
        return self.path.joinpath(CELLS, *parts)

    def prepare(self) -> None:
        """Make the state folder (mode 0700) when it is separate and missing, and check that
        it takes files; raises :class:`StateDirError` naming the folder and the fix. The
        tree's own folder is only asked (nothing is written into it here): a read-only tree
        needs ``--state-dir``, and the refusal says so."""
        if not self.separate:
            if not os.access(self.path, os.W_OK):
                raise StateDirError(
                    f"--root {self.path}: cannot write there, and without --state-dir the "
                    "colony's state (colony.db, log.jsonl, the lease, each cell's cell.db) is "
                    "kept in the tree; give --state-dir DIR to keep it elsewhere (the tree is "
                    "then only read)"
                )
            return
        where = f"--state-dir {self.path}"
        if self.path.exists() and not self.path.is_dir():
            raise StateDirError(f"{where}: not a folder; name a folder (it is made if missing)")
        try:
            self.path.mkdir(mode=MODE, parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=self.path, prefix=".meclaw-probe-"):
                pass
        except OSError as exc:
            raise StateDirError(
                f"{where}: cannot write there ({exc.strerror or exc}); give a folder this "
                f"user (uid {os.getuid()}) can write"
            ) from None
