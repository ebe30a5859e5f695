"""Watching processes from a test: is one still alive, and waiting (bounded) for a condition."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path


def alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie has ended; only its parent has not reaped it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


async def eventually(check: Callable[[], bool], within: float = 3.0) -> bool:
    """Whether ``check`` holds within ``within`` seconds (polled every 20 ms)."""
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True
