"""The ``code`` cell type: a user's script per message, over stdin/stdout JSON."""

from __future__ import annotations

from cells.code.cell import CodeCell
from cells.code.params import CodeParams, check_folder, runs_ahead
from colony.cell import CellClass, CellType, pydantic_check

CODE = CellType(
    "code",
    CellClass.STATELESS,
    CodeCell,
    default_max_concurrency=4,
    check_params=pydantic_check(CodeParams, check_folder),
    checks_own_emits=True,
    runs_ahead=runs_ahead,
)

__all__ = ["CODE", "CodeCell", "CodeParams"]
