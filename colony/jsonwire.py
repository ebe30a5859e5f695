"""JSON from outside the daemon: strict on the way in, standard on the way out.

Every JSON text the daemon did not write itself is read here: an HTTP or stdio ingress, a
``config.json``, a script's stdout, a tool call's arguments, a provider's answer. Python's
``json.loads`` takes more than JSON and fails in ways a caller cannot type: ``NaN`` and
``Infinity`` parse (and would later be written back as non-standard JSON), ``1e400`` becomes
infinity, a ``"\\ud800"`` escape yields a string that neither UTF-8 nor SQLite can hold,
``[`` x 100,000 raises ``RecursionError`` and an integer of 5,000 digits a bare ``ValueError``.
:func:`loads` refuses each with one exception, :class:`JsonRefused`, which says what is wrong
and where (line and column of the text, or the JSON path of the value), so each caller turns
it into its own typed error. The limits are those of meclaw's parser (serde_json): no
constants, no lone surrogates, at most :data:`MAX_DEPTH` levels of nesting.

On the way out, :func:`dumps` writes standard JSON only: a non-finite float that reached a body
anyway (a cell written in Python may emit one) is written as ``null``.

Reading goes through orjson first (four to ten times the speed of ``json``, and a script's
output is read on every hand-off to a code cell). orjson refuses what :func:`loads` refuses
(constants, infinite numbers, lone surrogates, bad UTF-8, bad syntax) but allows deeper nesting
and reads an integer past 64 bits as a float; a text it refuses, one with a run of 19 digits
or more, or one with more brackets than :data:`MAX_DEPTH` is read the careful way below,
which alone says what is wrong.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Literal

import orjson

from colony.errors import ColonyError
from colony.persist.escape import has_surrogate

__all__ = ["MAX_DEPTH", "JsonRefused", "dumps", "loads"]

MAX_DEPTH = 128
"""Deepest nesting of arrays and objects accepted (serde_json's default recursion limit)."""

Kind = Literal["encoding", "syntax", "number", "depth", "unicode"]
JsonPath = tuple[str | int, ...]

_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_LONG_NUMBER = re.compile(r"-?\d{4000,}")
_WIDE_TEXT = re.compile(r"\d{19}")
_WIDE_BYTES = re.compile(rb"\d{19}")
"""A run of digits orjson may read as a float (an integer past 64 bits)."""
_CAREFUL = object()


class JsonRefused(ColonyError, ValueError):
    """A JSON text that is not acceptable; ``detail`` says what and where, for a person."""

    code = "json_refused"

    def __init__(
        self,
        detail: str,
        *,
        kind: Kind,
        reason: str,
        problem: str,
        line: int | None = None,
        column: int | None = None,
        path: JsonPath | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.kind = kind
        """``encoding`` (not UTF-8), ``syntax``, ``number`` (NaN, Infinity, too large, too
        many digits), ``depth`` or ``unicode`` (a lone surrogate)."""
        self.reason = reason
        """What is wrong, in a phrase of its own (``NaN is not a JSON value …``)."""
        self.problem = problem
        """:attr:`reason` with the line and column where known: what a caller that names the
        document itself puts after its own words."""
        self.line = line
        self.column = column
        self.path = path
        """Where in the value, for a problem found after parsing (``unicode``)."""


class _Constant(ValueError):
    def __init__(self, token: str, reason: str) -> None:
        super().__init__(reason)
        self.token = token
        self.reason = reason


def _no_constant(token: str) -> Any:
    raise _Constant(token, f"{token} is not a JSON value (JSON has no NaN or Infinity)")


def _finite_float(token: str) -> float:
    value = float(token)
    if math.isinf(value):
        raise _Constant(token, f"the number {token[:20]} is too large for a double")
    return value


def _position(text: str, index: int) -> tuple[int, int]:
    line = text.count("\n", 0, index) + 1
    return line, index - (text.rfind("\n", 0, index) + 1) + 1


def _quick(raw: bytes | str) -> Any:
    """``raw`` read by orjson, or ``_CAREFUL`` when only the careful reading can tell."""
    if isinstance(raw, bytes):
        if _WIDE_BYTES.search(raw) or raw.count(b"[") + raw.count(b"{") > MAX_DEPTH:
            return _CAREFUL
    elif _WIDE_TEXT.search(raw) or raw.count("[") + raw.count("{") > MAX_DEPTH:
        return _CAREFUL
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _CAREFUL


def loads(raw: bytes | str, what: str = "the body") -> Any:
    """``raw`` parsed as standard JSON, or :class:`JsonRefused` naming ``what`` was read."""
    quick = _quick(raw)
    if quick is not _CAREFUL:
        return quick

    def refused(
        kind: Kind,
        reason: str,
        at: int | None = None,
        path: JsonPath | None = None,
    ) -> JsonRefused:
        line, column = _position(text, at) if at is not None and at >= 0 else (None, None)
        where = f" (line {line}, column {column})" if line is not None else ""
        return JsonRefused(
            f"{what} is not standard JSON: {reason}{where}",
            kind=kind,
            reason=reason,
            problem=reason + where,
            line=line,
            column=column,
            path=path,
        )

    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            text = raw[: exc.start].decode("utf-8", "replace")
            raise refused(
                "encoding", f"not UTF-8 (invalid byte at offset {exc.start})", len(text)
            ) from None
    else:
        text = raw
    try:
        value = json.loads(text, parse_float=_finite_float, parse_constant=_no_constant)
    except _Constant as exc:
        raise refused("number", exc.reason, text.find(exc.token)) from None
    except json.JSONDecodeError as exc:
        raise refused("syntax", exc.msg, exc.pos) from None
    except RecursionError:
        raise refused("depth", f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError:  # an integer with more digits than int() converts
        found = _LONG_NUMBER.search(text)
        raise refused(
            "number",
            "a number has more than 4,300 digits (quote it as a string)",
            found.start() if found else None,
        ) from None
    # Cheap guards first: a text with fewer brackets than the limit cannot nest past it, and a
    # lone surrogate can only come from a \ud800-\udfff escape (or, in a str that was never
    # UTF-8, from the text itself).
    deep = text.count("[") + text.count("{") > MAX_DEPTH
    odd = _SURROGATE_ESCAPE.search(text) is not None or (has_surrogate(text))
    if deep or odd:
        problem = _walk(value)
        if problem is not None:
            kind, reason, path = problem
            raise refused(kind, reason, path=path)
    return value


def _escaped(text: str) -> str:
    found = _SURROGATE.search(text)
    return f"\\u{ord(found.group()):04x}" if found else ""


def _spelled(path: JsonPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "the top"


def _walk(value: Any) -> tuple[Kind, str, JsonPath] | None:
    """The first nesting past :data:`MAX_DEPTH` or lone surrogate in ``value``. Iterative, so
    a deep value costs no Python stack."""
    stack: list[tuple[Any, int, JsonPath]] = [(value, 0, ())]
    while stack:
        node, depth, path = stack.pop()
        if isinstance(node, str):
            if has_surrogate(node):
                reason = f"lone surrogate {_escaped(node)} at {_spelled(path)}, "
                return "unicode", reason + "which is not valid Unicode", path
        elif isinstance(node, dict | list):
            if depth + 1 > MAX_DEPTH:
                return "depth", f"nested deeper than {MAX_DEPTH} levels", path
            if isinstance(node, dict):
                for key, child in node.items():
                    if has_surrogate(key):
                        reason = f"holds a lone surrogate {_escaped(key)} in a key at "
                        return (
                            "unicode",
                            reason + f"{_spelled(path)}, which is not valid Unicode",
                            path,
                        )
                    stack.append((child, depth + 1, (*path, key)))
            else:
                stack.extend((child, depth + 1, (*path, i)) for i, child in enumerate(node))
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
