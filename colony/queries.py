"""The filters of the ``/colony/*`` reads, parsed once for both doors.

A read is asked for over HTTP (``GET /colony/messages?trace_id=…``: every value a string) or
by a cell (a message to ``/colony/messages`` whose body holds ``{"query": {…}}``: JSON values).
Both doors hand the mapping to :func:`parse`, which answers a typed, frozen filter or raises
:class:`QueryError` naming the one filter it could not read. A filter is never dropped: an
unknown name, a value of the wrong type, a malformed UUID, a name given twice are all refused
(meclaw ignores unknown names and, over HTTP, some malformed values; see docs/operations.md,
"Where we differ from meclaw"). Out-of-range counts are clamped, as in meclaw: ``limit`` to
1..1000, ``scan_budget`` to 1..50,000.

The models are also the source of the OpenAPI document's query parameters
(:mod:`colony.openapi`), so the document cannot be looser than the parser.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
)
from pydantic_core import PydanticCustomError

from colony import paths
from colony.errors import ColonyError

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
LIMIT_DEFAULT = 100
LIMIT_MAX = 1000
SCAN_BUDGET_DEFAULT = 5000
SCAN_BUDGET_MAX = 50_000
TEXT_MAX = 256
"""Longest text filter we read (a path, a code): longer is no filter anyone means, and every
text filter of a read at this length, percent-encoded, fits the request line the API reads."""

_WHOLE = re.compile(r"[+-]?[0-9]{1,40}")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_UUID_PATTERN = "^" + _UUID.pattern + "$"


class QueryError(ColonyError, ValueError):
    """One filter of a read could not be read. ``detail`` never repeats the rejected value
    (a filter may carry an id or a token that has no business in a log line)."""

    code = "bad_query"

    def __init__(self, key: str, detail: str) -> None:
        super().__init__(detail)
        self.key = key
        self.detail = detail


def _refuse(reason: str) -> PydanticCustomError:
    # The reason goes through the context, so braces in it are never read as placeholders.
    return PydanticCustomError("bad_filter", "{reason}", {"reason": reason})


def _whole(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise _refuse("must be a whole number, not a boolean")
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and _WHOLE.fullmatch(value):
        number = int(value)
    else:
        raise _refuse("must be a whole number (ASCII digits, optionally signed)")
    if not INT64_MIN <= number <= INT64_MAX:
        raise _refuse("is out of range: it must fit in 64 bits (what SQLite can compare)")
    return number


def _flag(value: Any) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    if value in ("true", "false"):
        return bool(value == "true")
    raise _refuse("must be true or false")


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise _refuse("must be a string")
    if len(value) > TEXT_MAX:
        raise _refuse(f"is longer than {TEXT_MAX} characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _refuse("is not valid Unicode (it holds a lone surrogate)") from None
    return value


def _uuid(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _UUID.fullmatch(value):
        raise _refuse("must be a UUID in its 8-4-4-4-12 hex form")
    return value.lower()  # ids are stored in lower case


_INT_SCHEMA = {"type": "integer", "minimum": INT64_MIN, "maximum": INT64_MAX}
Whole = Annotated[int | None, BeforeValidator(_whole), WithJsonSchema(_INT_SCHEMA)]
Flag = Annotated[bool | None, BeforeValidator(_flag), WithJsonSchema({"type": "boolean"})]
Text = Annotated[
    str | None, BeforeValidator(_text), WithJsonSchema({"type": "string", "maxLength": TEXT_MAX})
]
Uuid = Annotated[
    str | None,
    BeforeValidator(_uuid),
    WithJsonSchema({"type": "string", "format": "uuid", "pattern": _UUID_PATTERN}),
]


def _field(description: str, *names: str) -> Any:
    """A filter field; ``names`` are the names it is read under (the first is the HTTP one)."""
    if names:
        return Field(None, description=description, validation_alias=AliasChoices(*names))
    return Field(None, description=description)


class Filters(BaseModel):
    """Base of every read's filters: closed (an unknown name is refused) and frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Limited(Filters):
    limit: Whole = _field(f"rows at most, clamped to 1..{LIMIT_MAX}; default {LIMIT_DEFAULT}")

    @property
    def rows(self) -> int:
        """``limit`` clamped (out of range is clamped, never refused: meclaw's rule)."""
        value = LIMIT_DEFAULT if self.limit is None else self.limit
        return min(max(value, 1), LIMIT_MAX)


