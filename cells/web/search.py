"""The ``web_search`` cell: ``GET <endpoint>?q=<query>``, the answer as one tool result.

The endpoint speaks the generic shape ``{"results": [{"title", "url", "snippet"}, ...]}``
(front a provider with a shim if it does not). A list longer than ``max_results`` is trimmed in
place and says so inside the JSON (``"truncated": true, "total_results": n``), because the
model reads the text, not the hop header; any other body passes through byte for byte. Then
the byte cap applies, visibly. ``header.result_count`` and ``header.bytes`` always describe
the full answer.

Unlike meclaw, a non-2xx answer is an error (``http_error``): a search backend that is down
or refuses the key should not read as an empty result list. Every error text passes through
:class:`cells.redact.Redactor` (an endpoint may echo the key it refused), and an answer never
carries the cell's own key back.
"""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any
from urllib.parse import urlencode

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from cells.redact import Redactor
from cells.text import cut_visibly, dumps_sorted, utf8_len
from cells.toolcall import (
    ToolCallError,
    elapsed_ms,
    parse_tool_call,
    string_arg,
    tool_error,
    tool_result,
)
from cells.web.common import human_duration, lossy_utf8, lossy_utf8_prefix, read_capped
from colony.cell import CellSpec, Emission
from colony.envelope import Envelope, JsonObject
from colony.jsonwire import loads as loads_strict

READ_CEILING = 16 * 1024 * 1024
"""The most of an answer the cell reads. A search answer is parsed whole to count its
results; past this size it is treated as a non-conforming body (``result_count: 0``) and cut."""

MAX_REDIRECTS = 10
"""Redirects followed on the way to the endpoint (what meclaw's HTTP client follows)."""

_ERROR_EXCERPT = 500
"""How many characters of a non-2xx answer an ``http_error`` quotes."""


class WebSearchParams(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)

    endpoint: str
    """The search URL; ``q=<query>`` is appended to its query string."""
    api_key: str | None = None
    """Sent as ``Authorization: Bearer <api_key>``; empty or null sends no header."""
    external_timeout_ms: Annotated[int, Field(ge=1)] = 15_000
    """Wall clock for one search, redirects and body included (``timeout``)."""
    max_concurrency: Annotated[int, Field(ge=1)] = 8
    max_results: Annotated[int, Field(ge=1)] = 10
    """A longer ``results`` list is trimmed to this many entries."""
    max_bytes: Annotated[int, Field(ge=1)] = 256 * 1024
    """The reply text is cut visibly past this many UTF-8 bytes."""

    @field_validator("endpoint")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value:
            raise PydanticCustomError("empty_endpoint", "endpoint is empty")
        try:
            url = httpx.URL(value)
        except (httpx.InvalidURL, ValueError) as exc:
            raise PydanticCustomError(
                "invalid_endpoint",
                "endpoint '{url}' is not a valid URL: {e}",
                {"url": value, "e": str(exc)},
            ) from None
        if url.scheme not in ("http", "https") or not url.host:
            raise PydanticCustomError(
                "invalid_endpoint",
                "endpoint '{url}' must be an http:// or https:// URL with a host",
                {"url": value},
            )
        return value


def search_url(endpoint: str, query: str) -> str:
    """``endpoint`` with ``q=<query>`` (form-encoded) added to its query string."""
    url = httpx.URL(endpoint)
    encoded = urlencode({"q": query})
    existing = url.query.decode("ascii")
    if existing and not existing.endswith("&"):
        existing += "&"
    return str(url.copy_with(query=(existing + encoded).encode("ascii")))


def shape_results(text: str, max_results: int) -> tuple[str, int, bool]:
    """``(text, result_count, trimmed)``: the full count of a ``results`` array, and the
    text with the array trimmed to ``max_results`` (re-serialised, sorted and compact) when
    it is longer; otherwise ``text`` itself, untouched."""
    try:
        value = loads_strict(text)
    except (ValueError, RecursionError):
        return text, 0, False
    results = value.get("results") if isinstance(value, dict) else None
    if not isinstance(results, list):
        return text, 0, False
    count = len(results)
    if count <= max_results:
        return text, count, False
    trimmed = {**value, "results": results[:max_results], "truncated": True, "total_results": count}
    try:
        out = dumps_sorted(trimmed)
        out.encode("utf-8")
    except (ValueError, UnicodeEncodeError):  # a lone surrogate: serde would have refused it
        return text, 0, False
    return out, count, True


