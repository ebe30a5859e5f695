"""Find a colony's cells on disk and give each its colony path.

Under the colony root exactly one top-level folder holding a ``config.json`` is the root node
``/`` (its own name is dropped); ``templates/``, ``.staging/``, ``blobs/`` and dot-folders at the
top level are not candidates. Below the root, every folder holding a ``config.json`` is a node,
at any depth, and folders without one are passed through (their name still counts in the
paths below them). Folders are visited in name order so edge declaration order is stable.
"""

from __future__ import annotations

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


def walk(root_dir: Path) -> list[NodeDir]:
    """Every node folder under (and including) the root node folder, parents first.

    Symlinked folders are followed once; a link back into a folder already visited is
    skipped, so a cycle cannot hang the loader.
    """
    nodes = [NodeDir("/", root_dir, root_dir / CONFIG_NAME)]
    seen = {os.path.realpath(root_dir)}

    def visit(folder: Path, colony_path: str) -> None:
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            if not entry.is_dir():
                continue
            real = os.path.realpath(entry.path)
            if real in seen:
                continue
            seen.add(real)
            child = Path(entry.path)
            child_path = f"{colony_path.rstrip('/')}/{entry.name}"
            if (child / CONFIG_NAME).is_file():
                nodes.append(NodeDir(child_path, child, child / CONFIG_NAME))
            visit(child, child_path)

    visit(root_dir, "/")
    return nodes
