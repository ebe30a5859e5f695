"""``meclaw --validate``: check a colony tree without touching it.

Read-only by construction: it only reads files (no database opened, no lease taken, nothing
created), so it is safe to run in CI and beside a running daemon.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path

from colony.cell import ParamsCheck
from colony.config.diagnostics import Diagnostic, Severity
from colony.config.loader import load_tree
from colony.persist.schema import probe


def validate(
    root: Path,
    *,
    cell_types: Collection[str],
    env_file: Path | None = None,
    strict: bool = False,
    environ: Mapping[str, str] | None = None,
    param_checks: Mapping[str, ParamsCheck] | None = None,
) -> list[Diagnostic]:
    """Every finding about the tree under ``root``; with ``strict`` warnings become errors."""
    result = load_tree(
        root, cell_types=cell_types, env_file=env_file, environ=environ, param_checks=param_checks
    )
    found = [*result.diagnostics, *_colony_db(root)]
    if not strict:
        return found
    return [d.promoted() if d.severity is Severity.WARNING else d for d in found]


def _colony_db(root: Path) -> list[Diagnostic]:
    """A ``colony.db`` the boot would refuse (garbage, truncated, another program's, a newer
    schema), found without writing anything (:func:`colony.persist.schema.probe`)."""
    problem = probe(root / "colony.db") if root.is_dir() else None
    if problem is None:
        return []
    what, _, fix = problem.partition("; ")
    return [
        Diagnostic(
            Severity.ERROR, "colony_db_unusable", f"colony.db {what}", "colony.db", hint=fix or None
        )
    ]
