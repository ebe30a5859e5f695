"""The kernel does not import the cell types (colony/__init__.py states the rule)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import colony
from colony import COMPOSITION_ROOTS

KERNEL = Path(colony.__file__).parent


def _module(path: Path) -> str:
    parts = path.relative_to(KERNEL.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def kernel_modules() -> list[Path]:
    return sorted(p for p in KERNEL.rglob("*.py") if _module(p) not in COMPOSITION_ROOTS)


def imports_cells(tree: ast.AST) -> list[int]:
    """Lines of every ``import cells…`` / ``from cells… import`` (at any depth)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        if any(name == "cells" or name.startswith("cells.") for name in names):
            lines.append(node.lineno)
    return lines


def test_no_kernel_module_names_cells_in_an_import() -> None:
    found = {
        str(p.relative_to(KERNEL.parent)): lines
        for p in kernel_modules()
        if (lines := imports_cells(ast.parse(p.read_text(encoding="utf-8"))))
    }
    assert found == {}, f"kernel modules import cells (layering rule, colony/__init__.py): {found}"


_BLOCKED_IMPORT = """
import importlib, importlib.abc, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "cells" or name.startswith("cells."):
            raise ImportError(f"the kernel imported {name} (layering rule)")
        return None

sys.meta_path.insert(0, Block())
for name in sys.argv[1:]:
    importlib.import_module(name)
print("ok")
"""


def test_every_kernel_module_imports_with_cells_blocked() -> None:
    names = [_module(p) for p in kernel_modules()]
    done = subprocess.run(
        [sys.executable, "-c", _BLOCKED_IMPORT, *names],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=KERNEL.parent,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"


def test_the_layering_check_sees_an_import_of_cells() -> None:
    # The checks above must be able to fail: one line importing cells is found.
    assert imports_cells(ast.parse("def f():\n    from cells.code import CODE\n")) == [2]
    assert imports_cells(ast.parse("import cells\n")) == [1]
    assert imports_cells(ast.parse("from colony import cell\n")) == []
