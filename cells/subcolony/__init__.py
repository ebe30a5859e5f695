"""The ``subcolony`` cell type: a child colony, run as a process, behind one cell (long-running)."""

from __future__ import annotations

from cells.subcolony.cell import SubcolonyCell
from cells.subcolony.params import SubcolonyParams, check_root
from colony.cell import CellClass, CellType, pydantic_check

SUBCOLONY = CellType(
    "subcolony",
    CellClass.LONG_RUNNING,
    SubcolonyCell,
    default_max_concurrency=SubcolonyParams.model_fields["max_concurrency"].default,
    check_params=pydantic_check(SubcolonyParams, check_root),
    handles_concurrently=True,
)

__all__ = ["SUBCOLONY", "SubcolonyCell", "SubcolonyParams"]
