"""The ``store`` cell type: typed SQLite tables with a single writer."""

from __future__ import annotations

from cells.store.cell import StoreCell
from cells.store.params import StoreParams, check_folder
from colony.cell import CellClass, CellType, pydantic_check

STORE = CellType(
    "store",
    CellClass.STATEFUL,
    StoreCell,
    check_params=pydantic_check(StoreParams, check_folder),
)

__all__ = ["STORE", "StoreCell", "StoreParams"]
