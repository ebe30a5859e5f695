"""Compiled edges and the fan-out decision.

All edges whose ``from`` is the sender are evaluated, in declaration order, against the
*incoming* headers; every edge whose condition holds and whose modifier evaluates fires.
There is no first-match and no default edge. A condition error skips its edge (a key the
message lacks is a ``missing_key`` skip, logged at DEBUG by the caller; anything else, and any
modifier error, at WARN). This module decides; it neither logs nor routes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from colony.config.loader import EdgeDecl
from colony.envelope import Headers, JsonObject
from colony.expressions import Activation, Engine, EvaluationError, Program
from colony.ids import uuid7


@dataclass(frozen=True, slots=True)
class Edge:
    """One edge, expressions compiled."""

    id: str
    from_path: str
    to_path: str
    scope: str
    """The hive that declares it."""
    index: int
    ref: str
    """``<hive>#<index>``: the edge's place in its hive's ``params.graph.edges``, the name the
    record keeps (``id`` is new at every boot, as meclaw's)."""
    condition_source: str | None
    condition: Program | None
    set_context: tuple[tuple[str, Program], ...]
    """Sorted by key, as meclaw evaluates them."""
    delete_context: tuple[str, ...]
    set_hop: tuple[tuple[str, Program], ...]
    delete_hop: tuple[str, ...]
    restore_ttl: bool
    reads_headers: bool
    """Its condition or a modifier expression reads the headers (needs an activation)."""
    modifies: bool
    """Its modifier sets or deletes a header key (else the copy carries the headers as is)."""


@dataclass(slots=True)
class Taken:
    """An edge that fires, with the headers its follow-up carries."""

    edge: Edge
    context: JsonObject
    hop: JsonObject


@dataclass(slots=True)
class Skipped:
    """An edge whose expression failed; the caller logs it."""

    edge: Edge
    stage: str
    """``condition`` or ``modifier``."""
    key: str | None
    """The modifier key whose expression failed."""
    reason: str
    missing_key: bool
    """The condition read a key the message does not carry (logged at DEBUG)."""


def compile_edge(decl: EdgeDecl, engine: Engine) -> Edge:
    """Compile one declared edge; the loader has already checked that everything parses."""
    modifier = decl.modifier
    set_context: tuple[tuple[str, Program], ...] = ()
    set_hop: tuple[tuple[str, Program], ...] = ()
    delete_context: tuple[str, ...] = ()
    delete_hop: tuple[str, ...] = ()
    restore = False
    if modifier is not None:
        set_context = tuple((k, engine.compile(v)) for k, v in sorted(modifier.set_context.items()))
        set_hop = tuple((k, engine.compile(v)) for k, v in sorted(modifier.set_hop.items()))
        delete_context = tuple(modifier.delete_context)
        delete_hop = tuple(modifier.delete_hop)
        restore = modifier.restore_ttl
    return Edge(
        id=uuid7(),
        from_path=decl.from_path,
        to_path=decl.to_path,
        scope=decl.scope,
        index=decl.index,
        ref=f"{decl.scope}#{decl.index}",
        condition_source=decl.condition,
        condition=engine.compile(decl.condition) if decl.condition is not None else None,
        set_context=set_context,
        delete_context=delete_context,
        set_hop=set_hop,
        delete_hop=delete_hop,
        restore_ttl=restore,
        reads_headers=decl.condition is not None or bool(set_context) or bool(set_hop),
        modifies=bool(set_context or delete_context or set_hop or delete_hop),
    )


def _apply(
    sets: tuple[tuple[str, Program], ...],
    deletes: tuple[str, ...],
    base: JsonObject,
    activation: Activation | None,
) -> JsonObject:
    if not sets and not deletes:
        return base  # untouched compartments are shared, never copied
    out = dict(base)
    for key, program in sets:
        assert activation is not None
        out[key] = program.evaluate(activation)
    for key in deletes:
        out.pop(key, None)
    return out


class EdgeTable:
    """Edges indexed by their ``from`` path, each list in declaration order."""

    def __init__(self, edges: Iterable[Edge], engine: Engine) -> None:
        self._engine = engine
        self._last: tuple[JsonObject, JsonObject, Activation] | None = None
        """The activation built last, with the two header objects it was built from."""
        self._by_from: dict[str, list[Edge]] = {}
        for edge in edges:
            self._by_from.setdefault(edge.from_path, []).append(edge)

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_from.values())

    def all(self) -> list[Edge]:
        """Every edge, grouped by ``from`` path, each group in declaration order."""
        return [edge for edges in self._by_from.values() for edge in edges]

    def evaluate(self, path: str, headers: Headers) -> tuple[list[Taken], list[Skipped]]:
        """The edges from ``path`` that fire for these headers, and those that erred."""
        edges = self._by_from.get(path)
        taken: list[Taken] = []
        skipped: list[Skipped] = []
        if not edges:
            return taken, skipped
        context, hop = headers.context, headers.hop
        activation: Activation | None = None
        for edge in edges:
            if activation is None and edge.reads_headers:
                activation = self._activation(context, hop)
            if edge.condition is not None:
                assert activation is not None
                try:
                    verdict = edge.condition.evaluate(activation)
                except EvaluationError as exc:
                    skipped.append(Skipped(edge, "condition", None, exc.reason, exc.missing_key))
                    continue
                if verdict is not True:
                    if verdict is not False:
                        skipped.append(
                            Skipped(
                                edge,
                                "condition",
                                None,
                                f"the condition returned {type(verdict).__name__}, not a bool",
                                False,
                            )
                        )
                    continue
            if not edge.modifies:
                taken.append(Taken(edge, context, hop))
                continue
            try:
                new_context = _apply(edge.set_context, edge.delete_context, context, activation)
                new_hop = _apply(edge.set_hop, edge.delete_hop, hop, activation)
            except EvaluationError as exc:
                key = _failing_key(edge, activation)
                skipped.append(Skipped(edge, "modifier", key, exc.reason, False))
                continue
            taken.append(Taken(edge, new_context, new_hop))
        return taken, skipped

    def _activation(self, context: JsonObject, hop: JsonObject) -> Activation:
        """The activation for these headers. A hive forwards its copies with the headers they
        came with unless an edge modifies them, so down a chain of hives (and across the
        copies of one fan-out) the same two objects come back: the activation built for them
        last is reused, not converted again. Headers are never changed once built
        (colony.envelope), and the cached pair is kept alive, so identity is equality here."""
        last = self._last
        if last is not None and last[0] is context and last[1] is hop:
            return last[2]
        activation = self._engine.activation({"context": context, "hop": hop})
        self._last = (context, hop, activation)
        return activation


def _failing_key(edge: Edge, activation: Activation | None) -> str | None:
    """Which modifier expression failed (for the log line); re-evaluates, off the hot path."""
    for key, program in (*edge.set_context, *edge.set_hop):
        try:
            if activation is not None:
                program.evaluate(activation)
        except EvaluationError:
            return key
    return None


def restore_ttl(ttl: int, default_ttl: int) -> int:
    """What a restoring edge leaves: the default budget, never less than what is left."""
    return ttl if ttl > default_ttl else default_ttl
