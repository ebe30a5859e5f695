"""Turn pydantic's validation errors into diagnostics a person can act on.

Pydantic says *what* failed; a user also needs *where* (file, JSON path) and *how to fix it*
(the closest valid key, the allowed keys, the expected type). Values that came from a
``${VAR}`` substitution are never echoed: they may be secrets.
"""

from __future__ import annotations

import difflib
import json
import types
import typing
from collections.abc import Collection, Iterable
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from colony.config.diagnostics import Diagnostic, Severity, format_path
from colony.config.jsonpos import Path as JsonPath

_EXPECTED = {
    "int_type": "an integer",
    "int_from_float": "a whole number",
    "int_parsing": "an integer",
    "string_type": "a string",
    "bool_type": "true or false",
    "float_type": "a number",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "list_type": "an array",
    "tuple_type": "an array",
    "none_required": "null",
}

_HINTS = {
    "mailbox_size_zero": "set it to 1 or more, or remove it to use colony.json "
    "mailbox_default_capacity (1000 unless set).",
    "schema_version_unsupported": "set schema_version to 1 or remove the key.",
    "invalid_log_level": "use one of trace, debug, info, warn, error.",
    "invalid_emits_type": "fix the 'type' token of this emits entry.",
    "invalid_ingress_key": "keep only standard keys in contract.ingress.context.",
    "invalid_assets_dir": "name a folder directly inside the cell's folder.",
    "invalid_drain": "write the drain in one of the two forms.",
    "cluster_dsn_empty": "set it to the database every node shares, e.g. "
    '"dsn": "${COLONY_PG_DSN}" with COLONY_PG_DSN=postgresql://user@host:5432/dbname in the '
    "environment or the env file.",
    "cluster_partition_by_invalid": "write trace_id (the default) or context.<key>, e.g. "
    "context.chat_id; nested objects as context.<key>.<key>.",
}

_MISSING_HINTS = {
    "cluster.dsn": "add the database every node shares, e.g. "
    '"dsn": "${COLONY_PG_DSN}" (the value from the environment or the env file).',
}
"""Hints for required keys whose fix is more than "add it"."""

_UNKNOWN_HINTS = {
    "cluster.node": "a node's name is its own, not the colony's: give it to each daemon as "
    "meclaw --node NAME (default: host name and pid). ",
}
"""Unknown keys someone is likely to write, and where what they meant goes instead."""

_SHOWS_NO_VALUE = frozenset(
    {"cluster_dsn_empty", "cluster_dsn_invalid", "cluster_partition_by_invalid"}
)
"""Our errors whose sentence never quotes the value: they stay precise when a ``${VAR}`` gave
the value (a DSN holds a password), where any other error is reported without detail."""

_RANGE = {
    "greater_than_equal": "at least {ge}",
    "greater_than": "greater than {gt}",
    "less_than_equal": "at most {le}",
    "less_than": "less than {lt}",
}


def shown(value: Any, limit: int = 60) -> str:
    """A value the way the file wrote it: JSON (``null``, ``true``, ``"text"``), shortened.
    Python's spelling (``None``, ``'text'``) never reaches a message."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = json_type_name(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_PREFIXES = ("Value error, ", "Assertion failed, ")
"""What pydantic puts before the message of a validator's ValueError or assert."""


def _sentence(error: ErrorDetails) -> str:
    """Pydantic's message without its prefix (the validator's own words, first line)."""
    message = error["msg"]
    for prefix in _PREFIXES:
        if message.startswith(prefix):
            message = message[len(prefix) :]
    return message.split("\n", 1)[0]


def json_type_name(value: Any) -> str:
    """How a JSON value's type reads in a sentence ("a string", "null")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _unwrap(annotation: Any) -> list[Any]:
    """The concrete types an annotation may hold (Optional/Annotated/unions flattened)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        out: list[Any] = []
        for arg in typing.get_args(annotation):
            if arg is not type(None):
                out.extend(_unwrap(arg))
        return out
    return [annotation]


def _field_annotation(model: type[BaseModel], key: str) -> Any:
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            return info.annotation
    return None


