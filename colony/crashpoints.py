"""Named places where a crash test may have the daemon kill itself, as ``kill -9`` would.

``MECLAW_CRASH_AT="journal.commit:3,store.write:5"`` makes the process send itself SIGKILL
the third time it reaches ``journal.commit`` (or the fifth ``store.write``), whichever comes
first. Without the variable every call is one falsy check. The points sit where a real crash
hurts most: inside the journal transaction before its COMMIT, inside a store write before
its COMMIT, after a provider answered and before the llm cell returned, after Telegram
accepted an answer and before the proxy's hand-off was committed.
"""

from __future__ import annotations

import os
import signal

ENV = "MECLAW_CRASH_AT"


def _plan(spec: str) -> dict[str, int]:
    plan: dict[str, int] = {}
    for part in spec.split(","):
        name, _, count = part.strip().partition(":")
        if name:
            plan[name] = int(count) if count.isdigit() else 1
    return plan


_PLAN = _plan(os.environ.get(ENV, ""))
_SEEN: dict[str, int] = {}


def crash_point(name: str) -> None:
    """Die here (SIGKILL, no cleanup) when the plan says this is the moment."""
    if not _PLAN or name not in _PLAN:
        return
    _SEEN[name] = _SEEN.get(name, 0) + 1
    if _SEEN[name] >= _PLAN[name]:
        os.kill(os.getpid(), signal.SIGKILL)
