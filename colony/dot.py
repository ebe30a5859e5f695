"""A colony tree as a Graphviz DOT picture: ``meclaw graph --root DIR``.

Hives become clusters (nested as on disk) with one round node standing for the hive itself,
because edges leave and enter a hive by its own path (``"from": "."``). Cells are boxes labelled
with their name and type; the two that reach past the tree are drawn apart: an ``mcp`` cell as a
component naming its transport, a ``subcolony`` as a 3-D box naming its child colony's folder
(the child stays opaque, as it is at run time). Each edge is labelled with its condition and
what its modifier does, so the picture answers "why did this message go there" without opening
the JSON.

The picture is drawn from the tree as loaded, never from a running colony, and a ``${VAR}``
without a value does not stop it: a topology's README can show its picture before anyone has
keys. Nothing substituted is ever printed — only paths, types, conditions and modifier keys.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from colony.config.loader import CellNode, ColonyTree, EdgeDecl, LoadResult, load_tree
from colony.errors import ColonyError
from colony.paths import ROOT, parent

__all__ = ["RenderError", "load_for_picture", "render_svg", "to_dot"]

_INDENT = "  "


class _AnyValue(Mapping[str, str]):
    """An environment in which every variable has a value: the picture needs no secrets."""

    def __getitem__(self, key: str) -> str:
        return f"<{key}>"

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def load_for_picture(root: Path, *, cell_types: frozenset[str]) -> LoadResult:
    """Load the tree for drawing: params are not checked and every ``${VAR}`` has a value."""
    return load_tree(root, cell_types=cell_types, environ=_AnyValue())


def _quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _name(path: str) -> str:
    return path if path == ROOT else path.rsplit("/", 1)[1]


def _edge_label(edge: EdgeDecl) -> str:
    lines: list[str] = []
    if edge.condition is not None:
        lines.append(edge.condition)
    modifier = edge.modifier
    if modifier is not None:
        lines += [f"context.{key} = {value}" for key, value in modifier.set_context.items()]
        lines += [f"hop.{key} = {value}" for key, value in modifier.set_hop.items()]
        lines += [f"drop context.{key}" for key in modifier.delete_context]
        lines += [f"drop hop.{key}" for key in modifier.delete_hop]
        if modifier.restore_ttl:
            lines.append("restore_ttl")
    return "\n".join(lines)


def _cell_attributes(path: str, node: CellNode) -> str:
    """A cell's node attributes: its name and type, plus what an outside-reaching type talks to."""
    lines = [_name(path), node.type]
    shape = ""
    params = node.config.params if isinstance(node.config.params, dict) else {}
    if node.type == "mcp":
        transport = params.get("transport")
        if not isinstance(transport, str):
            transport = "stdio" if "command" in params else "http"
        lines.append(f"MCP over {transport}")
        shape = "component"
    elif node.type == "subcolony":
        root = params.get("root")
        if isinstance(root, str) and root.strip("/"):
            lines.append(f"child colony: {root.rstrip('/').rsplit('/', 1)[-1]}")
        shape = "box3d"
    label = f"label={_quote(chr(10).join(lines))}"
    return f"shape={shape}, {label}" if shape else label


def to_dot(tree: ColonyTree) -> str:
    """The DOT text of ``tree``; stable for a given tree (children sorted by path)."""
    children: dict[str, list[str]] = {}
    for path in [*tree.hives, *tree.cells]:
        if path != ROOT:
            children.setdefault(parent(path), []).append(path)
    out = [
        "digraph colony {",
        f"{_INDENT}rankdir=TB;",
        f'{_INDENT}node [shape=box, fontname="Helvetica"];',
        f'{_INDENT}edge [fontname="Helvetica", fontsize=10];',
    ]

    def hive(path: str, depth: int) -> None:
        pad = _INDENT * depth
        out.append(f"{pad}subgraph {_quote('cluster_' + path)} {{")
        out.append(f"{pad}{_INDENT}label={_quote(path)};")
        out.append(f"{pad}{_INDENT}{_quote(path)} [shape=circle, label={_quote(_name(path))}];")
        for child in sorted(children.get(path, [])):
            if child in tree.hives:
                hive(child, depth + 1)
            else:
                attributes = _cell_attributes(child, tree.cells[child])
                out.append(f"{pad}{_INDENT}{_quote(child)} [{attributes}];")
        out.append(f"{pad}}}")

    roots = [ROOT] if ROOT in tree.hives else sorted(children.get(ROOT, []))
    for top in roots:
        if top in tree.hives:
            hive(top, 1)
        else:
            out.append(f"{_INDENT}{_quote(top)} [{_cell_attributes(top, tree.cells[top])}];")
    declared = {*tree.hives, *tree.cells}
    for path in sorted({e.from_path for e in tree.edges} | {e.to_path for e in tree.edges}):
        if path not in declared:  # a /colony endpoint, or a cell the tree does not hold
            label = f"{_name(path)}\n(not in the tree)"
            out.append(f"{_INDENT}{_quote(path)} [style=dashed, label={_quote(label)}];")
    for edge in tree.edges:
        attributes = []
        label = _edge_label(edge)
        if label:
            attributes.append(f"label={_quote(label)}")
        if edge.modifier is not None and edge.modifier.restore_ttl:
            attributes.append("style=bold")
        suffix = f" [{', '.join(attributes)}]" if attributes else ""
        out.append(f"{_INDENT}{_quote(edge.from_path)} -> {_quote(edge.to_path)}{suffix};")
    out.append("}")
    return "\n".join(out) + "\n"


class RenderError(ColonyError):
    """The SVG could not be drawn: no renderer is installed, or the renderer failed."""

    code = "render_failed"


_RENDERERS = ("dot", "graphviz-pure")
"""Programs that draw DOT as SVG, first found wins: Graphviz itself, or graphviz-pure (a
self-contained build of it on PyPI, which ``make pictures`` uses)."""


def _renderer() -> str | None:
    beside = Path(sys.executable).parent  # graphviz-pure pip-installed into this venv
    for name in _RENDERERS:
        found = shutil.which(name) or shutil.which(name, path=str(beside))
        if found is not None:
            return found
    return None


def render_svg(dot_text: str) -> str:
    """``dot_text`` drawn as SVG by the first renderer installed."""
    program = _renderer()
    if program is None:
        raise RenderError(
            "--format svg needs Graphviz's `dot` or graphviz-pure, and neither is installed: "
            "`pip install graphviz-pure` (a self-contained build), `apt install graphviz` or "
            "`brew install graphviz`; or paste the output of `meclaw graph` into any online "
            "Graphviz viewer"
        )
    with tempfile.TemporaryDirectory(prefix="meclaw-graph-") as scratch:
        source, picture = Path(scratch) / "colony.dot", Path(scratch) / "colony.svg"
        source.write_text(dot_text, encoding="utf-8")
        try:
            done = subprocess.run(
                [program, "-Tsvg", str(source), "-o", str(picture)],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise RenderError(f"{program} could not be run: {exc}") from None
        if done.returncode != 0 or not picture.exists():
            raise RenderError(
                f"{program} could not draw the picture (exit {done.returncode}): "
                f"{done.stderr.strip() or 'no message'}"
            )
        return picture.read_text(encoding="utf-8")
