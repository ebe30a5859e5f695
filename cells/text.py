"""Text helpers every tool cell shares: the compact sorted JSON their replies carry, UTF-8
sizes, and the visible cut (``… [truncated, N bytes total]``) that tells a model a result was
shortened instead of silently dropping the end."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["TRUNCATION_MARKER", "cut_visibly", "dumps_sorted", "utf8_len"]

TRUNCATION_MARKER = "… [truncated, {total} bytes total]"
"""Appended to a visibly cut text: U+2026, a space, then the bracket; ``total`` is the byte
length of the whole text."""


_SORTED = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
"""Built once: ``json.dumps`` with these arguments builds an encoder per call, and a store
encodes every select's rows, a code cell every message it is sent."""


def dumps_sorted(value: Any) -> str:
    """Compact JSON with sorted keys, non-ASCII kept: what meclaw's serde_json writes."""
    return _SORTED.encode(value)


def utf8_len(text: str) -> int:
    """The byte length of ``text`` in UTF-8."""
    return len(text.encode("utf-8", "surrogatepass"))


def cut_visibly(text: str, max_bytes: int, *, total: int | None = None) -> tuple[str, bool]:
    """``(shown, truncated)``: ``text`` when it fits in ``max_bytes`` UTF-8 bytes, else its
    longest prefix that ends on a character boundary within ``max_bytes`` followed by
    :data:`TRUNCATION_MARKER`. The result is longer than ``max_bytes`` by the marker.

    ``total`` is the size the marker reports, when ``text`` is already only the start of
    something larger (a download stopped early); it defaults to the size of ``text``.
    """
    encoded = text.encode("utf-8", "surrogatepass")
    whole = len(encoded) if total is None else total
    if len(encoded) <= max_bytes and whole <= max_bytes:
        return text, False
    # The encoded text is valid UTF-8, so the only bytes 'ignore' can drop are those of the
    # one character the cut went through.
    head = encoded[:max_bytes].decode("utf-8", "ignore")
    return head + TRUNCATION_MARKER.format(total=whole), True
