"""The ``store`` cell type: typed SQL tables with a single writer, in the colony's database."""

from __future__ import annotations

from cells.store.cell import StoreCell, open_store
from cells.store.params import StoreParams, check_folder
from colony.cell import CellClass, CellType, pydantic_check

STORE = CellType(
    "store",
    CellClass.STATEFUL,
    open_store,
    check_params=pydantic_check(StoreParams, check_folder),
    runs_ahead=lambda spec: True,
)

__all__ = ["STORE", "StoreCell", "StoreParams", "open_store"]
