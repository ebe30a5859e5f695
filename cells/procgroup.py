"""What the cells that run other programs (code, mcp over stdio, subcolony) share about a
child process: its signal's name for an error text, and a signal to its whole process group
(each is started in its own session, so what it started itself goes with it)."""

from __future__ import annotations

import contextlib
import os
import signal

__all__ = ["signal_group", "signal_name"]


def signal_name(number: int) -> str:
    """``SIGKILL`` for 9; the number itself for one this platform does not name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to the process group ``pgid``; a group already gone (or no longer ours)
    is not an error: the caller is ending it anyway."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
