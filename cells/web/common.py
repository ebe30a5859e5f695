"""What the web tool cells share besides the tool-call convention (:mod:`cells.toolcall`):
lossy decoding, meclaw's duration wording and a capped read of a response stream. The visible
cut and the JSON they write live in :mod:`cells.text`. Nothing here knows HTTP.
"""

from __future__ import annotations

import codecs
from collections.abc import AsyncIterable

# -- text -----------------------------------------------------------------------------------


def lossy_utf8(data: bytes) -> str:
    """``data`` as text, each invalid sequence replaced by U+FFFD (Rust's
    ``String::from_utf8_lossy`` makes the same replacements)."""
    return data.decode("utf-8", "replace")


def lossy_utf8_prefix(data: bytes) -> str:
    """Like :func:`lossy_utf8` for the start of a longer stream: a character the end of
    ``data`` cuts through is left out rather than replaced."""
    return codecs.getincrementaldecoder("utf-8")("replace").decode(data, final=False)


def human_duration(ms: int) -> str:
    """A duration the way meclaw's error texts print one (Rust's ``Duration`` debug form):
    ``15s``, ``1.5s``, ``250ms``."""
    if ms < 1000:
        return f"{ms}ms"
    seconds = f"{ms / 1000:.3f}".rstrip("0").rstrip(".")
    return f"{seconds}s"


# -- reading a stream -----------------------------------------------------------------------


async def read_capped(chunks: AsyncIterable[bytes], limit: int) -> tuple[bytes, bool]:
    """``(data, complete)``: the stream's bytes, read until it ends (``complete``) or until
    more than ``limit`` bytes have arrived — then reading stops, the rest is never fetched
    and ``data`` holds at most ``limit`` plus one chunk. The iterator is closed either way."""
    data = bytearray()
    iterator = aiter(chunks)
    complete = True
    try:
        async for chunk in iterator:
            data += chunk
            if len(data) > limit:
                complete = False
                break
    finally:
        close = getattr(iterator, "aclose", None)
        if close is not None:
            await close()
    return bytes(data), complete
