"""The one rule for a ``params`` body slot sent to a running cell: which keys it may change.

A cell that keeps runtime params (the overlay of :mod:`cells.cellfile`) refuses a slot that
is not an object, names a key it may not change, or gives a timeout that is not a positive
integer, before anything is applied: a slot is applied whole or not at all. Every such cell
says it the same way, listing what may change, so an operator reads one wording whichever
cell refused.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

__all__ = ["key_problem", "update_problem"]


def key_problem(
    update: Any, *, mutable: Sequence[str], fixed: Collection[str] | None = None, kind: str = ""
) -> str | None:
    """Why ``update`` cannot be applied for its shape or its keys, or None. ``fixed``: the
    type's other params, when it can tell a key fixed for the cell's life (``cannot be changed
    at runtime``) from a misspelt one (``is not a <kind> param``); None calls every key outside
    ``mutable`` the former."""
    if not isinstance(update, dict):
        return "params must be an object"
    listed = ", ".join(mutable)
    for key in update:
        if key in mutable:
            continue
        if fixed is not None and key not in fixed:
            of = f"a {kind} param" if kind else "a param of this cell type"
            return f"params.{key} is not {of} (mutable: {listed})"
        return f"params.{key} cannot be changed at runtime (mutable: {listed})"
    return None


def update_problem(
    update: Any,
    *,
    mutable: Sequence[str],
    fixed: Collection[str] | None = None,
    kind: str = "",
    nullable: bool = False,
) -> str | None:
    """:func:`key_problem`, then every value an integer >= 1 (or null, when ``nullable``:
    back to the birth value)."""
    problem = key_problem(update, mutable=mutable, fixed=fixed, kind=kind)
    if problem is not None:
        return problem
    for key, value in update.items():
        if nullable and value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            return f"params.{key} must be an integer >= 1" + (" or null" if nullable else "")
    return None
