"""What every wire shape provides: a pure function pair and a few facts about its endpoint.

UBF is the common language. A conversation's tool calls are UBF ``tool_call`` turns whose text
is ``{"name": …, "arguments": "<JSON string>"}`` whatever the provider, so dispatchers and
collectors never care which brain made the call. What UBF cannot hold — thinking blocks and
their signatures, reasoning items, thought signatures, ``reasoning_content`` — a dialect returns
as :attr:`Reply.native`; the cell keeps it keyed by the turn's call ids and hands it back
through ``native(call_ids)`` when that turn is replayed, so the provider sees its own blocks
again byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from colony.jsonwire import JsonRefused, loads

JsonObject = dict[str, Any]

FINISH_REASONS = ("stop", "length", "tool_calls", "content_filter")
"""The chat vocabulary every dialect reports in ``hop.finish_reason``, so edges keep working."""


class TranslateError(Exception):
    """The conversation or a tool cannot be put on this wire (``provider_error``, translate)."""


class ReplyError(Exception):
    """The provider's answer is unusable (``provider_error``, parse)."""


@dataclass(frozen=True, slots=True)
class Tool:
    """One tool, provider-neutral."""

    name: str
    description: str | None
    parameters: JsonObject
    """JSON Schema of the arguments (an object schema)."""
    strict: bool | None = None


@dataclass(slots=True)
class Usage:
    """Token counts, normalised across providers."""

    input: int | None = None
    """Prompt tokens neither read from nor written to a cache."""
    output: int | None = None
    """Generated tokens, reasoning included."""
    cache_read: int | None = None
    cache_creation: int | None = None

    @property
    def prompt_total(self) -> int | None:
        """The whole prompt (what the context window holds): ``hop.tokens_prompt``."""
        if self.input is None and self.cache_read is None and self.cache_creation is None:
            return None
        return (self.input or 0) + (self.cache_read or 0) + (self.cache_creation or 0)


@dataclass(slots=True)
class Reply:
    """A provider answer in UBF terms."""

    turns: list[JsonObject]
    """tool_call turns first (text = ``{"name", "arguments": "<json>"}``), then the text turn."""
    finish_reason: str
    """One of :data:`FINISH_REASONS`."""
    stop_reason: str | None
    """The provider's own word for why it stopped, unmapped."""
    model: str | None
    response_id: str | None
    usage: Usage = field(default_factory=Usage)
    text: str | None = None
    calls: list[str] = field(default_factory=list)
    """The call ids of this turn, in order (the key its native blocks are kept under)."""
    refusal_category: str | None = None
    native: Any = None
    """Provider-native blocks to re-attach on replay (opaque JSON), or None."""

    @property
    def empty(self) -> bool:
        """Nothing said, nothing called, (almost) nothing generated: ask once more."""
        if self.finish_reason == "content_filter":
            return False  # a refusal is an answer, even a silent one: never asked again
        silent = self.text is None or not self.text.strip()
        return silent and not self.calls and (self.usage.output or 0) <= 3


NativeLookup = Callable[[tuple[str, ...]], Any]
"""``native(call_ids)``: what a dialect returned as :attr:`Reply.native` for the turn that made
exactly these calls, or None."""


class Dialect(Protocol):
    """One wire shape. Implementations are stateless; every method is a pure function."""

    name: ClassVar[str]

    def url(self, base_url: str, model: str) -> str:
        """Where one call is POSTed."""
        ...

    def headers(self, api_key: str) -> dict[str, str]:
        """Authentication and version headers (none when ``api_key`` is empty)."""
        ...

    def tool(self, tool: Tool) -> Any:
        """The provider's tool object (raise :class:`TranslateError` if it cannot express it)."""
        ...

    def request(
        self,
        *,
        model: str,
        prompt: str,
        tools: list[Tool],
        turns: list[Any],
        max_tokens: int,
        temperature: float,
        native: NativeLookup,
        extra: Mapping[str, Any],
    ) -> JsonObject:
        """The request body for a conversation (``extra`` is merged last)."""
        ...

    def parse(self, body: Any) -> Reply:
        """A response body as UBF (raise :class:`ReplyError`)."""
        ...

    def in_body_error(self, body: Any) -> tuple[int | None, str | None] | None:
        """``(status, message)`` when a 200 answer is really an error, else None."""
        ...


