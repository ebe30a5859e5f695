"""The ``web_search`` and ``web_fetch`` cell types: HTTP GET tool cells.

``web_search`` asks one configured search endpoint; ``web_fetch`` fetches any URL a call
names, behind the private-network deny of :mod:`cells.web.ssrf`. Both are stateless and
answer each ``tool_call`` with one ``tool_result`` (:mod:`cells.web.common`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cells.web.fetch import WebFetchCell, WebFetchParams
from cells.web.search import WebSearchCell, WebSearchParams
from colony.cell import CellClass, CellType, pydantic_check

_BACKSTOP_MARGIN_MS = 5_000


def _floor(
    model: type[WebFetchParams] | type[WebSearchParams],
) -> Callable[[Any], int | None]:
    """The colony's ``message_timeout`` backstop must not cut a call the cell would end
    itself with a typed ``timeout``: the cell's own limit plus a margin."""

    def floor(params: Any) -> int | None:
        try:
            parsed = model.model_validate({} if params is None else params)
        except ValueError:
            return None
        return parsed.external_timeout_ms + _BACKSTOP_MARGIN_MS

    return floor


WEB_SEARCH = CellType(
    "web_search",
    CellClass.STATELESS,
    WebSearchCell,
    default_max_concurrency=8,
    check_params=pydantic_check(WebSearchParams),
    backstop_floor_ms=_floor(WebSearchParams),
)

WEB_FETCH = CellType(
    "web_fetch",
    CellClass.STATELESS,
    WebFetchCell,
    default_max_concurrency=32,
    check_params=pydantic_check(WebFetchParams),
    backstop_floor_ms=_floor(WebFetchParams),
)

__all__ = [
    "WEB_FETCH",
    "WEB_SEARCH",
    "WebFetchCell",
    "WebFetchParams",
    "WebSearchCell",
    "WebSearchParams",
]
