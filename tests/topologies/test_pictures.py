"""Each shipped topology's README picture is drawn from its current tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from cells import BUILTIN_CELL_TYPES
from colony.dot import load_for_picture, to_dot

TOPOLOGIES = sorted(p for p in (Path(__file__).parents[2] / "topologies").iterdir() if p.is_dir())


@pytest.mark.parametrize("topology", TOPOLOGIES, ids=lambda p: p.name)
def test_the_committed_picture_matches_the_tree(topology: Path) -> None:
    loaded = load_for_picture(topology, cell_types=BUILTIN_CELL_TYPES)
    assert loaded.tree is not None, loaded.diagnostics
    committed = topology / "graph.dot"
    assert committed.is_file(), f"{committed} is missing: run `make pictures`"
    assert committed.read_text(encoding="utf-8") == to_dot(loaded.tree), (
        f"{committed} is stale: the tree changed since the picture was drawn; run `make pictures`"
    )
    assert (topology / "graph.svg").is_file(), "run `make pictures`"
    assert "graph.svg" in (topology / "README.md").read_text(encoding="utf-8")
