"""JSON at the HTTP boundary: strict on the way in, standard on the way out.

What enters the colony must be something ``colony.db`` can store and every reader can parse
back, so an ingress body is refused (never stored, never half-accepted) when it is not UTF-8,
holds a lone surrogate (``"\\ud800"``, which UTF-8 cannot encode), holds ``NaN`` or
``Infinity`` (or a number too large for a double, which Python would read as infinity), or
nests deeper than :data:`MAX_DEPTH` levels: 128 is serde_json's limit, so meclaw refuses the
same documents.

On the way out, :func:`dumps` writes standard JSON only: a non-finite float that reached a body
anyway (a cell written in Python may emit one) is written as ``null``, never as the bare
``NaN`` that strict parsers reject.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_DEPTH = 128
"""Deepest nesting of arrays and objects an ingress body may have (serde_json's default)."""

_SURROGATE = re.compile("[\ud800-\udfff]")


class JsonRefused(ValueError):
    """An ingress body that is not acceptable JSON; ``detail`` says where and why."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def _constant(name: str) -> Any:
    raise JsonRefused(
        f"the body holds {name}, which is not JSON (RFC 8259 has no NaN or Infinity); "
        "send a number, a string or null"
    )


def loads(raw: bytes, what: str = "the body") -> Any:
    """Parse an ingress body, or raise :class:`JsonRefused`."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonRefused(f"{what} is not UTF-8 (invalid byte at offset {exc.start})") from None
    try:
        doc = json.loads(text, parse_constant=_constant)
    except RecursionError:
        raise JsonRefused(f"{what} nests deeper than {MAX_DEPTH} levels") from None
    except JsonRefused:
        raise
    except ValueError as exc:
        raise JsonRefused(f"{what} is not JSON: {exc}") from None
    problem = value_problem(doc)
    if problem is not None:
        raise JsonRefused(f"{what}{problem}")
    return doc


def _scalar_problem(value: Any) -> str | None:
    if isinstance(value, str):
        if not value.isascii() and _SURROGATE.search(value):
            return (
                "holds a lone surrogate, which is not valid Unicode; send the character "
                "itself or a valid surrogate pair"
            )
    elif isinstance(value, float) and not math.isfinite(value):
        return "holds a number too large for a double; send it as a string"
    return None


def _at(where: str, key: Any, in_object: bool) -> str:
    if in_object:
        return f"{where}.{key}" if where else str(key)
    return f"{where}[{key}]"


def value_problem(doc: Any) -> str | None:
    """Why a parsed JSON value cannot enter the colony (``" at <where> …"``), or None.

    Iterative, so a deep document costs no Python stack (that is how the depth is bounded),
    and a location is spelled out only for containers and for the value at fault."""
    problem = _scalar_problem(doc)
    if problem is not None:
        return f" {problem}"
    stack: list[tuple[Any, int, str]] = []
    if isinstance(doc, dict | list):
        stack.append((doc, 1, ""))
    while stack:
        value, depth, where = stack.pop()
        if depth > MAX_DEPTH:
            return f" nests deeper than {MAX_DEPTH} levels"
        in_object = isinstance(value, dict)
        for key, item in value.items() if in_object else enumerate(value):
            if in_object and isinstance(key, str) and _SURROGATE.search(key):
                return f" at {where or 'the top'} has a key that {_scalar_problem(key)}"
            if isinstance(item, dict | list):
                stack.append((item, depth + 1, _at(where, key, in_object)))
            elif isinstance(item, str | float):
                problem = _scalar_problem(item)
                if problem is not None:
                    return f" at {_at(where, key, in_object)} {problem}"
    return None


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def dumps(value: Any) -> str:
    """Standard JSON text of ``value``; non-finite floats become ``null``."""
    try:
        return json.dumps(value, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(value), allow_nan=False)