class WebSearchCell:
    def __init__(self, spec: CellSpec) -> None:
        self.params = WebSearchParams.model_validate({} if spec.params is None else spec.params)
        self.path = spec.path
        self.log = spec.log
        self.redactor = Redactor([self.params.api_key])
        headers = {"Authorization": f"Bearer {self.params.api_key}"} if self.params.api_key else {}
        self.client = httpx.AsyncClient(
            headers=headers,
            follow_redirects=True,
            max_redirects=MAX_REDIRECTS,
            timeout=None,  # asyncio.timeout bounds the whole search instead
            trust_env=False,
        )

    async def close(self) -> None:
        await self.client.aclose()

    async def handle(self, message: Envelope) -> list[Emission]:
        return [Emission(await self.answer(message.body), message.reply_to or self.path)]

    async def answer(self, body: Any) -> JsonObject:
        """The reply to one message body."""
        started = time.perf_counter()
        try:
            call = parse_tool_call(body)
        except ToolCallError as failure:
            return self._error(failure.code, failure.text, failure.call_id, started, {})
        call_id = call.id
        try:
            query = string_arg(call.args, "query")
            async with asyncio.timeout(self.params.external_timeout_ms / 1000):
                return await self._search(query, started, call_id)
        except ToolCallError as failure:
            return self._error(failure.code, failure.text, call_id, started, failure.header)
        except TimeoutError:
            text = f"web_search timed out after {human_duration(self.params.external_timeout_ms)}"
            return self._error("timeout", text, call_id, started, {})

    async def _search(self, query: str, started: float, call_id: str | None) -> JsonObject:
        p = self.params
        try:
            async with self.client.stream("GET", search_url(p.endpoint, query)) as response:
                status = response.status_code
                data, complete = await read_capped(response.aiter_bytes(), READ_CEILING)
                # A compressed answer's Content-Length is not the size of what was read.
                encoded = response.headers.get("content-encoding", "identity") != "identity"
                declared = "" if encoded else response.headers.get("content-length", "")
        except (httpx.HTTPError, httpx.InvalidURL, OSError) as exc:
            # The endpoint's URL is not quoted: its query string may carry a key.
            detail = str(exc) or type(exc).__name__
            raise ToolCallError("io_error", f"web_search request failed: {detail}") from None
        if not 200 <= status < 300:
            excerpt = lossy_utf8(data[: _ERROR_EXCERPT * 4]).strip()[:_ERROR_EXCERPT]
            text = f"web_search endpoint answered HTTP {status}"
            reason = httpx.codes.get_reason_phrase(status)
            if reason:
                text += f" {reason}"
            if excerpt:
                text += f": {excerpt}"
            raise ToolCallError("http_error", text, http_status=status)
        if complete:
            text = self.redactor.known(lossy_utf8(data))
            total = utf8_len(text)
            text, result_count, trimmed = shape_results(text, p.max_results)
            shown, cut = cut_visibly(text, p.max_bytes)
        else:
            total = max(int(declared), len(data)) if declared.isdigit() else len(data)
            result_count, trimmed = 0, False
            prefix = self.redactor.known(lossy_utf8_prefix(data))
            shown, cut = cut_visibly(prefix, p.max_bytes, total=total)
        header: JsonObject = {
            "operation": "web_search",
            "result_count": result_count,
            "duration_ms": elapsed_ms(started),
            "bytes": total,
        }
        if trimmed or cut:
            header["truncated"] = True
        if self.log is not None:
            self.log.debug("web_search_ok", cell=self.path, result_count=result_count, bytes=total)
        return tool_result(shown, call_id, header)

    def _error(
        self, code: str, text: str, call_id: str | None, started: float, extra: JsonObject
    ) -> JsonObject:
        header: JsonObject = {
            "operation": "web_search",
            "duration_ms": elapsed_ms(started),
            **extra,
        }
        if self.log is not None:
            self.log.info("web_search_error", cell=self.path, error_code=code)
        return tool_error(code, self.redactor.text(text), call_id, header)
