"""The ``proxy`` cell type: a Telegram bot bridged into the colony (long-running)."""

from __future__ import annotations

from cells.proxy.cell import ProxyCell, split_message
from cells.proxy.params import ProxyParams
from colony.cell import CellClass, CellType, pydantic_check

PROXY = CellType(
    "proxy",
    CellClass.LONG_RUNNING,
    ProxyCell,
    check_params=pydantic_check(ProxyParams),
)

__all__ = ["PROXY", "ProxyCell", "ProxyParams", "split_message"]
