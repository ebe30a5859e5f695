"""Can every header a cell requires reach it? meclaw's header-contract check, at load time.

A cell's ``contract.consumes`` may require ``context`` and ``hop`` keys; a message without
one is refused at delivery (``consumes_violation``). When no route into the cell can carry
the key, every message would be refused, so the tree is refused instead, as meclaw's boot
refuses it (``context presence not reachable``, ``fan-in intersection``):

* **context** (presence, not freshness): some path must lead backwards from the cell to a
  *setter* without crossing an edge whose ``modifier.delete_context`` drops the key. Setters
  are an edge's ``modifier.set_context`` of the key, and a cell that declares the key in
  ``contract.ingress.context`` (messages are born there carrying it; the cell itself counts).
  Context a sender puts on a message from outside (HTTP, stdio) does not count: any path can
  be posted to, so it proves nothing about the topology. A cell that receives such messages
  declares the standard keys it relies on in ``contract.ingress``.
* **hop** (fan-in intersection): *every* edge into the cell must provide the key, since hop
  headers last one hop. An edge provides it when its ``modifier.set_hop`` sets it, or its
  source cell declares it in ``contract.emits.hop``, or its source is a hive every inbound
  edge of which provides it (a hive passes hop headers through; a loop imposes nothing new,
  and a hive nothing routes to provides vacuously). ``delete_hop`` of the key on the edge
  means it does not. A cell with a required hop key and no inbound edge is refused.

Only active cells are judged (an inactive cell takes no messages), and only ``required``
keys. Each rule is one forward pass per key over the edges, so a tree of 10,000 edges is
judged in time linear in its edges.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from colony.activity import active_cells
from colony.config.diagnostics import Diagnostic, Severity
from colony.config.jsonpos import Path as JsonPath
from colony.config.models import INGRESS_CONTEXT_KEYS, Contract, Modifier

_NO_MODIFIER = Modifier()

_Step = tuple[str | None, str, str | None, int]
"""A node's place on the walk from the entries: parent, entry, second node, route length."""


@dataclass(frozen=True, slots=True)
class CheckedEdge:
    """An edge as the check sees it: resolved ends and what its modifier does."""

    from_path: str
    to_path: str
    modifier: Modifier | None
    label: str
    """How a message names it: ``main/config.json edge 2``."""


@dataclass(frozen=True, slots=True)
class CheckedCell:
    """A cell as the check sees it."""

    path: str
    file: str
    contract: Contract


def required(contract: Contract, compartment: str) -> list[str]:
    """The keys of ``consumes.<compartment>`` a message must carry."""
    consumes = contract.consumes
    if consumes is None:
        return []
    specs = consumes.context if compartment == "context" else consumes.hop
    return [key for key, spec in specs.items() if spec.required]


def check(
    cells: Mapping[str, CheckedCell], hives: Collection[str], edges: Sequence[CheckedEdge]
) -> list[Diagnostic]:
    """Every required header no route can bring, one diagnostic per cell and key."""
    wanted = [
        c for c in cells.values() if required(c.contract, "context") or required(c.contract, "hop")
    ]
    if not wanted:
        return []
    active = active_cells(list(cells), hives, ((e.from_path, e.to_path) for e in edges))
    graph = _HeaderGraph(cells, set(hives), edges)
    out: list[Diagnostic] = []
    for cell in wanted:
        if not active[cell.path]:
            continue
        for key in required(cell.contract, "context"):
            if cell.path not in graph.context_reach(key, active):
                out.append(_context_diagnostic(cell, key, graph))
        for key in required(cell.contract, "hop"):
            lacking = graph.hop_lacking(cell.path, key)
            if lacking is not None:
                out.append(_hop_diagnostic(cell, key, lacking))
    return out


