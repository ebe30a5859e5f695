"""Reading JSON that came from outside the daemon: a script's stdout, a tool call's
arguments, a provider's answer.

Python's ``json.loads`` accepts more than JSON and fails in ways a cell cannot type:
``NaN``/``Infinity`` parse (and would later be written back as non-standard JSON), a
``"\\ud800"`` escape yields a string no UTF-8 encoder (nor SQLite) accepts, and
``[`` × 100,000 raises ``RecursionError``, which is not a ``ValueError``. :func:`loads` refuses
all three with :class:`JsonTextError`, a ``ValueError`` whose text names the problem, so every
caller has one exception to turn into its typed error. The limits are those of meclaw's parser
(serde_json): no constants, no lone surrogates, at most :data:`MAX_DEPTH` levels of nesting.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["MAX_DEPTH", "JsonTextError", "loads"]

MAX_DEPTH = 128
"""Arrays and objects nested deeper than this are refused (serde_json's recursion limit)."""

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_SURROGATE = re.compile("[\ud800-\udfff]")


class JsonTextError(ValueError):
    """The text is not standard JSON; ``str(exc)`` says what is wrong and where."""


def _no_constant(name: str) -> Any:
    raise JsonTextError(f"{name} is not a JSON value (JSON has no NaN or Infinity)")


def loads(text: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """``text`` parsed as standard JSON, or :class:`JsonTextError`."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except JsonTextError:
        raise
    except json.JSONDecodeError as exc:
        raise JsonTextError(f"{exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        raise JsonTextError(f"nested deeper than {max_depth} levels") from None
    # Cheap guards first: fewer brackets than the limit cannot nest past it, and a lone
    # surrogate can only come from a \uD800-\uDFFF escape (undecodable bytes became U+FFFD).
    if text.count("[") + text.count("{") > max_depth:
        _check_depth(value, max_depth)
    if _SURROGATE_ESCAPE.search(text):
        _check_surrogates(value)
    return value


def _check_depth(value: Any, limit: int) -> None:
    if not isinstance(value, dict | list):
        return
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node
        for child in children:
            if isinstance(child, dict | list):
                if depth >= limit:
                    raise JsonTextError(f"nested deeper than {limit} levels")
                stack.append((child, depth + 1))


def _check_surrogates(value: Any) -> None:
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            found = _SURROGATE.search(node)
            if found:
                raise JsonTextError(
                    f"a string holds the lone surrogate \\u{ord(found.group()):04x}, "
                    "which is not Unicode text (escape it or leave it out)"
                )
        elif isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
