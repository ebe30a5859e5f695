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
    colony_db: Path | None = None,
) -> list[Diagnostic]:
    """Every finding about the tree under ``root``; with ``strict`` warnings become errors.
    ``colony_db``: the file the boot would open (``--state-dir``'s; default: the root's)."""
    result = load_tree(
        root, cell_types=cell_types, env_file=env_file, environ=environ, param_checks=param_checks
    )
    if colony_db is None or colony_db == root / "colony.db":
        found = [*result.diagnostics, *_colony_db(root / "colony.db", "colony.db")]
    else:  # --state-dir: not a file of the tree, named in full
        found = [*result.diagnostics, *_colony_db(colony_db, None)]
    if not strict:
        return found
    return [d.promoted() if d.severity is Severity.WARNING else d for d in found]


def _colony_db(file: Path, in_tree: str | None) -> list[Diagnostic]:
    """A ``colony.db`` the boot would refuse (garbage, truncated, another program's, a newer
    schema), found without writing anything (:func:`colony.persist.schema.probe`).
    ``in_tree``: its name in the tree, None when it is elsewhere (``--state-dir``)."""
    problem = probe(file) if file.parent.is_dir() else None
    if problem is None:
        return []
    what, _, fix = problem.partition("; ")
    return [
        Diagnostic(
            Severity.ERROR,
            "colony_db_unusable",
            f"{in_tree or file} {what}",
            in_tree,
            hint=fix or None,
        )
    ]