class RegistryFilters(Limited):
    path: Text = _field("exact cell path")
    path_prefix: Text = _field("cell path prefix (plain string prefix)")
    cell_type: Text = _field("cell type (`cell_type` is read too)", "type", "cell_type")
    active: Flag = _field("true: active cells only; false: inactive (and failed) ones")


class GraphFilters(Filters):
    scope: Text = _field("a hive path; nodes and edges with both ends inside it; default /")

    @property
    def root(self) -> str:
        return paths.normalise(self.scope or "/")


class TraceFilters(Limited):
    trace_id: Uuid = _field("the trace")
    path_prefix: Text = _field("to_path prefix")
    correlation_id: Uuid = _field("correlation id")
    error: Flag = _field(
        "true: only hops whose headers carry an error_code (`only_error` is read too)",
        "error",
        "only_error",
    )
    since: Whole = _field("created_at >= since (unix seconds)")


class MessagesFilters(Limited):
    id: Uuid = _field("one message id (wins over every other filter)")
    trace_id: Uuid = _field("the trace")
    parent_message_id: Uuid = _field("the parent message")
    correlation_id: Uuid = _field("correlation id")
    to_path_prefix: Text = _field("to_path prefix")
    from_path_prefix: Text = _field("from_path prefix")
    body_kind: Annotated[
        Literal["inline", "blob"] | None,
        WithJsonSchema({"type": "string", "enum": ["inline", "blob"]}),
    ] = _field("inline or blob")
    since: Whole = _field("created_at >= since (unix seconds)")
    until: Whole = _field("created_at <= until (unix seconds)")
    before_created_at: Whole = _field(
        "page cursor: rows older than this created_at (with before_id: older than the pair)"
    )
    before_id: Uuid = _field(
        "page cursor: rows with a smaller id (with before_created_at: older than the pair)"
    )
    scan_budget: Whole = _field(
        f"rows read before the residual filters, clamped to 1..{SCAN_BUDGET_MAX}; "
        f"default {SCAN_BUDGET_DEFAULT}"
    )
    resolve_blob: Flag = _field("inline a blob body (no effect: bodies are stored inline)")

    @property
    def budget(self) -> int:
        value = SCAN_BUDGET_DEFAULT if self.scan_budget is None else self.scan_budget
        return min(max(value, 1), SCAN_BUDGET_MAX)


class DeadLettersFilters(Limited):
    error_code: Text = _field("one reason code, e.g. ttl_expired")
    since: Whole = _field("created_at >= since (unix seconds; the dead message's own time)")


class RunsFilters(Limited):
    outcome: Annotated[
        Literal["answered", "dead_lettered", "in_flight"] | None,
        WithJsonSchema({"type": "string", "enum": ["answered", "dead_lettered", "in_flight"]}),
    ] = _field("answered, dead_lettered or in_flight")
    cell_prefix: Text = _field("only traces with a hop into a cell under this path prefix")
    scan_budget: Whole = _field(
        f"newest message-log rows read to find the traces, clamped to 1..{SCAN_BUDGET_MAX}; "
        f"default {SCAN_BUDGET_DEFAULT}"
    )

    @property
    def budget(self) -> int:
        value = SCAN_BUDGET_DEFAULT if self.scan_budget is None else self.scan_budget
        return min(max(value, 1), SCAN_BUDGET_MAX)


class StatsFilters(Filters):
    """``/colony/stats`` takes no filter."""


class EventsFilters(Filters):
    """``GET /colony/events``: which live events a watcher wants."""

    trace_id: Uuid = _field("one trace")
    cell: Text = _field("a path prefix, matched against an event's cell, from and to")
    kind: Text = _field("comma-separated kinds: route, handle_start, handle_end, llm, dead_letter")


