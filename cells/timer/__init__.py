"""The ``timer`` cell type: cron (6 fields, seconds, UTC) and one-shot schedules in ``cell.db``
that fire source messages."""

from __future__ import annotations

from cells.timer.cell import Clock, SystemClock, TimerCell
from cells.timer.params import TimerParams
from colony.cell import CellClass, CellType, pydantic_check

TIMER = CellType(
    "timer", CellClass.LONG_RUNNING, TimerCell, check_params=pydantic_check(TimerParams)
)

__all__ = ["TIMER", "Clock", "SystemClock", "TimerCell", "TimerParams"]
