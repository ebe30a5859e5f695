"""One provider call over HTTP: retries with capped backoff, and errors mapped to codes.

429 and 5xx answers (and connections that never reached the server) are retried up to
``max_retries`` times, waiting ``Retry-After`` when the server says so, else 0.5 s, 1 s, 2 s …
capped at 8 s. Every retry is logged. What is left is mapped to the cell's error codes:
401 ``auth``, 404 ``model_not_found``, 429 ``rate_limit``, an attempt past
``external_timeout_ms`` ``timeout``, everything else ``provider_error``. An answer is read as
standard JSON (:mod:`colony.jsonwire`): ``NaN``, a lone surrogate or nesting past 128 levels
is a ``provider_error`` naming the problem, as meclaw's parser refuses them too, and never
reaches the colony.
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from typing import Any

import httpx

from cells.llm.params import BACKOFF_BASE_S, BACKOFF_CAP_S
from colony.jsonwire import JsonRefused, loads
from colony.observability import Logger

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


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return min(max(float(value), 0.0), _MAX_RETRY_AFTER_S)
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        if parsed is None:
            return None
        return min(max(parsed.timestamp() - time.time(), 0.0), _MAX_RETRY_AFTER_S)


def _upstream_message(response: httpx.Response) -> str | None:
    try:
        body = loads(response.text)
    except JsonRefused:
        return response.text[:500] or None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        message = body["error"].get("message")
        return str(message)[:500] if message is not None else None
    return None


async def post(
    client: httpx.AsyncClient,
    url: str,
    content: bytes,
    headers: dict[str, str],
    *,
    attempt_timeout: float,
    max_retries: int,
    log: Logger | None,
    cell: str,
    trace_id: str,
) -> Any:
    """POST and return the parsed JSON of a 2xx answer, or raise :class:`ProviderWireError`."""
    attempt = 0
    while True:
        try:
            response = await client.post(
                url, content=content, headers=headers, timeout=attempt_timeout
            )
        except httpx.TimeoutException:
            raise ProviderWireError("timeout", f"no answer within {attempt_timeout:g} s") from None
        except httpx.ConnectError as exc:
            if attempt < max_retries:
                attempt += 1
                delay = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (attempt - 1))
                _log_retry(log, cell, trace_id, attempt, max_retries, delay, "connect", None)
                await asyncio.sleep(delay)
                continue
            raise ProviderWireError("provider_error", f"cannot connect: {exc}") from None
        except httpx.HTTPError as exc:
            raise ProviderWireError("provider_error", f"the request failed: {exc}") from None
        status = response.status_code
        if (status == 429 or status >= 500) and attempt < max_retries:
            attempt += 1
            delay = _retry_after(response)
            if delay is None:
                delay = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** (attempt - 1))
            _log_retry(log, cell, trace_id, attempt, max_retries, delay, "status", status)
            await asyncio.sleep(delay)
            continue
        if status >= 300:
            raise ProviderWireError(
                error_code_for(status),
                f"HTTP {status}",
                status=status,
                upstream=_upstream_message(response),
            )
        try:
            return loads(response.text)
        except JsonRefused as exc:
            raise ProviderWireError(
                "provider_error", f"the answer is not JSON: {exc.problem}", status=status
            ) from None


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
