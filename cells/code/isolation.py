"""What a cell's process may see of the daemon: an allow-listed environment, and nothing else.

Cells run scripts and shell commands as the daemon's user, and the daemon holds secrets: API
keys and tokens in its environment, whatever the operator exported. Three rules keep them:

* A job's environment is built from an **allow-list** (:data:`PASSED_VARIABLES`: ``PATH``,
  ``HOME``, the locale, ``TZ``, ``TMPDIR``…) plus exactly what the cell's ``params.env`` passes.
  A name-based scrub cannot work: ``AWS_ACCESS_KEY_ID``, ``DATABASE_URL`` with a password in it
  and ``SSH_AUTH_SOCK`` look like nothing.
* Jobs are started by the zygote (``zygote.py``), a helper started with that allow-list, never
  by the daemon: the parent a job can see holds nothing.
* The daemon itself is **sealed** (:func:`seal_daemon`) before its first helper starts: the
  block ``/proc/<daemon>/environ`` shows (the environment it was started with, which Python has
  long since copied into ``os.environ``) is zeroed, and the process is made non-dumpable, so
  another process of the same user can read neither its ``environ`` nor its memory (root, with
  ``CAP_SYS_PTRACE``, still can read its memory: run the daemon as an ordinary user).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "PASSED_PREFIXES",
    "PASSED_VARIABLES",
    "job_environment",
    "remove_directory",
    "seal_daemon",
    "working_directory",
]

PASSED_VARIABLES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "TERM",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONIOENCODING",
        "PYTHONUTF8",
        "PYTHONDONTWRITEBYTECODE",
        "NODE_PATH",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
    }
)
"""Variables a job gets from the daemon's environment by default (when they are set)."""

PASSED_PREFIXES = ("LC_",)
"""Prefixes of further variables passed by default (the locale categories)."""


def job_environment(
    extra: Mapping[str, str] | None = None,
    source: Mapping[str, str] | None = None,
    *,
    tree_read_only: bool = False,
) -> dict[str, str]:
    """The environment of a job: the allow-listed variables of ``source`` (the daemon's
    environment by default), then ``extra`` (a cell's ``params.env``) on top.
    ``tree_read_only`` (the colony's state is outside the tree, ``--state-dir``): Python
    writes no bytecode caches beside the modules a script imports from the tree
    (``PYTHONDONTWRITEBYTECODE=1``, unless ``extra`` says otherwise)."""
    environ = os.environ if source is None else source
    env = {
        name: value
        for name, value in environ.items()
        if name in PASSED_VARIABLES or name.startswith(PASSED_PREFIXES)
    }
    if tree_read_only:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    if extra:
        env.update(extra)
    return env


_PR_SET_DUMPABLE = 4
_sealed = False
_lock = threading.Lock()


def seal_daemon() -> None:
    """Make this process's start-up environment and memory unreadable to other processes.

    Idempotent; Linux only (elsewhere nothing happens). Each variable is first given a heap
    copy in the C library's ``environ`` (``os.putenv``), so code that calls ``getenv`` later
    still finds it; only then is the original block, the one ``/proc/PID/environ`` reads, zeroed.
    """
    global _sealed
    with _lock:
        if _sealed or not sys.platform.startswith("linux"):
            return
        _sealed = True
        with contextlib.suppress(OSError, ValueError, IndexError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
            with open("/proc/self/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
            # fields[0] is field 3 of proc(5); env_start and env_end are fields 50 and 51.
            start, end = int(fields[47]), int(fields[48])
            if not 0 < start < end:
                return
            for name, value in os.environ.items():
                os.putenv(name, value)
            ctypes.memset(start, 0, end - start)


def working_directory(folder: Path | None) -> tuple[str, Path | None]:
    """``(directory, temporary)``: where a cell's processes run — the cell's own folder, never
    the daemon's working directory (where its ``.env`` lies). A cell made in code has no
    folder: it gets a private temporary directory, returned as ``temporary`` too so the cell
    removes it when it closes."""
    if folder is not None:
        return str(folder), None
    temporary = Path(tempfile.mkdtemp(prefix="meclaw-cell-"))
    return str(temporary), temporary


def remove_directory(path: Path | None) -> None:
    """Remove a temporary working directory from :func:`working_directory` (if any)."""
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)