class _HeaderGraph:
    def __init__(
        self, cells: Mapping[str, CheckedCell], hives: set[str], edges: Sequence[CheckedEdge]
    ) -> None:
        self.cells = cells
        self.hives = hives
        self.edges = edges
        self.incoming: dict[str, list[int]] = defaultdict(list)
        self.outgoing: dict[str, list[int]] = defaultdict(list)
        for index, edge in enumerate(edges):
            self.incoming[edge.to_path].append(index)
            self.outgoing[edge.from_path].append(index)
        self._context: dict[str, set[str]] = {}
        self._hop: dict[str, list[bool]] = {}
        self._routes: dict[str, dict[str, _Step]] = {}
        self._deleting: dict[str, str | None] = {}

    def modifier(self, index: int) -> Modifier:
        return self.edges[index].modifier or _NO_MODIFIER

    # -- context: forward from every setter ---------------------------------------------------

    def context_reach(self, key: str, active: Mapping[str, bool]) -> set[str]:
        """Paths a message carrying ``key`` can reach from a setter (memoised per key)."""
        found = self._context.get(key)
        if found is not None:
            return found
        found = {
            c.path
            for c in self.cells.values()
            if active.get(c.path) and key in c.contract.ingress.context
        }
        for edge in self.edges:
            modifier = edge.modifier or _NO_MODIFIER
            if key in modifier.set_context and key not in modifier.delete_context:
                found.add(edge.to_path)
        queue = deque(found)
        while queue:
            node = queue.popleft()
            for index in self.outgoing.get(node, ()):
                edge = self.edges[index]
                if edge.to_path not in found and key not in self.modifier(index).delete_context:
                    found.add(edge.to_path)
                    queue.append(edge.to_path)
        self._context[key] = found
        return found

    def route_without(self, target: str, key: str) -> list[str]:
        """A route a message can take into ``target`` without ``key``, from a node nothing
        routes to (where messages enter); [] when there is none. Long routes come back
        shortened (``…``). One walk per key serves every cell that lacks it, so a tree
        where thousands do stays linear."""
        walk = self._routes.get(key)
        if walk is None:
            walk = self._routes[key] = self._entry_walk(key)
        step = walk.get(target)
        if step is None:
            return []
        tail = [target]
        parent, entry, second, depth = step
        while parent is not None and len(tail) < 3:
            tail.append(parent)
            parent = walk[parent][0]
        if parent is None:
            return tail[::-1]
        head = [entry] if second in tail or second is None else [entry, second]
        return [*head, "…", *tail[::-1]] if depth > len(head) + len(tail) else [*head, *tail[::-1]]

    def _entry_walk(self, key: str) -> dict[str, _Step]:
        sources = sorted(p for p in self.outgoing if not self.incoming.get(p))
        walk: dict[str, _Step] = {p: (None, p, None, 1) for p in sources}
        queue = deque(sources)
        while queue:
            node = queue.popleft()
            _, entry, second, depth = walk[node]
            for index in self.outgoing.get(node, ()):
                to_path = self.edges[index].to_path
                if to_path not in walk and key not in self.modifier(index).delete_context:
                    walk[to_path] = (node, entry, second or to_path, depth + 1)
                    queue.append(to_path)
        return walk

    def deletes(self, key: str) -> str | None:
        """The label of an edge that deletes ``key``, if any does (remembered per key)."""
        if key not in self._deleting:
            self._deleting[key] = next(
                (
                    e.label
                    for i, e in enumerate(self.edges)
                    if key in self.modifier(i).delete_context
                ),
                None,
            )
        return self._deleting[key]

    # -- hop: the greatest set of edges that provide a key --------------------------------------

    def _providing(self, key: str) -> list[bool]:
        found = self._hop.get(key)
        if found is not None:
            return found
        provides = [True] * len(self.edges)
        failing: dict[str, int] = defaultdict(int)
        """Per hive: inbound edges known not to provide the key (0 = it passes it on)."""
        queue = deque(range(len(self.edges)))
        while queue:
            index = queue.popleft()
            if provides[index] and not self._provides(index, key, failing):
                provides[index] = False
                to_path = self.edges[index].to_path
                if to_path in self.hives:  # edges out of that hive may fail now
                    failing[to_path] += 1
                    queue.extend(self.outgoing.get(to_path, ()))
        self._hop[key] = provides
        return provides

    def _provides(self, index: int, key: str, failing: Mapping[str, int]) -> bool:
        edge = self.edges[index]
        modifier = self.modifier(index)
        if key in modifier.delete_hop:
            return False
        if key in modifier.set_hop:
            return True
        source = edge.from_path
        if source in self.hives:
            return failing.get(source, 0) == 0
        cell = self.cells.get(source)
        return cell is not None and key in cell.contract.emits.hop

    def hop_lacking(self, target: str, key: str) -> list[str] | None:
        """None when every edge into ``target`` provides ``key``; else the labels of those
        that do not ([] when no edge leads there)."""
        inbound = self.incoming.get(target, [])
        if not inbound:
            return []
        provides = self._providing(key)
        lacking = [self.edges[i].label for i in inbound if not provides[i]]
        return lacking or None


def _context_diagnostic(cell: CheckedCell, key: str, graph: _HeaderGraph) -> Diagnostic:
    route = graph.route_without(cell.path, key)
    if len(route) > 1:
        how = f"a message entering at {route[0]} reaches it by {' → '.join(route)} without it"
    elif not graph.incoming.get(cell.path):
        how = "no edge leads to this cell, so nothing inside the colony can set it"
    elif (deleted := graph.deletes(key)) is not None:
        how = f"every route in drops it or never sets it ({deleted} deletes it)"
    else:
        how = "every route in runs through a loop that never sets it"
    fixes = [f'set it on an edge into the cell ("modifier": {{"set_context": {{"{key}": ...}}}})']
    if key in INGRESS_CONTEXT_KEYS:
        fixes.append(
            f'declare "ingress": {{"context": ["{key}"]}} in the contract of the cell where '
            "messages carrying it enter the colony"
        )
    fixes.append('or mark it "required": false if the cell can do without it')
    return Diagnostic(
        Severity.ERROR,
        "context_unreachable",
        f"context key '{key}' is required here, but no route into {cell.path} provides it "
        f"(meclaw: context presence not reachable): {how}",
        cell.file,
        ("contract", "consumes", "context", key),
        "; ".join(fixes) + ".",
    )


def _hop_diagnostic(cell: CheckedCell, key: str, lacking: list[str]) -> Diagnostic:
    if lacking:
        how = f"{', '.join(lacking)} can deliver a message without it"
    else:
        how = "no edge leads to this cell"
    where: JsonPath = ("contract", "consumes", "hop", key)
    return Diagnostic(
        Severity.ERROR,
        "hop_unreachable",
        f"hop key '{key}' is required here, but not every edge into {cell.path} brings it "
        f"(hop headers last one hop; meclaw: fan-in intersection): {how}",
        cell.file,
        where,
        f'declare it in the source cell\'s "emits": {{"hop": {{"{key}": ...}}}}, set it on '
        f'each edge ("modifier": {{"set_hop": {{"{key}": ...}}}}), or mark it "required": '
        "false.",
    )
