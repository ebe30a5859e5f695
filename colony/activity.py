"""Which cells are active at boot, derived from the edges (meclaw's connectivity rule).

A cell is active when an edge touches it and its enclosing hives are active; a hive is active
when an edge crosses its boundary (and its own parents are active); the root is always active.
Only cells in the part of the tree the edges reach are judged: a cell nothing points near keeps
the activity it was instantiated with (active). Inactive cells take no messages: a delivery to
one is dead-lettered ``cell_inactive``.

Every question is answered by walking a path's ancestors (a handful of dict lookups), never by
scanning all cells or all edges: a tree of 10,000 cells and as many edges is judged in
milliseconds, where comparing each endpoint with each cell took minutes.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from colony.paths import ROOT, parent


def _lineage(path: str) -> list[str]:
    """``path``, its parent, …, up to ``/``: the paths ``path`` is under."""
    out = [path]
    while path != ROOT:
        path = parent(path)
        out.append(path)
    return out


def active_cells(
    cells: Collection[str], hives: Collection[str], edges: Iterable[tuple[str, str]]
) -> dict[str, bool]:
    """``{cell path: active}`` for every cell in ``cells``."""
    hive_set = set(hives)
    crossed: set[str] = set()
    """Hives with exactly one end of some edge inside: the ends' lineages minus the shared."""
    lineages: dict[str, list[str]] = {}
    for a, b in edges:
        for end in (a, b):
            if end not in lineages:
                lineages[end] = _lineage(end)
        crossed.update(set(lineages[a]).symmetric_difference(lineages[b]))
    crossed.discard(ROOT)
    endpoints = lineages.keys()

    # The part of the tree the edges reach (meclaw's affected scope): every endpoint and its
    # ancestors, every cell under an endpoint, and every cell under an ancestor hive that some
    # endpoint lies outside of.
    inside: dict[str, int] = {}
    """For every endpoint and ancestor of one: how many endpoints are under it."""
    above: set[str] = set()
    for lineage in lineages.values():
        for path in lineage:
            inside[path] = inside.get(path, 0) + 1
        above.update(lineage[1:])
    roots = set(endpoints)
    """Paths whose whole subtree is in scope."""
    roots.update(h for h in above if h in hive_set and inside[h] < len(endpoints))

    active_hives: dict[str, bool] = {ROOT: True}

    def hive_active(hive: str) -> bool:
        found = active_hives.get(hive)
        if found is None:
            found = active_hives[hive] = hive in crossed and parents_active(hive)
        return found

    def parents_active(path: str) -> bool:
        up = parent(path)
        if up in (ROOT, path) or up not in hive_set:
            return True
        return hive_active(up)

    reached: dict[str, bool] = {}

    def under_a_root(path: str) -> bool:
        """Whether ``path`` or an ancestor of it is a root (remembered for each path seen)."""
        walked: list[str] = []
        while (found := reached.get(path)) is None:
            walked.append(path)
            if path in roots or path == ROOT:
                found = path in roots
                break
            path = parent(path)
        for seen in walked:
            reached[seen] = found
        return found

    result: dict[str, bool] = {}
    for cell in cells:
        if cell == ROOT or (cell not in inside and not under_a_root(cell)):
            result[cell] = True
        else:
            result[cell] = cell in endpoints and parents_active(cell)
    return result
