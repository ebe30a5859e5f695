"""One provider call over HTTP: retries with capped backoff, and errors mapped to codes.

429 and 5xx answers (and connections that never reached the server) are retried up to
``max_retries`` times, waiting ``Retry-After`` when the server says so, else 0.5 s, 1 s, 2 s …
capped at 8 s. Every retry is logged. What is left is mapped to the cell's error codes:
401 ``auth``, 404 ``model_not_found``, 429 ``rate_limit``, an attempt past
``external_timeout_ms`` ``timeout``, everything else ``provider_error``. An answer is read as
standard JSON (:mod:`colony.jsonwire`): ``NaN``, a lone surrogate or nesting past 128 levels
is a ``provider_error`` naming the problem, as meclaw's parser refuses them too, and never
reaches the colony.

With telemetry on, each request carries a W3C ``traceparent`` naming the handling's LLM-call
span (:func:`colony.telemetry.context.outgoing_traceparent`), so a provider that traces joins
the colony's trace.

The client is aiohttp's, not httpx's: measured against the scripted provider on loopback, one
call cost about 1.3 ms of CPU with httpx and 0.3 ms with aiohttp (client and server together),
and a turn of the tool loop makes seven of them. The body is sent as the exact bytes the dialect
encoded; the answer is read as bytes and decoded as UTF-8 (a JSON answer has no other charset).
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import Mapping
from typing import Any

import aiohttp
from yarl import URL

from cells.llm.params import BACKOFF_BASE_S, BACKOFF_CAP_S
from colony.jsonwire import JsonRefused, loads
from colony.observability import Logger
from colony.telemetry.context import outgoing_traceparent

STATUS_CODES = {401: "auth", 404: "model_not_found", 429: "rate_limit"}
_MAX_RETRY_AFTER_S = 60.0


class ProviderWireError(Exception):
    """The call failed: ``code`` is the cell's error code, ``detail`` says why."""

    def __init__(
        self, code: str, detail: str, *, status: int | None = None, upstream: str | None = None
    ) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.status = status
        self.upstream = upstream


def error_code_for(status: int) -> str:
    return STATUS_CODES.get(status, "provider_error")


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return min(max(float(value), 0.0), _MAX_RETRY_AFTER_S)
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        if parsed is None:
            return None
        return min(max(parsed.timestamp() - time.time(), 0.0), _MAX_RETRY_AFTER_S)


def _upstream_message(text: str) -> str | None:
    try:
        body = loads(text)
    except JsonRefused:
        return text[:500] or None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        message = body["error"].get("message")
        return str(message)[:500] if message is not None else None
    return None


async def post(
    client: aiohttp.ClientSession,
    url: str,
    content: bytes,
    headers: dict[str, str],
    *,
    attempt_timeout: float,
    max_retries: int,
    log: Logger | None,
    cell: str,
    trace_id: str,
    model: str | None = None,
    provider: str | None = None,
) -> Any:
    """POST and return the parsed JSON of a 2xx answer, or raise :class:`ProviderWireError`
    (``model``, ``provider``: what the request asks, for the LLM-call span)."""
    attempt = 0
    timeout = aiohttp.ClientTimeout(total=attempt_timeout)
    target, headers = _credentials_as_header(url, headers)
    traceparent = outgoing_traceparent(model, provider)  # None unless telemetry is on
    if traceparent is not None:
        headers = {**headers, "traceparent": traceparent}
    while True:
        try:
            sent = client.post(target, data=content, headers=headers, timeout=timeout)
            async with sent as answer:
                status = answer.status
                answer_headers = answer.headers
                raw = await answer.read()
        except TimeoutError:
            raise ProviderWireError("timeout", f"no answer within {attempt_timeout:g} s") from None
        except aiohttp.ClientConnectorError as exc:
            if attempt < max_retries:
                attempt += 1
                delay = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (attempt - 1))
                _log_retry(log, cell, trace_id, attempt, max_retries, delay, "connect", None)
                await asyncio.sleep(delay)
                continue
            raise ProviderWireError("provider_error", f"cannot connect: {exc}") from None
        except (aiohttp.ClientError, ValueError) as exc:
            raise ProviderWireError("provider_error", f"the request failed: {exc}") from None
        if (status == 429 or status >= 500) and attempt < max_retries:
            attempt += 1
            delay = _retry_after(answer_headers)
            if delay is None:
                delay = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (attempt - 1))
            _log_retry(log, cell, trace_id, attempt, max_retries, delay, "status", status)
            await asyncio.sleep(delay)
            continue
        text = raw.decode("utf-8", errors="replace")
        if status >= 300:
            raise ProviderWireError(
                error_code_for(status),
                f"HTTP {status}",
                status=status,
                upstream=_upstream_message(text),
            )
        try:
            return loads(text)
        except JsonRefused as exc:
            raise ProviderWireError(
                "provider_error", f"the answer is not JSON: {exc.problem}", status=status
            ) from None


def _credentials_as_header(url: str, headers: dict[str, str]) -> tuple[URL, dict[str, str]]:
    """A ``user:password@`` in a base URL becomes Basic authorization unless the dialect sets
    its own ``Authorization`` (an API key wins); either way it leaves the URL (aiohttp refuses
    both at once, and the credentials must never reach a log through the URL)."""
    parsed = URL(url)
    if parsed.user is None and parsed.password is None:
        return parsed, headers
    if not any(name.lower() == "authorization" for name in headers):
        basic = aiohttp.BasicAuth(parsed.user or "", parsed.password or "")
        headers = {**headers, "Authorization": basic.encode()}
    return parsed.with_user(None), headers


def _log_retry(
    log: Logger | None,
    cell: str,
    trace_id: str,
    attempt: int,
    limit: int,
    delay: float,
    why: str,
    status: int | None,
) -> None:
    if log is not None:
        log.warning(
            "llm_retry",
            cell=cell,
            trace_id=trace_id,
            attempt=attempt,
            max_retries=limit,
            delay_s=round(delay, 3),
            reason=why,
            status=status,
        )
