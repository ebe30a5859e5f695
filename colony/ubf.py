"""Universal Body Format: the shape every message body must have.

A body is an object holding at least one of ``system`` (object), ``messages`` (array) or
``attachments`` (array); other top-level slots are free. Entries of ``messages`` are turns
(closed objects), or pointers ``{"text_id": uuid}`` / ``{"messages_id": uuid}``. Hand-written
rather than a JSON Schema engine: it runs on every emission.
"""

from __future__ import annotations

import re
from typing import Any

ORIGINS = frozenset({"user", "assistant", "tool", "system"})
TURN_TYPES = frozenset({"text", "tool_call", "tool_result", "image", "audio"})
_TURN_KEYS = frozenset({"origin", "type", "text", "id", "happened_at"})
_TURN_STRINGS = ("text", "id", "happened_at")
_ID_REQUIRED = frozenset({"tool_call", "tool_result"})
_ATTACHMENT_KEYS = frozenset({"blob_id", "mime_type", "filename", "size_bytes", "sha256"})
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_SHA256 = re.compile(r"^[a-f0-9]{64}$")


def _names(keys: Any) -> str:
    # A body built in Python (not parsed from JSON) may have keys that are not strings.
    return ", ".join(sorted(str(key) for key in keys))


def _turn_problem(index: int, turn: Any) -> str | None:
    # On every turn of every emission: the place is named only once a problem is found.
    if not isinstance(turn, dict):
        return f"messages[{index}] must be an object"
    if len(turn) == 1 and ("text_id" in turn or "messages_id" in turn):
        ((key, value),) = turn.items()
        if not isinstance(value, str) or not _UUID.fullmatch(value):
            return f"messages[{index}].{key} must be a UUID"
        return None
    if not turn.keys() <= _TURN_KEYS:
        return f"messages[{index}] has unknown key(s) {_names(turn.keys() - _TURN_KEYS)}"
    # Membership is tested only on strings: an object or array is unhashable.
    origin = turn.get("origin")
    if not isinstance(origin, str) or origin not in ORIGINS:
        return f"messages[{index}].origin must be one of {', '.join(sorted(ORIGINS))}"
    turn_type = turn.get("type")
    if not isinstance(turn_type, str) or turn_type not in TURN_TYPES:
        return f"messages[{index}].type must be one of {', '.join(sorted(TURN_TYPES))}"
    for key in _TURN_STRINGS:
        if key in turn and not isinstance(turn[key], str):
            return f"messages[{index}].{key} must be a string"
    if turn_type in _ID_REQUIRED and "id" not in turn:
        return f"messages[{index}] is a {turn_type} and needs an id"
    return None


def _attachment_problem(index: int, item: Any) -> str | None:
    where = f"attachments[{index}]"
    if not isinstance(item, dict):
        return f"{where} must be an object"
    extra = item.keys() - _ATTACHMENT_KEYS
    if extra:
        return f"{where} has unknown key(s) {_names(extra)}"
    blob_id = item.get("blob_id")
    if not isinstance(blob_id, str) or not _UUID.fullmatch(blob_id):
        return f"{where}.blob_id must be a UUID"
    if not isinstance(item.get("mime_type"), str):
        return f"{where}.mime_type must be a string"
    size = item.get("size_bytes")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        return f"{where}.size_bytes must be a non-negative integer"
    if (
        "filename" in item
        and item["filename"] is not None
        and not isinstance(item["filename"], str)
    ):
        return f"{where}.filename must be a string or null"
    if "sha256" in item and (
        not isinstance(item["sha256"], str) or not _SHA256.fullmatch(item["sha256"])
    ):
        return f"{where}.sha256 must be 64 lowercase hex digits"
    return None


def body_problem(body: Any) -> str | None:
    """Why ``body`` is not a UBF body, or None when it is."""
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    if "system" not in body and "messages" not in body and "attachments" not in body:
        return "the body needs at least one of system, messages, attachments"
    if "messages" in body:
        messages = body["messages"]
        if not isinstance(messages, list):
            return "messages must be an array"
        for index, turn in enumerate(messages):
            problem = _turn_problem(index, turn)
            if problem:
                return problem
    if "attachments" in body:
        attachments = body["attachments"]
        if not isinstance(attachments, list):
            return "attachments must be an array"
        for index, item in enumerate(attachments):
            problem = _attachment_problem(index, item)
            if problem:
                return problem
    if "system" in body and not isinstance(body["system"], dict):
        return "system must be an object"
    return None


_UUID_SCHEMA = {"type": "string", "pattern": _UUID.pattern}
_TURN_PROPERTIES = {
    "origin": {"type": "string", "enum": sorted(ORIGINS)},
    "text": {"type": "string"},
    "id": {"type": "string"},
    "happened_at": {"type": "string"},
}


def _turn_schema(types: frozenset[str], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": required,
        "properties": {**_TURN_PROPERTIES, "type": {"type": "string", "enum": sorted(types)}},
    }


def _pointer_schema(key: str) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": [key],
        "properties": {key: _UUID_SCHEMA},
    }


UBF_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "A UBF body: at least one of system, messages, attachments.",
    "anyOf": [{"required": ["system"]}, {"required": ["messages"]}, {"required": ["attachments"]}],
    "properties": {
        "system": {"type": "object"},
        "messages": {
            "type": "array",
            "items": {
                "anyOf": [
                    _turn_schema(TURN_TYPES - _ID_REQUIRED, ["origin", "type"]),
                    _turn_schema(_ID_REQUIRED, ["origin", "type", "id"]),
                    _pointer_schema("text_id"),
                    _pointer_schema("messages_id"),
                ]
            },
        },
        "attachments": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["blob_id", "mime_type", "size_bytes"],
                "properties": {
                    "blob_id": _UUID_SCHEMA,
                    "mime_type": {"type": "string"},
                    "filename": {"type": "string", "nullable": True},
                    "size_bytes": {"type": "integer", "minimum": 0},
                    "sha256": {"type": "string", "pattern": _SHA256.pattern},
                },
            },
        },
    },
}
"""The JSON Schema (OpenAPI 3.0 dialect) of exactly what :func:`body_problem` accepts."""
