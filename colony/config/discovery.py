"""Find a colony's cells on disk and give each its colony path.

Under the colony root exactly one top-level folder holding a ``config.json`` is the root node
``/`` (its own name is dropped); ``templates/``, ``.staging/``, ``blobs/`` and dot-folders at the
top level are not candidates. Below the root, every folder holding a ``config.json`` is a node,
at any depth, and folders without one are passed through (their name still counts in the
paths below them). Folders are visited in name order so edge declaration order is stable.
"""

from __future__ import annotations

import operator
import os
from dataclasses import dataclass
from pathlib import Path

IGNORED_TOP_LEVEL = frozenset({"templates", ".staging", "blobs"})
CONFIG_NAME = "config.json"


def is_ignored_top_level(name: str) -> bool:
    return name in IGNORED_TOP_LEVEL or name.startswith(".")


def root_candidates(root: Path) -> list[Path]:
    """Top-level folders of ``root`` that hold a ``config.json``, in name order."""
    out: list[Path] = []
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        if is_ignored_top_level(entry.name) or not entry.is_dir():
            continue
        folder = Path(entry.path)
        if (folder / CONFIG_NAME).is_file():
            out.append(folder)
    return out


@dataclass(frozen=True, slots=True)
class NodeDir:
    """A folder that is a node of the colony."""

    path: str
    """Colony path, e.g. ``/tool-loop/collector``."""
    folder: Path
    config_file: Path


_NAME = operator.attrgetter("name")


def _listing(folder: str | Path) -> list[os.DirEntry[str]] | None:
    """A folder's entries in name order, or None when it cannot be listed."""
    try:
        with os.scandir(folder) as entries:
            return sorted(entries, key=_NAME)
    except OSError:
        return None


def walk(root_dir: Path) -> list[NodeDir]:
    """Every node folder under (and including) the root node folder, parents first.

    Symlinked folders are followed once; a link back into a folder already visited is
    skipped, so a cycle cannot hang the loader. Each folder is listed once and its
    ``config.json`` found in that listing: at 10,000 cells a ``realpath`` (a stat per path
    component) or a stat per folder is what the walk would cost.
    """
    nodes = [NodeDir("/", root_dir, root_dir / CONFIG_NAME)]
    real_root = os.path.realpath(root_dir)
    _visit(_listing(root_dir) or [], real_root, "/", nodes, {real_root})
    return nodes


def _visit(
    entries: list[os.DirEntry[str]],
    real: str,
    colony_path: str,
    nodes: list[NodeDir],
    seen: set[str],
) -> None:
    for entry in entries:
        if not entry.is_dir():
            continue
        # Reached through no link, a folder's real path is its parent's plus its name.
        if entry.is_symlink():
            child_real = os.path.realpath(entry.path)
        else:
            child_real = os.path.join(real, entry.name)
        if child_real in seen:
            continue
        seen.add(child_real)
        child_path = f"{colony_path.rstrip('/')}/{entry.name}"
        inner = _listing(entry.path)
        if inner is None:  # unlistable, yet its config.json may still be readable
            has_config = os.path.isfile(os.path.join(entry.path, CONFIG_NAME))
        else:
            has_config = any(e.name == CONFIG_NAME and e.is_file() for e in inner)
        if has_config:
            config = Path(entry.path, CONFIG_NAME)  # parsed once; .parent is a slice
            nodes.append(NodeDir(child_path, config.parent, config))
        if inner:
            _visit(inner, child_real, child_path, nodes, seen)
