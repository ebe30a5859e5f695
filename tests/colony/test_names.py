"""One class, one name: no two top-level classes of ``colony`` and ``cells`` share a name.

Two ``Edge`` classes (or a ``SeedError`` in two cells) make an import, a traceback or a grep
point at the wrong one. A leading underscore does not make a name distinct: ``_QueryTimeout``
and ``QueryTimeoutError`` read the same in a log. Read with ``ast``, so nothing is imported.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("colony", "cells")


def top_level_classes(source: str) -> list[str]:
    return [node.name for node in ast.parse(source).body if isinstance(node, ast.ClassDef)]


def duplicates(files: dict[str, str]) -> dict[str, list[str]]:
    """Class names (leading underscores dropped) defined in more than one of ``files``."""
    where: dict[str, list[str]] = defaultdict(list)
    for name, source in files.items():
        for cls in top_level_classes(source):
            where[cls.lstrip("_")].append(f"{name}:{cls}")
    return {cls: found for cls, found in where.items() if len(found) > 1}


def test_no_two_classes_of_colony_and_cells_share_a_name() -> None:
    files = {
        str(path.relative_to(REPO)): path.read_text(encoding="utf-8")
        for package in PACKAGES
        for path in sorted((REPO / package).rglob("*.py"))
    }
    assert len(files) > 50  # the walk found the packages
    assert duplicates(files) == {}


def test_a_private_class_clashes_with_a_public_one_of_the_same_name() -> None:
    files = {"a.py": "class Timeout(Exception): ...\n", "b.py": "class _Timeout: ...\n"}
    assert duplicates(files) == {"Timeout": ["a.py:Timeout", "b.py:_Timeout"]}


def test_nested_classes_are_not_top_level() -> None:
    files = {"a.py": "class Cell: ...\n", "b.py": "def f():\n    class Cell: ...\n"}
    assert duplicates(files) == {}
