"""The ops a ``timer`` cell takes (``add``, ``modify``, ``remove``, ``trigger``), read from a
body's top level or a tool call's arguments, and the RFC 3339 times they carry."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cells.timer.cron import CronError, CronExpr
from colony.envelope import JsonObject
from colony.ubf import body_problem

__all__ = ["OPS", "Op", "TimerOpError", "parse_at", "parse_op", "rfc3339"]

OPS = ("add", "modify", "remove", "trigger")
_CARRIERS = frozenset({"messages", "system", "attachments", "header", "meta"})
_RFC3339 = re.compile(
    r"^(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})$"
)


# -- times --------------------------------------------------------------------------------------


def rfc3339(when: datetime, *, millis: bool = False) -> str:
    """``2099-01-01T09:00:00Z`` (or ``…:00.000Z``) for an aware datetime."""
    naive = when.astimezone(UTC).replace(tzinfo=None)
    if millis:
        return naive.isoformat(timespec="milliseconds") + "Z"
    return naive.replace(microsecond=0).isoformat() + "Z"


def parse_at(text: str) -> datetime:
    """An RFC 3339 time, in UTC and cut to the millisecond (how cell.db stores it); raises
    :class:`ValueError` naming the text."""
    match = _RFC3339.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not an RFC 3339 time such as 2099-01-01T09:00:00Z")
    day, clock, fraction, zone = match.groups()
    micros = (fraction or "")[:6].ljust(6, "0")
    offset = "+00:00" if zone in ("Z", "z") else zone
    try:
        parsed = datetime.fromisoformat(f"{day}T{clock}.{micros}{offset}")
    except ValueError as exc:
        raise ValueError(f"{text!r}: {exc}") from None
    parsed = parsed.astimezone(UTC)
    return parsed.replace(microsecond=parsed.microsecond // 1000 * 1000)  # stored to the ms


# -- ops ----------------------------------------------------------------------------------------


class TimerOpError(Exception):
    """An op that is answered with ``timer_op_error``."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Op:
    """One parsed op; for ``modify``, None means "leave as it is"."""

    op: str
    schedule_id: str
    """Canonical (lower-case, hyphenated) form."""
    schedule_name: str | None = None
    cron: str | None = None
    at: datetime | None = None
    emit_to: str | None = None
    emit_body: JsonObject | None = None
    emit_headers: JsonObject | None = None


def _no_op_object(value: JsonObject) -> str:
    slots = sorted(value)
    named = ", ".join(slots) or "nothing"
    if all(slot in _CARRIERS for slot in slots):
        return (
            f"no op in the body: it carries only {named}. Send the op either as top-level "
            "body fields (op, schedule_id, …) or as the JSON arguments of one tool_call turn"
        )
    return f"no op in the body: found {named}, but neither op nor schedule_id"


def _string(value: JsonObject, key: str, *, required: bool) -> str | None:
    item = value.get(key)
    if item is None:
        if required:
            raise TimerOpError("parse_error", f"{key}: required")
        return None
    if not isinstance(item, str) or not item:
        raise TimerOpError("parse_error", f"{key}: must be a non-empty string")
    return item


def _cron(value: JsonObject) -> str | None:
    text = _string(value, "cron", required=False)
    if text is not None:
        try:
            CronExpr.parse(text)
        except CronError as exc:
            raise TimerOpError("invalid_cron", f"cron: invalid expression: {exc}") from None
    return text


def _at(value: JsonObject) -> datetime | None:
    text = _string(value, "at", required=False)
    if text is None:
        return None
    try:
        return parse_at(text)
    except ValueError as exc:
        raise TimerOpError("parse_error", f"at: {exc}") from None


def parse_op(value: Any) -> Op:
    """Read one op object (the body's top level, or a tool call's arguments)."""
    if not isinstance(value, dict):
        raise TimerOpError("parse_error", "the op must be a JSON object")
    if "op" not in value and "schedule_id" not in value:
        raise TimerOpError("parse_error", _no_op_object(value))
    op = value.get("op", "add")
    if op not in OPS:
        raise TimerOpError("parse_error", f"op: unknown value {op!r} (use one of {', '.join(OPS)})")
    raw_id = value.get("schedule_id")
    if not isinstance(raw_id, str):
        raise TimerOpError("parse_error", "schedule_id: required (a UUID string)")
    try:
        schedule_id = str(uuid.UUID(raw_id))
    except ValueError:
        raise TimerOpError("parse_error", f"schedule_id: {raw_id!r} is not a UUID") from None
    if op in ("remove", "trigger"):
        return Op(op, schedule_id)
    if op == "modify":
        return Op(
            op,
            schedule_id,
            schedule_name=_string(value, "schedule_name", required=False),
            cron=_cron(value),
            at=_at(value),
            emit_to=_string(value, "emit_to", required=False),
        )
    name = _string(value, "schedule_name", required=True)
    cron, at = _cron(value), _at(value)
    if (cron is None) == (at is None):
        raise TimerOpError("parse_error", "exactly one of cron or at is required")
    emit_to = _string(value, "emit_to", required=True)
    if "emit_body" not in value:
        raise TimerOpError("parse_error", "emit_body: required")
    body = value["emit_body"]
    problem = body_problem(
        {k: v for k, v in body.items() if k != "header"} if isinstance(body, dict) else body
    )
    if problem is not None:
        raise TimerOpError("parse_error", f"emit_body: {problem}")
    headers = value.get("emit_headers")
    if headers is not None and not isinstance(headers, dict):
        raise TimerOpError("parse_error", "emit_headers: must be an object")
    return Op(op, schedule_id, name, cron, at, emit_to, body, headers or {})
