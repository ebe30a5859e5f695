"""Find a colony's cells on disk and give each its colony path.

Under the colony root exactly one top-level folder holding a ``config.json`` is the root node
``/`` (its own name is dropped); ``templates/``, ``.staging/``, ``blobs/`` and dot-folders at the
top level are not candidates. Below the root, every folder holding a ``config.json`` is a node,
at any depth, and folders without one are passed through (their name still counts in the
paths below them). Folders are visited in name order so edge declaration order is stable.

A folder holding an entry named ``config.json`` is a node whatever that entry is: a folder or
a FIFO there is reported when the loader reads it, never silently skipped. What the walk
itself finds wrong is a :class:`Diagnostic` of the scan:

* a folder name that is not UTF-8 (it could not be stored or sent as a path): error;
* two sibling folders whose names differ only in Unicode normalization: error. Names are
  compared and turned into colony paths in NFC, so an edge written ``café`` reaches a folder
  macOS stored as ``cafe`` + combining accent;
* a node at ``/colony`` or below (those paths are the daemon's own endpoints): error;
* a symbolic link that loops or a folder that cannot be listed: warning (skipped).
"""

from __future__ import annotations

import operator
import os
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from colony import paths
from colony.config.diagnostics import Diagnostic, Severity
from colony.config.reading import is_text, printable

IGNORED_TOP_LEVEL = frozenset({"templates", ".staging", "blobs"})
CONFIG_NAME = "config.json"


def is_ignored_top_level(name: str) -> bool:
    return name in IGNORED_TOP_LEVEL or name.startswith(".")


def relative(root: Path, file: Path | str) -> str:
    """``file`` as a diagnostic names it: relative to the colony root, with ``/``."""
    base = str(root) + os.sep
    name = str(file)
    if name.startswith(base) and os.sep == "/":  # the usual case, without pathlib's parsing
        return printable(name[len(base) :])
    try:
        return printable(Path(file).relative_to(root).as_posix())
    except ValueError:
        return printable(name)


def segment(name: str) -> str:
    """The colony path segment of a folder name: its NFC form."""
    return name if name.isascii() else unicodedata.normalize("NFC", name)


def _is_dir(entry: os.DirEntry[str]) -> bool | None:
    """Whether the entry is a folder (links followed); None when a link loops."""
    try:
        return entry.is_dir()
    except OSError:
        return None


def root_candidates(root: Path, findings: list[Diagnostic] | None = None) -> list[Path]:
    """Top-level folders of ``root`` that hold a ``config.json``, in name order."""
    out: list[Path] = []
    try:
        with os.scandir(root) as listing:
            entries = sorted(listing, key=_NAME)
    except OSError as exc:
        if findings is not None:
            findings.append(
                Diagnostic(
                    Severity.ERROR,
                    "unreadable_folder",
                    f"cannot list the colony root {root}: {exc.strerror or exc}",
                    None,
                    (),
                    "make the folder readable by the user the daemon runs as.",
                )
            )
        return out
    for entry in entries:
        if is_ignored_top_level(entry.name):
            continue
        is_dir = _is_dir(entry)
        if is_dir is None and findings is not None:
            findings.append(_loop(root, entry.path))
        if not is_dir:
            continue
        folder = Path(entry.path)
        if os.path.lexists(folder / CONFIG_NAME):
            out.append(folder)
    return out


@dataclass(frozen=True, slots=True)
class NodeDir:
    """A folder that is a node of the colony."""

    path: str
    """Colony path, e.g. ``/tool-loop/collector``."""
    folder: Path
    config_file: Path


@dataclass(slots=True)
class Scan:
    """What the walk found: the nodes, and what is wrong with the folders themselves."""

    nodes: list[NodeDir] = field(default_factory=list)
    findings: list[Diagnostic] = field(default_factory=list)


_NAME = operator.attrgetter("name")

_Frame = tuple[Iterator[os.DirEntry[str]], str, str]
"""The entries of one folder still to visit, its real path and its colony path."""


def _listing(folder: str | Path) -> list[os.DirEntry[str]] | None:
    """A folder's entries in name order, or None when it cannot be listed."""
    try:
        with os.scandir(folder) as entries:
            return sorted(entries, key=_NAME)
    except OSError:
        return None


def walk(root_dir: Path) -> list[NodeDir]:
    """Every node folder under (and including) the root node folder, parents first."""
    return scan(root_dir, root_dir.parent).nodes


