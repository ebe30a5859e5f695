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
    if not strict:
        return result.diagnostics
    return [d.promoted() if d.severity is Severity.WARNING else d for d in result.diagnostics]
