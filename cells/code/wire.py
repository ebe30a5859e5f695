"""What a ``code`` cell's script reads and prints.

Stdin is one JSON object with exactly three keys::

    {"envelope": {"header": {"context": {...}, "hop": {...}}, "target": <this cell>,
                  "trace_id": ..., "ttl": ..., ["reply_to", "parent_message_id",
                  "correlation_id" when set]},
     "body": {...the message body...},
     "params": {...the cell's params minus anything that looks like a credential...}}

serialised with sorted keys and compact separators, as meclaw does. Stdout is one JSON value:
an object (one emission), an array of objects (one emission each; ``[]`` emits nothing), and
each object's ``header`` (if any) must be an object. It must be standard JSON, as meclaw's
parser reads it: ``NaN``/``Infinity``, a lone surrogate escape (``"\\ud800"``) or nesting deeper
than 128 levels is ``invalid_json`` naming the problem (see :mod:`colony.jsonwire`).
"""

from __future__ import annotations

from typing import Any

from cells.text import dumps_sorted
from cells.toolcall import result_turn
from colony.envelope import Envelope, JsonObject
from colony.jsonwire import JsonRefused, loads

_SECRET_KEYS = frozenset({"api_key", "auth", "auth_ref", "token", "secret", "password"})
_SECRET_SUFFIXES = ("_key", "_token", "_secret", "_password")
_SCRIPT_KEYS = frozenset({"script_inline", "script_path", "script", "env"})
"""Keys the script does not see in ``params``: its own source, and ``env`` (which it gets as
its environment, where a value such as a ``DATABASE_URL`` belongs)."""


def _looks_secret(key: str) -> bool:
    lowered = key.lower()
    return lowered in _SECRET_KEYS or lowered.endswith(_SECRET_SUFFIXES)


def _filter(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _filter(v) for k, v in value.items() if not _looks_secret(k)}
    if isinstance(value, list):
        return [_filter(item) for item in value]
    return value


def script_params(params: Any) -> JsonObject:
    """The params a script sees: credential-looking keys removed at every depth, and the
    script itself and its environment left out."""
    if not isinstance(params, dict):
        return {}
    return {
        k: _filter(v) for k, v in params.items() if k not in _SCRIPT_KEYS and not _looks_secret(k)
    }


def params_json(params: JsonObject) -> str:
    """``params`` as :func:`stdin_document` writes them: once per cell, not per message."""
    return dumps_sorted(params)


def stdin_document(message: Envelope, cell_path: str, params: str) -> bytes:
    """The document a script reads; ``params`` is what :func:`params_json` made of them."""
    envelope: JsonObject = {
        "header": {"context": message.headers.context, "hop": message.headers.hop},
        "target": cell_path,
        "trace_id": message.trace_id,
        "ttl": message.ttl,
    }
    if message.reply_to is not None:
        envelope["reply_to"] = message.reply_to
    if message.parent_message_id is not None:
        envelope["parent_message_id"] = message.parent_message_id
    if message.correlation_id is not None:
        envelope["correlation_id"] = message.correlation_id
    body = message.body if isinstance(message.body, dict) else {}
    # Sorted keys: "params" comes last, so it is spliced in after the closing brace goes.
    head = dumps_sorted({"body": body, "envelope": envelope})
    return f'{head[:-1]},"params":{params}}}'.encode()


class WireError(Exception):
    """Stdout is not the wire shape; the message becomes the ``invalid_json`` text."""


def parse_stdout(stdout: bytes) -> list[JsonObject]:
    """The contents a script printed, or :class:`WireError`."""
    try:
        value = loads(stdout.decode("utf-8", "replace"))  # lossy, as meclaw reads stdout
    except JsonRefused as exc:
        raise WireError(f"invalid_json: {exc.problem}") from None
    items = value if isinstance(value, list) else [value] if isinstance(value, dict) else None
    if items is None:
        raise WireError("invalid_json: top-level must be Object or Array")
    for item in items:
        if not isinstance(item, dict):
            raise WireError("invalid_json: every emitted message must be a JSON object")
        if "header" in item and not isinstance(item["header"], dict):
            raise WireError('invalid_json: "header" must be a JSON object')
    return items


DETAIL_LIMIT = 500
"""The most characters of ``meta.error.detail``: one line saying what failed."""


def error_content(
    code: str, text: str, *, error: JsonObject | None = None, **header: Any
) -> JsonObject:
    """An error emission: ``finish_reason: error``, the code, one tool_result turn, and
    ``meta.error`` — ``source``, a one-line ``detail`` (the first line of ``text`` unless
    ``error`` gives one) and whatever else ``error`` holds (the traceback of a script)."""
    first = text.strip().split("\n", 1)[0] if text.strip() else code
    meta_error: JsonObject = {"source": "script", "detail": first[:DETAIL_LIMIT], **(error or {})}
    return {
        "header": {"finish_reason": "error", "error_code": code, **header},
        "messages": [result_turn(text, None)],
        "meta": {"error": meta_error},
    }
