"""``params`` of a ``timer`` cell: what it is born with, and the keys a runtime ``params`` body
slot may change."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from cells import runtime_params
from cells.timer.ops import TimerOpError, parse_op

__all__ = ["MUTABLE_PARAMS", "TimerParams", "update_problem"]

MUTABLE_PARAMS = ("query_timeout_ms",)
"""The keys a ``params`` body slot may change; the overlay of cell.db keeps them."""


class TimerParams(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)

    query_timeout_ms: Annotated[int, Field(ge=1)] = 5000
    """A cell.db operation running longer is interrupted (``query_timeout``); changeable at
    runtime with a ``params`` body slot."""
    schedules: list[dict[str, Any]] = Field(default_factory=list)
    """``add`` ops stored when ``cell.db`` is created; ignored on every later start."""

    @field_validator("schedules")
    @classmethod
    def _seeds(cls, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        seen: set[str] = set()
        for index, entry in enumerate(value):
            try:
                op = parse_op(entry)
            except TimerOpError as exc:
                raise PydanticCustomError(
                    "invalid_schedule", "schedules[{i}]: {d}", {"i": index, "d": exc.detail}
                ) from None
            if op.op != "add":
                raise PydanticCustomError(
                    "invalid_schedule", "schedules[{i}]: a seed must be an add op", {"i": index}
                )
            if op.schedule_id in seen:
                raise PydanticCustomError(
                    "invalid_schedule",
                    "schedules[{i}]: schedule_id {s} appears twice",
                    {"i": index, "s": op.schedule_id},
                )
            seen.add(op.schedule_id)
        return value


def update_problem(update: Any) -> str | None:
    """Why a ``params`` body slot cannot be applied, or None (:mod:`cells.runtime_params`)."""
    return runtime_params.update_problem(update, mutable=MUTABLE_PARAMS)
