"""UUID v7 identifiers, as strings.

Every message the colony builds gets a fresh v7 id: time-ordered (the first 48 bits are the
Unix time in milliseconds), so ids sort by creation and index well in SQLite. The random part
comes from Python's fast PRNG: ids must be unique, not unguessable.
"""

from __future__ import annotations

import random
import time

_getrandbits = random.Random().getrandbits
_LOW_48 = (1 << 48) - 1
_last_ms = -1
_prefix = ""
"""The id's first 15 characters (its millisecond and the version digit) for ``_last_ms``: many
ids are made within one millisecond."""


def now_ms() -> int:
    """The Unix time in milliseconds: an id's first 48 bits, and every ``*_ms`` the record
    and the live events carry."""
    return time.time_ns() // 1_000_000


def uuid7() -> str:
    """A new UUID v7 in its canonical 36-character form."""
    global _last_ms, _prefix
    ms = time.time_ns() // 1_000_000
    if ms != _last_ms:
        h = f"{ms:012x}"
        _last_ms, _prefix = ms, f"{h[:8]}-{h[8:]}-7"
    bits = _getrandbits(74)  # 12 bits of rand_a, then rand_b's 62 behind the variant "10"
    return f"{_prefix}{bits >> 62:03x}-{0x8000 | (bits >> 48) & 0x3FFF:04x}-{bits & _LOW_48:012x}"
