"""Small topologies for the routing rule tests: a :class:`RoutingTable` of fake cells, hives
and compiled edges, and messages to route through it. Everything here is synchronous: the
rules are tested as functions, with no event loop and no ``colony.db``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from colony.config.loader import EdgeDecl
from colony.config.models import Contract, Modifier
from colony.edges import EdgeTable, compile_edge
from colony.effects import Effects
from colony.envelope import Envelope, Headers
from colony.expressions import default_engine
from colony.ids import uuid7
from colony.routing import RoutingTable

UBF: dict[str, Any] = {"messages": [{"origin": "user", "type": "text", "text": "hi"}]}
"""A valid UBF body."""


@dataclass(slots=True)
class FakeCell:
    """A registered cell as routing sees it: only whether it takes messages."""

    active: bool = True


def edge(from_path: str, to_path: str, condition: str | None = None, **modifier: Any) -> EdgeDecl:
    """An edge as the loader declares it (endpoints already absolute); ``modifier`` takes
    ``set_context``, ``delete_context``, ``set_hop``, ``delete_hop``, ``restore_ttl``."""
    return EdgeDecl(
        scope="/",
        index=0,
        file="main/config.json",
        from_path=from_path,
        to_path=to_path,
        condition=condition,
        modifier=Modifier(**modifier) if modifier else None,
    )


def table(
    *edges: EdgeDecl,
    cells: Iterable[str] = (),
    inactive: Iterable[str] = (),
    hives: Iterable[str] = ("/",),
    **settings: Any,
) -> RoutingTable:
    """A routing table: active ``cells``, ``inactive`` ones, ``hives`` (the root by default)
    and ``edges`` compiled as :func:`colony.boot.wire` compiles them; ``settings`` are the
    :class:`RoutingTable` fields (``default_ttl``, ``ttl_notice``, ``record``, ``egress``)."""
    engine = default_engine()
    compiled = EdgeTable((compile_edge(decl, engine) for decl in edges), engine)
    targets = {path: FakeCell() for path in cells}
    targets.update({path: FakeCell(active=False) for path in inactive})
    return RoutingTable(targets, frozenset(hives), compiled, **settings)


def message(
    target: str,
    *,
    ttl: int = 64,
    reply_to: str | None = None,
    context: dict[str, Any] | None = None,
    hop: dict[str, Any] | None = None,
    body: Any = None,
    parent: str | None = None,
    correlation_id: str | None = None,
) -> Envelope:
    """A message to route; without ``parent`` it was born outside the colony (id == trace)."""
    ident = uuid7()
    return Envelope(
        id=ident,
        trace_id=ident if parent is None else uuid7(),
        parent_message_id=parent,
        correlation_id=correlation_id,
        target=target,
        reply_to=reply_to,
        ttl=ttl,
        headers=Headers(dict(context or {}), dict(hop or {})),
        body=UBF if body is None else body,
        created_at=1_700_000_000,
    )


def handled(cell: str, **fields: Any) -> Envelope:
    """A message as ``cell`` handles it: delivered (target resolved, TTL already spent) and
    with a parent, so its follow-ups are logged from the cell."""
    fields.setdefault("ttl", 10)
    return message(cell, parent=uuid7(), **fields)


def contract(**hop: dict[str, Any]) -> Contract:
    """A contract whose ``emits.hop`` declares these keys."""
    return Contract.model_validate(
        {"version": "1", "settings": {}, "consumes": {}, "emits": {"hop": hop}}
    )


# -- reading an Effects ---------------------------------------------------------------------------


def codes(fx: Effects) -> list[str]:
    return [letter.error_code for letter in fx.letters]


def delivered(fx: Effects) -> list[tuple[str, int]]:
    """``(cell, ttl)`` of every delivery, in order."""
    return [(d.cell, d.message.ttl) for d in fx.deliveries]


def rows(fx: Effects) -> list[tuple[str, str, int]]:
    """``(from, to, ttl)`` of every message-log row, in order."""
    return [(row.from_path, row.to_path, row.ttl) for row in fx.logs]


def notes(fx: Effects) -> list[tuple[str, str]]:
    """``(level, event)`` of every log line routing asks for."""
    return [(note.level, note.event) for note in fx.notes]
