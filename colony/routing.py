"""The routing decision, as a pure function, and the messages it derives.

``decide`` looks at one message and the topology and says what happens to it; it performs no
I/O, logs nothing and touches no queue. :mod:`colony.colony` carries decisions out (mailbox
puts, dead letters, the message log, log lines). Order of checks, as in meclaw:

1. a registered but inactive cell takes nothing (``cell_inactive``, no TTL spent);
2. a message with TTL 0 dies (``ttl_expired``) before its target is even resolved;
3. otherwise the decision costs one TTL unit, and the target is ``/colony`` (invalid), a
   ``/colony/*`` endpoint, a cell (delivery), a hive (transit: the hive's out-edges are
   evaluated at once), or nothing (``unresolved_path``, or one error reply to ``reply_to``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from colony.edges import EdgeTable, Skipped, Taken, restore_ttl
from colony.envelope import Envelope, Headers, follow_up
from colony.ids import uuid7
from colony.paths import is_colony_endpoint, resolve

COLONY = "/colony"


class Target(Protocol):
    """A registered cell as routing sees it."""

    @property
    def active(self) -> bool: ...


@dataclass(slots=True)
class RoutingTable:
    cells: Mapping[str, Target]
    hives: frozenset[str]
    edges: EdgeTable


@dataclass(slots=True)
class Inactive:
    resolved: str


@dataclass(slots=True)
class Expired:
    resolved: str


@dataclass(slots=True)
class InvalidEndpoint:
    resolved: str
    ttl: int


@dataclass(slots=True)
class Endpoint:
    resolved: str
    ttl: int


@dataclass(slots=True)
class Deliver:
    cell: Any
    resolved: str
    ttl: int


@dataclass(slots=True)
class Transit:
    hive: str
    ttl: int
    taken: list[Taken]
    skipped: list[Skipped]


@dataclass(slots=True)
class Unresolved:
    resolved: str
    ttl: int


Decision = Inactive | Expired | InvalidEndpoint | Endpoint | Deliver | Transit | Unresolved


def decide(sender: str, message: Envelope, table: RoutingTable) -> Decision:
    """What one routing decision does with ``message`` sent by ``sender``."""
    resolved = resolve(sender, message.target)
    cell = table.cells.get(resolved)
    if cell is not None and message.ttl > 0 and not cell.active:
        return Inactive(resolved)
    if message.ttl <= 0:
        return Expired(resolved)
    ttl = message.ttl - 1
    if is_colony_endpoint(resolved):
        if resolved == COLONY:
            return InvalidEndpoint(resolved, ttl)
        return Endpoint(resolved, ttl)
    if cell is not None:
        return Deliver(cell, resolved, ttl)
    if resolved in table.hives:
        taken, skipped = table.edges.evaluate(resolved, message.headers)
        return Transit(resolved, ttl, taken, skipped)
    return Unresolved(resolved, ttl)


def transit_follow_ups(message: Envelope, decision: Transit, default_ttl: int) -> list[Envelope]:
    """The copies a hive forwards: ``reply_to`` and correlation pass through, the hop is not
    reset, the body is shared, the TTL carried (or restored by a restoring edge)."""
    out: list[Envelope] = []
    for taken in decision.taken:
        ttl = decision.ttl
        if taken.edge.restore_ttl:
            ttl = restore_ttl(ttl, default_ttl)
        out.append(
            follow_up(
                message,
                target=taken.edge.to_path,
                context=taken.context,
                hop=taken.hop,
                body=message.body,
                reply_to=message.reply_to,
                ttl=ttl,
            )
        )
    return out


def emission_follow_ups(
    message: Envelope,
    sender: str,
    taken: list[Taken],
    body: Any,
    ttl: int,
    default_ttl: int,
) -> list[Envelope]:
    """One follow-up per edge a cell's emission takes; ``reply_to`` is the emitting cell."""
    out: list[Envelope] = []
    for edge_taken in taken:
        out.append(
            follow_up(
                message,
                target=edge_taken.edge.to_path,
                context=edge_taken.context,
                hop=edge_taken.hop,
                body=body,
                reply_to=sender,
                ttl=restore_ttl(ttl, default_ttl) if edge_taken.edge.restore_ttl else ttl,
            )
        )
    return out


def _error_body(text: str) -> dict[str, Any]:
    return {"messages": [{"origin": "assistant", "type": "text", "text": text}]}


def cascade_reply(message: Envelope, resolved: str, ttl: int) -> Envelope:
    """The one terminal error reply to ``reply_to`` for an unresolved target.

    Unlike meclaw's (body null, no headers) it is a UBF message naming what was not found, and
    it carries the context so correlators can match it (decisions.md #2, #3).
    """
    assert message.reply_to is not None
    return follow_up(
        message,
        target=message.reply_to,
        context=message.headers.context,
        hop={"finish_reason": "error", "error_code": "unresolved_path", "dead_target": resolved},
        body=_error_body(f"no cell or hive at {resolved}; the message could not be delivered"),
        reply_to=None,
        ttl=ttl,
    )


def substrate_reply(message: Envelope, error_code: str, text: str) -> Envelope:
    """A direct error reply from the substrate (``consumes_violation``, ``message_timeout``,
    ``contract_violation``) to the input's ``reply_to``, context carried, edges bypassed."""
    assert message.reply_to is not None
    return follow_up(
        message,
        target=message.reply_to,
        context=message.headers.context,
        hop={"finish_reason": "error", "error_code": error_code},
        body=_error_body(text),
        reply_to=None,
        ttl=message.ttl,
    )


def ttl_notice(message: Envelope, resolved: str, default_ttl: int) -> Envelope:
    """The opt-in notice to a dying message's ``reply_to`` (``colony.json ttl_notice``)."""
    assert message.reply_to is not None
    return Envelope(
        id=uuid7(),
        trace_id=message.trace_id,
        parent_message_id=message.id,
        correlation_id=message.correlation_id,
        target=message.reply_to,
        reply_to=None,
        ttl=default_ttl,
        headers=Headers(
            message.headers.context,
            {
                "finish_reason": "error",
                "error_code": "ttl_expired",
                "dead_target": resolved,
                "dead_message_id": message.id,
            },
        ),
        body=_error_body(
            f"ttl exhausted before {resolved} was reached — the message is terminal, no "
            "result will follow"
        ),
        created_at=int(time.time()),
    )
