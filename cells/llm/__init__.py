"""The ``llm`` cell type: one provider call per message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cells.llm.cell import LlmCell
from cells.llm.dialects import dialect_for
from cells.llm.dialects.base import TranslateError, tool_from_leaf
from cells.llm.params import LlmParams, backstop_floor_ms, transcript_problems, unknown_keys
from cells.llm.state import SystemSeedError, read_system_seed
from colony.cell import CellClass, CellType, ParamProblem, pydantic_check
from colony.jsonwire import loads


def _check_folder(params: LlmParams, folder: Path | None) -> list[ParamProblem]:
    cluster = "a cluster" if _in_a_cluster(folder) else None  # (its DSN: never shown here)
    problems = unknown_keys(params, folder) + transcript_problems(params, cluster)
    seed = folder / "seed" / "system.jsonl" if folder is not None else None
    if seed is not None and seed.is_file():
        try:
            slots = read_system_seed(seed)
        except SystemSeedError as exc:
            problems.append(ParamProblem((), "invalid_seed", f"seed/system.jsonl: {exc}"))
            return problems
        problems += _check_tools(params.provider, slots)
    return problems


def _in_a_cluster(folder: Path | None) -> bool:
    """The tree this cell's folder is in has a ``cluster`` block (the nearest colony.json up
    from it): a postgres transcript store with no DSN of its own then uses the cluster's."""
    for parent in [] if folder is None else folder.parents:
        file = parent / "colony.json"
        if file.is_file():
            try:
                doc = loads(file.read_bytes())
            except ValueError:
                return False
            return isinstance(doc, dict) and isinstance(doc.get("cluster"), dict)
    return False


def _check_tools(provider: str, slots: dict[str, Any]) -> list[ParamProblem]:
    """Every seeded tool must be expressible on this cell's wire: never a silent drop."""
    dialect = dialect_for(provider)
    problems: list[ParamProblem] = []
    for path in sorted(p for p in slots if p.startswith("tools.")):
        where = f"seed/system.jsonl slot {path}"
        try:
            leaf = loads(slots[path].get("text", ""))
            dialect.tool(tool_from_leaf(leaf, where))
        except (ValueError, TranslateError) as exc:
            problems.append(
                ParamProblem(
                    ("provider",),
                    "tool_unsupported",
                    f"{where}: provider {provider} cannot carry this tool: {exc}",
                    "rename the tool or change its schema so every provider can express it.",
                )
            )
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
