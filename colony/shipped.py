"""Where the files shipped beside the code are: the topologies and the demo's search corpus.

In the project they are the folders ``topologies/`` and ``fixtures/`` at the repository root.
pyproject.toml maps two data packages onto them, ``colony_topologies`` and ``colony_demo_data``,
so an installed wheel carries them as those packages and an editable install maps the same
names onto the same folders: finding them through the import system works in both, and in a
checkout run from its folder without installing.

They are namespace packages (the folders hold no ``__init__.py``), found through the package's
``__path__``: ``importlib.resources.files`` cannot open a namespace package under setuptools'
editable finder on Python 3.11 (its path holds the finder's hook beside the folder).
"""

from __future__ import annotations

import importlib
from pathlib import Path

from colony.errors import ColonyError

__all__ = ["ShippedDataMissing", "search_corpus", "topologies", "topology"]

_REPO = Path(__file__).resolve().parent.parent
_FOLDERS = {"colony_topologies": "topologies", "colony_demo_data": "fixtures"}
"""Each data package and the repository folder it is (pyproject.toml's package-dir)."""


class ShippedDataMissing(ColonyError):
    """A file meant to ship with the package is not installed (a broken or partial install)."""

    code = "shipped_data_missing"


def _folder(package: str) -> Path:
    try:
        module = importlib.import_module(package)
    except ImportError:
        module = None
    for entry in getattr(module, "__path__", ()):
        if Path(entry).is_dir():
            return Path(entry)
    checkout = _REPO / _FOLDERS[package]  # a source tree run without installing it
    if checkout.is_dir():
        return checkout
    raise ShippedDataMissing(
        f"the package data {package} ({_FOLDERS[package]}/ in the project) is not installed; "
        "reinstall colony-daemon (pip install --force-reinstall colony-daemon)"
    )


def topologies() -> Path:
    """The folder holding every shipped topology (``topologies/`` in the project)."""
    return _folder("colony_topologies")


def topology(name: str) -> Path:
    """One shipped topology's root folder, e.g. ``telegram-research``."""
    root = topologies() / name
    if not (root / "main").is_dir():
        raise ShippedDataMissing(f"no shipped topology {name!r} in {topologies()}")
    return root


def search_corpus() -> Path:
    """The demo's search corpus, ``fixtures/search-corpus.json`` in the project."""
    path = _folder("colony_demo_data") / "search-corpus.json"
    if not path.is_file():
        raise ShippedDataMissing(f"the demo's search corpus is missing: {path}")
    return path