def allowed_keys(model: type[BaseModel], where: JsonPath) -> list[str]:
    """The keys the object at ``where`` (inside ``model``) accepts; [] if not a model."""
    current: list[Any] = [model]
    for part in where:
        following: list[Any] = []
        for candidate in current:
            if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                if isinstance(part, str):
                    annotation = _field_annotation(candidate, part)
                    if annotation is not None:
                        following.extend(_unwrap(annotation))
                continue
            origin = typing.get_origin(candidate)
            args = typing.get_args(candidate)
            if origin is list and isinstance(part, int) and args:
                following.extend(_unwrap(args[0]))
            elif origin is dict and isinstance(part, str) and len(args) == 2:
                following.extend(_unwrap(args[1]))
        current = following
    for candidate in current:
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return [info.alias or name for name, info in candidate.model_fields.items()]
    return []


def tainted(path: JsonPath, substituted: Collection[JsonPath]) -> bool:
    """Whether the value at ``path`` holds (or is) a string a ``${VAR}`` filled in."""
    if not substituted:
        return False
    size = len(path)
    return any(p[:size] == path for p in substituted)


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The most similar choice, if any is similar enough to be a plausible typo."""
    matches = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return matches[0] if matches else None


def _one(
    error: ErrorDetails,
    model: type[BaseModel],
    file: str,
    prefix: JsonPath,
    substituted: set[JsonPath],
) -> Diagnostic:
    loc: JsonPath = tuple(error["loc"])
    path: JsonPath = (*prefix, *loc)
    kind = error["type"]
    ctx = error.get("ctx") or {}
    value = error.get("input")
    key = loc[-1] if loc else ""

    if kind == "extra_forbidden":
        keys = allowed_keys(model, loc[:-1])
        guess = closest(str(key), keys)
        hint = _UNKNOWN_HINTS.get(format_path(path), f"did you mean '{guess}'? " if guess else "")
        hint += f"Keys allowed here: {', '.join(keys)}." if keys else "Remove the key."
        return Diagnostic(Severity.ERROR, "unknown_key", f"unknown key '{key}'", file, path, hint)
    if kind == "missing":
        return Diagnostic(
            Severity.ERROR,
            "missing_key",
            f"required key '{key}' is missing",
            file,
            path,
            _MISSING_HINTS.get(format_path(path), f"add '{key}'."),
        )
    if kind in _SHOWS_NO_VALUE:
        hint = str(ctx.get("fix") or _HINTS.get(kind, ""))
        if tainted(path, substituted):
            hint += " The value comes from a ${...} variable: fix it where the variable is set."
        return Diagnostic(Severity.ERROR, kind, _sentence(error), file, path, hint or None)
    if tainted(path, substituted):
        # Never echo a value that came from a variable: it may be a secret.
        return Diagnostic(
            Severity.ERROR,
            "invalid_value",
            "the value substituted here from a ${...} variable is not valid for this key",
            file,
            path,
            f"check the variable's value ({kind}).",
        )
    if kind in _EXPECTED:
        return Diagnostic(
            Severity.ERROR,
            "wrong_type",
            f"expected {_EXPECTED[kind]}, got {json_type_name(value)}",
            file,
            path,
            f"write '{key}' as {_EXPECTED[kind]}." if key != "" else None,
        )
    if kind in _RANGE:
        bound = _RANGE[kind].format(**ctx)
        return Diagnostic(
            Severity.ERROR,
            "out_of_range",
            f"must be {bound}, got {shown(value)}",
            file,
            path,
            f"use a value {bound}.",
        )
    if kind == "literal_error":
        expected = str(ctx.get("expected", ""))
        return Diagnostic(
            Severity.ERROR,
            "invalid_value",
            f"must be one of {expected}, got {shown(value)}",
            file,
            path,
            None,
        )
    # Our own PydanticCustomErrors carry a stable code and a complete sentence.
    code = "invalid_value" if kind in ("value_error", "assertion_error") else kind
    return Diagnostic(Severity.ERROR, code, _sentence(error), file, path, _HINTS.get(kind))


def diagnostics_from(
    exc: ValidationError,
    model: type[BaseModel],
    *,
    file: str,
    prefix: JsonPath = (),
    substituted: set[JsonPath] | None = None,
) -> list[Diagnostic]:
    """One diagnostic per pydantic error, in pydantic's order."""
    seen = substituted or set()
    return [_one(error, model, file, prefix, seen) for error in exc.errors()]
