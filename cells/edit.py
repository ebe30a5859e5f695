"""The ``edit`` cell type (placeholder: the real one replaces this module)."""

from __future__ import annotations

from colony.cell import Cell, CellClass, CellSpec, CellType
from colony.errors import BootError


def _not_built(spec: CellSpec) -> Cell:
    raise BootError([f"{spec.path}: the edit cell type is not built yet"])


EDIT = CellType("edit", CellClass.STATELESS, _not_built)
