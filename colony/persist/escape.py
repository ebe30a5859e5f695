"""Text that SQLite (and a UTF-8 log file) can take, from any Python string.

A Python ``str`` may hold code points UTF-8 cannot encode: lone surrogates (``"\\ud800"``
from a JSON ``\\ud800`` escape a cell printed, ``"\\udce9"`` from a folder name that is not
UTF-8, read with ``surrogateescape``). Binding one to SQLite raises, and before this module
that one string failed every write of the daemon's life (issue 15, item 11). So everything
``colony.db`` stores passes through here first:

* JSON text (bodies, headers, whole envelopes) keeps JSON's own escape: a surrogate is written
  as the six characters ``\\ud800`` (``json.dumps(..., ensure_ascii=True)``), which
  ``json.loads`` reads back as the same string: lossless. One limit of JSON itself: a high
  surrogate directly followed by a low one reads back as the one character the pair encodes.
* Plain text columns (paths, ids, keys, reasons) get the same six-character form
  (``backslashreplace``); the row's JSON column holds the exact value where one exists
  (``journal.envelope``, ``dead_letters.message_json``).

Text that is valid already (nearly all of it) costs one O(1) ``isascii()`` check, or one
regex scan when it is not ASCII, and is stored unchanged.

JSON is written by orjson (ten times the speed of ``json``, on every row the writer stores);
whatever orjson refuses (a lone surrogate, an integer past 64 bits, a cycle, deep nesting, a
key that is not a string or a number) is written by ``json`` exactly as before, so orjson
changes the speed and the spacing of the text, never what reads back, except for values no
JSON text holds, which only a cell written in Python can emit: a non-finite float is written
``null`` (as :func:`colony.jsonwire.dumps` writes it), and some Python objects as orjson writes
them rather than as their ``repr`` (an enum as its value, a UUID as its text; a key that is a
date, an enum or a UUID is written instead of refused).
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

_SURROGATE = re.compile("[\ud800-\udfff]")
_ENCODE = json.JSONEncoder(ensure_ascii=False, default=repr).encode
_ENCODE_ASCII = json.JSONEncoder(ensure_ascii=True, default=repr).encode
"""``json.dumps`` with these arguments, without building an encoder per call."""
_ORJSON_OPTIONS = (
    orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
)
"""As ``json`` does: number keys become strings; dates and dataclasses go to ``repr``."""


def has_surrogate(text: str) -> bool:
    """True when ``text`` cannot be encoded as UTF-8."""
    return not text.isascii() and _SURROGATE.search(text) is not None


def storable_text(text: str) -> str:
    """``text`` itself, or with each surrogate spelled ``\\udXXX``."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def storable_optional(text: str | None) -> str | None:
    return None if text is None else storable_text(text)


def storable_json(value: Any) -> str:
    """``value`` as JSON text that encodes as UTF-8, readable with ``json.loads``.

    A value JSON cannot hold (a Python object a cell returned) is written as its ``repr``:
    the log must still take it. Raises ``ValueError`` / ``RecursionError`` only for what no
    JSON can be (a cycle, nesting past the interpreter's limit)."""
    try:
        return orjson.dumps(value, default=repr, option=_ORJSON_OPTIONS).decode()
    except TypeError:  # orjson.JSONEncodeError: json writes it, or raises as it always did
        pass
    text = _ENCODE(value)
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return _ENCODE_ASCII(value)