def scan(root_dir: Path, root: Path) -> Scan:
    """Walk the root node's folder: every node, parents first, and the findings.

    Symlinked folders are followed once; a link back into a folder already visited is
    skipped, so a cycle cannot hang the loader. Each folder is listed once and its
    ``config.json`` found in that listing: at 10,000 cells a ``realpath`` (a stat per path
    component) or a stat per folder is what the walk would cost. The walk keeps its own
    stack, so no depth of folders can exhaust Python's.
    """
    found = Scan([NodeDir("/", root_dir, root_dir / CONFIG_NAME)])
    real_root = os.path.realpath(root_dir)
    seen = {real_root}
    listing = _listing(root_dir)
    if listing is None:
        found.findings.append(_unlistable(root, root_dir))
    stack: list[_Frame] = [(iter(listing or []), real_root, "/")]
    while stack:
        entries, real, colony_path = stack[-1]
        entry = next(entries, None)
        if entry is None:
            stack.pop()
            continue
        child = _visit(entry, real, colony_path, seen, root, found)
        if child is not None:
            stack.append(child)
    _check_normalization(root_dir, root, found)
    return found


def _visit(
    entry: os.DirEntry[str],
    real: str,
    colony_path: str,
    seen: set[str],
    root: Path,
    found: Scan,
) -> _Frame | None:
    """Judge one entry of a folder; returns the frame to descend into, if any."""
    if entry.name == CONFIG_NAME:
        return None  # the folder's own config: the loader reads it (and says what is wrong)
    is_dir = _is_dir(entry)
    if is_dir is None:
        found.findings.append(_loop(root, entry.path))
        return None
    if not is_dir:
        return None
    # Reached through no link, a folder's real path is its parent's plus its name.
    if entry.is_symlink():
        child_real = os.path.realpath(entry.path)
    else:
        child_real = os.path.join(real, entry.name)
    if child_real in seen:
        return None
    seen.add(child_real)
    if not is_text(entry.name):
        found.findings.append(
            Diagnostic(
                Severity.ERROR,
                "invalid_folder_name",
                "the folder name is not valid UTF-8, so it cannot be part of a colony path",
                relative(root, entry.path),
                (),
                "rename the folder using UTF-8 text.",
            )
        )
        return None
    child_path = f"{colony_path.rstrip('/')}/{segment(entry.name)}"
    inner = _listing(entry.path)
    if inner is None:  # unlistable, yet its config.json may still be readable
        found.findings.append(_unlistable(root, entry.path))
        has_config = os.path.lexists(os.path.join(entry.path, CONFIG_NAME))
    else:
        has_config = any(e.name == CONFIG_NAME for e in inner)
    if has_config:
        config = Path(entry.path, CONFIG_NAME)  # parsed once; .parent is a slice
        if paths.is_colony_endpoint(child_path):
            found.findings.append(_reserved(root, config, child_path))
        else:
            found.nodes.append(NodeDir(child_path, config.parent, config))
    if not inner:
        return None
    return iter(inner), child_real, child_path


def _check_normalization(root_dir: Path, root: Path, found: Scan) -> None:
    """Two nodes with one colony path: sibling names that differ only in normalization."""
    owners: dict[str, NodeDir] = {}
    clashes: list[NodeDir] = []
    for node in found.nodes:
        first = owners.setdefault(node.path, node)
        if first is not node:
            clashes.append(node)
    for node in clashes:
        first = owners[node.path]
        found.findings.append(
            Diagnostic(
                Severity.ERROR,
                "path_collision",
                f"this folder and {relative(root, first.folder)} both become the colony path "
                f"{node.path}: their names differ only in Unicode normalization (NFC vs NFD)",
                relative(root, node.config_file),
                (),
                "rename one of them; colony paths compare names in NFC form.",
            )
        )
    if clashes:
        found.nodes = [n for n in found.nodes if owners[n.path] is n]


def _reserved(root: Path, config: Path, path: str) -> Diagnostic:
    return Diagnostic(
        Severity.ERROR,
        "reserved_path",
        f"this node would be {path}, but /colony and the paths under it are the daemon's own "
        "endpoints (/colony/registry, /colony/graph, ...): messages to it never reach a cell",
        relative(root, config),
        (),
        "rename the folder (e.g. to colony-cell) and the edges that name it.",
    )


def _loop(root: Path, path: str) -> Diagnostic:
    return Diagnostic(
        Severity.WARNING,
        "unreadable_folder",
        "this symbolic link loops (or cannot be followed); it is skipped",
        relative(root, path),
        (),
        "point the link at a real folder, or remove it.",
    )


def _unlistable(root: Path, path: Path | str) -> Diagnostic:
    return Diagnostic(
        Severity.WARNING,
        "unreadable_folder",
        "this folder cannot be listed, so nodes below it are not loaded",
        relative(root, path),
        (),
        "make the folder readable (and searchable) by the user the daemon runs as.",
    )