def compact(value: Any, *, sort_keys: bool = False) -> str:
    """Compact UTF-8 JSON (the separators every provider's own serializer uses)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=sort_keys)


def call_text(name: str, arguments: Any) -> str:
    """The UBF tool_call text: ``{"arguments": "<compact JSON>", "name": …}``, sorted keys."""
    if not isinstance(arguments, str):
        arguments = compact(arguments)
    return compact({"arguments": arguments, "name": name}, sort_keys=True)


def parse_call(turn: JsonObject, index: int) -> tuple[str, str, Any]:
    """``(id, name, arguments object)`` of a UBF tool_call turn; invalid argument JSON becomes
    ``{}`` only when empty, else :class:`TranslateError`."""
    text = turn.get("text")
    if not isinstance(text, str):
        raise TranslateError(f"messages[{index}] is a tool_call without text")
    try:
        function = loads(text)
    except JsonRefused as exc:
        raise TranslateError(
            f"messages[{index}] tool_call text is not JSON: {exc.problem}"
        ) from None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise TranslateError(f"messages[{index}] tool_call text needs a name")
    raw = function.get("arguments", "{}")
    if isinstance(raw, str):
        try:
            arguments = loads(raw) if raw.strip() else {}
        except JsonRefused as exc:
            raise TranslateError(
                f"messages[{index}] tool_call arguments are not JSON: {exc.problem}"
            ) from None
    else:
        arguments = raw
    return str(turn.get("id", "")), function["name"], arguments


def tool_from_leaf(value: Any, where: str) -> Tool:
    """A :class:`Tool` from a ``system.tools.*`` leaf's JSON: an OpenAI chat tool
    ``{"type": "function", "function": {...}}``, a flat ``{name, description, parameters}``,
    or an Anthropic-style ``{name, description, input_schema}``."""
    if not isinstance(value, dict):
        raise TranslateError(f"{where}: a tool must be a JSON object")
    nested = value.get("function")
    spec: dict[str, Any] = (
        nested if value.get("type") == "function" and isinstance(nested, dict) else value
    )
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise TranslateError(f"{where}: the tool has no name")
    parameters = spec.get(
        "parameters", spec.get("input_schema", {"type": "object", "properties": {}})
    )
    if not isinstance(parameters, dict):
        raise TranslateError(f"{where}: the tool's parameters must be a JSON Schema object")
    description = spec.get("description")
    strict = spec.get("strict")
    return Tool(
        name=name,
        description=description if isinstance(description, str) else None,
        parameters=parameters,
        strict=strict if isinstance(strict, bool) else None,
    )


ERROR_KEY = "$error"
"""A tool result whose text is the JSON object ``{"$error": "<message>"}`` reports a failed
call: providers with an error flag (Anthropic ``is_error``, Gemini ``response.error``) get it
set. The ``$`` keeps a tool's own ``{"error": …}`` output from being mistaken for one."""


def error_text(message: Any) -> str:
    """The UBF text of a failed tool call."""
    return compact({ERROR_KEY: message if isinstance(message, str) else compact(message)})


def error_of(text: str) -> str | None:
    """The message of a failed-call result text, or None for an ordinary result."""
    if not text.startswith("{"):
        return None
    try:
        value = loads(text)
    except JsonRefused:
        return None
    if not isinstance(value, dict) or list(value) != [ERROR_KEY]:
        return None
    error = value[ERROR_KEY]
    return error if isinstance(error, str) else compact(error)