def _ids(value: Any) -> tuple[int, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        parts = [part for part in value.split(",") if part]
    elif isinstance(value, list):
        parts = value
    else:
        raise _refuse("must be comma-separated dead-letter ids")
    out = []
    for part in parts:
        number = _whole(part)
        assert number is not None
        out.append(number)
    return tuple(out)


class DrainFilters(Filters):
    """``DELETE /colony/dead_letters``: which letters to remove (all when none is given)."""

    error_code: Text = _field("one reason code")
    since: Whole = _field("created_at >= since (unix seconds)")
    ids: Annotated[
        tuple[int, ...] | None,
        BeforeValidator(_ids),
        WithJsonSchema({"type": "string", "pattern": "^([+-]?[0-9]{1,18})?(,[+-]?[0-9]{1,18})*$"}),
    ] = _field("comma-separated dead-letter ids")


def slot(endpoint: str) -> str:
    """The reply-body key a read answers under: the endpoint's last segment."""
    return endpoint.rsplit("/", 1)[-1]


_FILTERS: dict[str, type[Filters]] = {
    "registry": RegistryFilters,
    "graph": GraphFilters,
    "trace": TraceFilters,
    "messages": MessagesFilters,
    "dead_letters": DeadLettersFilters,
    "runs": RunsFilters,
    "stats": StatsFilters,
}

READS: dict[str, type[Filters]] = {
    e.path: _FILTERS[slot(e.path)]
    for e in paths.COLONY_ENDPOINTS
    if e.kind is paths.EndpointKind.READ
}
"""Every read, by endpoint path (the answering ones of :data:`colony.paths.COLONY_ENDPOINTS`,
in its order), with the filters it takes. An answering endpoint without filters fails here,
at import."""


def _names(model: type[Filters]) -> list[str]:
    out: list[Any] = []
    for name, info in model.model_fields.items():
        alias = info.validation_alias
        out.extend(alias.choices if isinstance(alias, AliasChoices) else [name])
    return sorted(str(n) for n in out)


F = TypeVar("F", bound=Filters)


def parse(model: type[F], query: Mapping[str, Any]) -> F:
    """The typed filters of ``query``, or :class:`QueryError` naming the first bad one."""
    try:
        return model.model_validate(dict(query))
    except ValidationError as exc:
        error = exc.errors(include_url=False, include_input=False)[0]
        key = ".".join(str(part) for part in error["loc"]) or "query"
        known = _names(model)
        if error["type"] == "extra_forbidden":
            if key in known:
                raise QueryError(key, f"{key}: the same filter is given under two names") from None
            raise QueryError(
                key, f"{key} is not a filter of this read; it takes {', '.join(known)}"
            ) from None
        if error["type"] == "literal_error":
            raise QueryError(key, f"{key}: {error['msg'].lower()}") from None
        raise QueryError(key, f"{key} {error['msg']}") from None


def parse_http(model: type[F], items: list[tuple[str, str]]) -> F:
    """The filters of an HTTP query string (a name given twice is refused)."""
    seen: dict[str, str] = {}
    for name, value in items:
        checked = _text_name(name)
        if checked in seen:
            raise QueryError(checked, f"{checked} is given more than once; give it once")
        seen[checked] = value
    return parse(model, seen)


def _text_name(name: str) -> str:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise QueryError("query", "a query parameter name is not valid Unicode") from None
    return name


def parse_message(endpoint: str, body: Any) -> Filters:
    """The filters of a routed read: ``body["query"]`` (absent or null: the defaults). For
    ``/colony/graph`` a top-level ``scope`` is read too when the query has none (meclaw's
    deprecated alias)."""
    model = READS[endpoint]
    query = body.get("query") if isinstance(body, dict) else None
    if query is None:
        query = {}
    if not isinstance(query, dict):
        raise QueryError("query", 'query must be an object: {"query": {"<filter>": value}}')
    legacy = body.get("scope") if isinstance(body, dict) else None
    if model is GraphFilters and "scope" not in query and legacy is not None:
        query = {**query, "scope": legacy}
    try:
        return parse(model, query)
    except QueryError as exc:
        raise QueryError(f"query.{exc.key}", f"query.{exc.detail}") from None
