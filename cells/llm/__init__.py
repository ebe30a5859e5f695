"""The ``llm`` cell type: one provider call per message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cells.llm.cell import LlmCell
from cells.llm.params import LlmParams, backstop_floor_ms, unknown_keys
from cells.llm.state import SeedError, read_system_seed
from colony.cell import CellClass, CellType, ParamProblem, pydantic_check


def _check_folder(params: LlmParams, folder: Path | None) -> list[ParamProblem]:
    problems = unknown_keys(params, folder)
    seed = folder / "seed" / "system.jsonl" if folder is not None else None
    if seed is not None and seed.is_file():
        try:
            read_system_seed(seed)
        except SeedError as exc:
            problems.append(ParamProblem((), "invalid_seed", f"seed/system.jsonl: {exc}"))
    return problems


def _floor(params: Any) -> int | None:
    return backstop_floor_ms(params)


LLM = CellType(
    "llm",
    CellClass.STATEFUL,
    LlmCell,
    check_params=pydantic_check(LlmParams, _check_folder),
    backstop_floor_ms=_floor,
)

__all__ = ["LLM", "LlmCell", "LlmParams"]
