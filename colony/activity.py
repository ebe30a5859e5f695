"""Which cells are active at boot, derived from the edges (meclaw's connectivity rule).

A cell is active when an edge touches it and its enclosing hives are active; a hive is active
when an edge crosses its boundary (and its own parents are active); the root is always active.
Only cells in the part of the tree the edges reach are judged: a cell nothing points near keeps
the activity it was instantiated with (active). Inactive cells take no messages: a delivery to
one is dead-lettered ``cell_inactive``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from colony.paths import parent


def _under(candidate: str, ancestor: str) -> bool:
    if candidate == ancestor:
        return True
    if ancestor == "/":
        return candidate.startswith("/")
    return candidate.startswith(ancestor) and candidate[len(ancestor) : len(ancestor) + 1] == "/"


def active_cells(
    cells: Collection[str], hives: Collection[str], edges: Iterable[tuple[str, str]]
) -> dict[str, bool]:
    """``{cell path: active}`` for every cell in ``cells``."""
    pairs = list(edges)
    endpoints = {p for pair in pairs for p in pair}
    touched = endpoints
    hive_set = set(hives)

    def crosses(hive: str) -> bool:
        if hive == "/":
            return False
        return any(_under(a, hive) != _under(b, hive) for a, b in pairs)

    def hive_active(hive: str) -> bool:
        if hive == "/":
            return True
        return crosses(hive) and parents_active(hive)

    def parents_active(path: str) -> bool:
        up = parent(path)
        if up == "/" or up == path:
            return True
        if up not in hive_set:
            return True
        return hive_active(up)

    # The part of the tree the edges reach (meclaw's affected scope, seeded by every endpoint).
    scope: set[str] = set()
    for point in endpoints:
        scope.add(point)
        scope.update(c for c in cells if _under(c, point))
        current = point
        while True:
            up = parent(current)
            if up == current:
                break
            scope.add(up)
            if up in hive_set and any(not _under(p, up) for p in endpoints):
                scope.update(c for c in cells if _under(c, up))
            if up == "/":
                break
            current = up

    result: dict[str, bool] = {}
    for cell in cells:
        if cell == "/" or cell not in scope:
            result[cell] = True
        else:
            result[cell] = cell in touched and parents_active(cell)
    return result
