"""UUID v7 identifiers, as strings.

Every message the colony builds gets a fresh v7 id: time-ordered (the first 48 bits are the
Unix time in milliseconds), so ids sort by creation and index well in SQLite. The random part
comes from Python's fast PRNG: ids must be unique, not unguessable.
"""

from __future__ import annotations

import random
import time

_rand = random.Random()
_VERSION_AND_VARIANT = (0x7 << 76) | (0b10 << 62)
_RAND_A_MASK = 0xFFF << 64
_RAND_B_MASK = (1 << 62) - 1


def uuid7() -> str:
    """A new UUID v7 in its canonical 36-character form."""
    bits = _rand.getrandbits(76)
    n = (
        (time.time_ns() // 1_000_000) << 80
        | _VERSION_AND_VARIANT
        | (bits << 52) & _RAND_A_MASK
        | bits & _RAND_B_MASK
    )
    h = f"{n:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
