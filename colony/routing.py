"""The whole routing rule set, as pure synchronous functions.

:func:`route` takes one message and the topology and returns the :class:`colony.effects.Effects`
it causes, transits and error replies included; :func:`route_emissions` does the same for what a
cell emitted, and :func:`route_outcome` for however the handling of a message ended. Nothing
here performs I/O, logs, or touches a queue: :mod:`colony.journal` commits the effects and
:class:`colony.colony.Colony` carries them out. The one thing routing changes in place is the
message it routes (its TTL spent, its target resolved): from then on it belongs to the record.

Order of checks for one message, as in meclaw:

1. a registered but inactive cell takes nothing (``cell_inactive``, no TTL spent);
2. a message with TTL 0 dies (``ttl_expired``) before its target is even resolved;
3. otherwise the decision costs one TTL unit, and the target is ``/colony`` (invalid), a
   ``/colony/*`` endpoint, a cell (delivery), a hive (transit: the hive's out-edges are
   evaluated at once), or nothing (``unresolved_path``, or one error reply to ``reply_to``).

Each message is routed to completion (a FIFO of the transits and replies it causes) before the
next: a cell's emissions reach the journal in the order the cell made them.
"""

from __future__ import annotations

import functools
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, assert_never

from colony.cell import Emission, Output
from colony.config.models import Contract
from colony.contracts import emits_violation
from colony.dead_letters import DeadLetter, DeadLetterCode
from colony.edges import EdgeTable, Skipped, Taken, restore_ttl
from colony.effects import Delivery, Effects, LogRow, Note, Read
from colony.envelope import Envelope, Headers, JsonObject, follow_up, split_content
from colony.ids import uuid7
from colony.outcome import Crashed, Outcome, Outputs, Refused, TimedOut
from colony.paths import ANSWERING, COLONY_ENDPOINT, is_colony_endpoint, resolve
from colony.ubf import body_problem

COLONY = COLONY_ENDPOINT
EXTERNAL = "@external"
"""``from_path`` of message-log rows for messages born outside the colony."""
READ_REPLY_SENDER = "/colony"
"""Who sends the answer of a ``/colony/*`` read (and every other substrate reply)."""
_resolve = functools.lru_cache(maxsize=4096)(resolve)
"""``resolve(sender, target)`` memoised: a topology names few paths, and each message names
them again (bounded: cells may name paths freely)."""


class Target(Protocol):
    """A registered cell as routing sees it."""

    @property
    def active(self) -> bool: ...


@dataclass(slots=True)
class RoutingTable:
    """The topology and the colony settings routing reads."""

    cells: Mapping[str, Target]
    hives: frozenset[str]
    edges: EdgeTable
    default_ttl: int = 64
    """``colony.json message_default_ttl``: what a restoring edge gives back."""
    ttl_notice: bool = False
    """``colony.json ttl_notice``: a dying message's ``reply_to`` is told."""
    record: bool = True
    """Write message-log rows (the harness may turn them off)."""
    egress: bool = False
    """Direct mode: a message at the root hive that no out-edge takes leaves the colony."""


@dataclass(frozen=True, slots=True)
class Emitter:
    """A cell as the routing of its emissions sees it."""

    path: str
    contract: Contract | None = field(default=None, compare=False)
    """The contract its emissions are checked against (``strict_validation``), or None when
    they are not checked here (off, or the cell type checks its own, as the code cell does)."""


# -- a message, to completion ---------------------------------------------------------------------


def route(table: RoutingTable, sender: str, message: Envelope) -> Effects:
    """Everything routing ``message`` from ``sender`` causes, its transits and replies too."""
    fx = Effects()
    _route(table, fx, sender, message)
    return fx


def _route(table: RoutingTable, fx: Effects, sender: str, message: Envelope) -> None:
    work: deque[tuple[str, Envelope]] | None = None
    while True:
        more = _route_one(table, fx, sender, message)
        if more:
            if work is None:
                work = deque(more)
            else:
                work.extend(more)
        if not work:
            return
        sender, message = work.popleft()


def _route_one(
    table: RoutingTable, fx: Effects, sender: str, message: Envelope
) -> list[tuple[str, Envelope]] | None:
    """One routing decision (the order of checks in the module's docstring); returns the
    messages it causes, to be routed next."""
    resolved = _resolve(sender, message.target)
    cell = table.cells.get(resolved)
    ttl = message.ttl
    if ttl <= 0:  # even to an inactive cell
        fx.decisions += 1
        return _expired(table, fx, sender, message, resolved)
    if cell is not None and not cell.active:  # no decision taken, no TTL spent
        dead_letter(
            fx,
            DeadLetterCode.CELL_INACTIVE,
            sender,
            message.target,
            resolved,
            message,
            "the target cell is inactive or failed",
        )
        return None
    fx.decisions += 1
    ttl -= 1
    message.ttl = ttl
    if is_colony_endpoint(resolved):  # before a cell at the same path
        _endpoint(fx, sender, message, resolved)
        return None
    if cell is not None:
        message.target = resolved
        fx.deliveries.append(Delivery(resolved, message, sender))
        if table.record:
            origin = EXTERNAL if message.parent_message_id is None else sender
            fx.logs.append(LogRow(message, origin, resolved, ttl, fx.at_ms))
        return None
    if resolved in table.hives:
        return _transit(table, fx, sender, message, resolved, ttl)
    if message.reply_to is not None:
        fx.notes.append(
            Note(
                "warning",
                "unresolved_path_reply",
                {
                    "sender": sender,
                    "target": resolved,
                    "reply_to": message.reply_to,
                    "trace_id": message.trace_id,
                    "message_id": message.id,
                },
            )
        )
        return [(COLONY, cascade_reply(message, resolved, ttl))]
    dead_letter(
        fx,
        DeadLetterCode.UNRESOLVED_PATH,
        sender,
        message.target,
        resolved,
        message,
        "no cell or hive at this path",
    )
    return None


def _transit(
    table: RoutingTable, fx: Effects, sender: str, message: Envelope, hive: str, ttl: int
) -> list[tuple[str, Envelope]] | None:
    """A message reaching a hive: the hive's out-edges are evaluated at once."""
    taken, skipped = table.edges.evaluate(hive, message.headers)
    if table.record:
        origin = EXTERNAL if message.parent_message_id is None else sender
        fired = tuple(t.edge.ref for t in taken)
        fx.logs.append(LogRow(message, origin, hive, ttl, fx.at_ms, fired))
    if skipped:
        _note_skipped(fx, skipped, message)
    if taken:
        return [(hive, copy) for copy in transit_follow_ups(message, taken, ttl, table.default_ttl)]
    if hive == "/" and table.egress:
        fx.egress.append(message)
    else:
        dead_letter(
            fx,
            DeadLetterCode.HIVE_NO_ROUTE,
            message.reply_to or hive,
            message.target,
            hive,
            message,
            "no out-edge of the hive matched the message",
        )
    return None


def _endpoint(fx: Effects, sender: str, message: Envelope, resolved: str) -> None:
    """A message to ``/colony`` (invalid) or to one of its endpoints."""
    if resolved == COLONY:
        dead_letter(
            fx,
            DeadLetterCode.COLONY_ENDPOINT_INVALID,
            sender,
            message.target,
            resolved,
            message,
            "/colony itself is not an endpoint",
        )
    elif resolved not in ANSWERING:
        dead_letter(
            fx,
            DeadLetterCode.COLONY_ENDPOINT_UNIMPLEMENTED,
            sender,
            message.target,
            resolved,
            message,
            f"{resolved} answers no routed messages in this version",
        )
    elif message.reply_to is not None:
        fx.reads.append(Read(resolved, message))
    else:
        fx.notes.append(
            Note(
                "warning",
                "colony_read_unanswered",
                {
                    "endpoint": resolved,
                    "sender": sender,
                    "trace_id": message.trace_id,
                    "message_id": message.id,
                    "detail": "the message has no reply_to, so nobody receives the answer",
                },
            )
        )


def _expired(
    table: RoutingTable, fx: Effects, sender: str, message: Envelope, resolved: str
) -> list[tuple[str, Envelope]] | None:
    fx.letters.append(
        DeadLetter(DeadLetterCode.TTL_EXPIRED, sender, message.target, message.target, message)
    )
    fx.notes.append(
        Note(
            "error",
            "ttl_expired",
            {
                "message_id": message.id,
                "sender": sender,
                "target": resolved,
                "trace_id": message.trace_id,
                "reason": "ttl_expired",
                "message_default_ttl": table.default_ttl,
                "detail": "message died of TTL exhaustion — terminal, dead-lettered, nothing "
                "reaches the origin; a loop may need a larger colony.json message_default_ttl "
                "or a bounded restore_ttl edge",
            },
        )
    )
    if table.ttl_notice and message.reply_to is not None:
        return [(COLONY, ttl_notice(message, resolved, table.default_ttl))]
    return None


def dead_letter(
    fx: Effects,
    code: DeadLetterCode,
    sender: str,
    original: str,
    resolved: str,
    message: Envelope,
    detail: str | None = None,
) -> None:
    """Add a dead letter, and the ``dead_lettered`` log line that says so, to ``fx``."""
    fx.letters.append(DeadLetter(code, sender, original, resolved, message, detail, fx.at_ms))
    fx.notes.append(
        Note(
            "warning",
            "dead_lettered",
            {
                "error_code": str(code),
                "sender": sender,
                "original": original,
                "target": resolved,
                "trace_id": message.trace_id,
                "message_id": message.id,
                "detail": detail,
            },
        )
    )


def _note_skipped(fx: Effects, skipped: Iterable[Skipped], message: Envelope) -> None:
    for skip in skipped:
        edge = skip.edge
        fields: dict[str, Any] = {
            "edge_id": edge.id,
            "from": edge.from_path,
            "to": edge.to_path,
            "trace_id": message.trace_id,
            "error": skip.reason,
        }
        if skip.stage == "condition":
            fields["condition"] = edge.condition_source
            level = "debug" if skip.missing_key else "warning"
            event = "edge_condition_missing_key" if skip.missing_key else "edge_condition_failed"
            fx.notes.append(Note(level, event, fields))
        else:
            fields["key"] = skip.key
            fx.notes.append(Note("warning", "edge_modifier_failed", fields))


# -- what a cell emitted ------------------------------------------------------------------------


def route_emissions(
    table: RoutingTable, emitter: Emitter, parent: Envelope | None, outputs: Sequence[Output]
) -> Effects:
    """Route a cell's emissions, each to completion, in the order the cell made them.
    ``parent`` is the message being handled, or None for a long-running cell's own emissions
    (each then starts a new trace)."""
    fx = Effects()
    _emissions(table, fx, emitter, parent, outputs)
    return fx


def _emissions(
    table: RoutingTable,
    fx: Effects,
    emitter: Emitter,
    parent: Envelope | None,
    outputs: Sequence[Output],
) -> None:
    for output in outputs:
        if isinstance(output, Emission):
            _emission(table, fx, emitter, parent, output.content, output.target)
        else:
            _emission(table, fx, emitter, parent, output, None)


def _emission(
    table: RoutingTable,
    fx: Effects,
    emitter: Emitter,
    message: Envelope | None,
    content: Any,
    target: str | None,
) -> None:
    sender = emitter.path
    if message is None:  # a long-running cell's own emission starts a new trace
        parent = _origin(sender, table.default_ttl)
        parent_id = None
        raw_target = target or sender
    else:
        parent = message
        parent_id = message.id
        raw_target = target or message.reply_to or message.target
    if not isinstance(content, dict):
        dead_letter(
            fx,
            DeadLetterCode.INVALID_UBF_BODY,
            sender,
            raw_target,
            raw_target,
            _record(parent, parent_id, raw_target, {}, content),
            "a cell's content must be a JSON object",
        )
        return
    hop, body = split_content(content)
    problem = body_problem(body)
    if problem is not None:
        dead_letter(
            fx,
            DeadLetterCode.INVALID_UBF_BODY,
            sender,
            raw_target,
            raw_target,
            _record(parent, parent_id, raw_target, hop, body),
            problem,
        )
        return
    if emitter.contract is not None:
        violation = emits_violation(emitter.contract, hop, body)
        if violation is not None:
            if message is not None and message.reply_to is not None:
                _route(table, fx, sender, substrate_reply(message, "contract_violation", violation))
            else:
                dead_letter(
                    fx,
                    DeadLetterCode.CONTRACT_VIOLATION,
                    sender,
                    raw_target,
                    raw_target,
                    _record(parent, parent_id, raw_target, hop, body),
                    violation,
                )
            return
    context = parent.headers.context
    if is_colony_endpoint(raw_target):
        direct = _record(parent, parent_id, raw_target, hop, body)
        direct.reply_to = sender
        direct.headers = Headers(context, hop)
        _route(table, fx, sender, direct)
        return
    taken, skipped = table.edges.evaluate(sender, Headers(context, hop))
    if skipped:
        _note_skipped(fx, skipped, parent)
    if not taken:
        dead_letter(
            fx,
            DeadLetterCode.NO_ROUTE,
            sender,
            raw_target,
            raw_target,
            _record(parent, parent_id, raw_target, hop, body),
            "the emission matched none of the cell's out-edges",
        )
        return
    for follow in emission_follow_ups(parent, sender, taken, body, parent.ttl, table.default_ttl):
        if message is None:
            follow.parent_message_id = None
        _route(table, fx, sender, follow)


# -- however handling ended -------------------------------------------------------------------


_ANSWERED = frozenset({DeadLetterCode.CONSUMES_VIOLATION, DeadLetterCode.MESSAGE_TIMEOUT})
"""Refusals its ``reply_to`` is told about (a dead letter only when there is none)."""


def route_outcome(
    table: RoutingTable, emitter: Emitter, message: Envelope | None, outcome: Outcome
) -> Effects:
    """What how the handling of ``message`` by ``emitter`` ended causes: its emissions routed,
    an error reply to ``reply_to``, or a dead letter."""
    fx = Effects()
    cell = emitter.path
    match outcome:
        case Outputs(outputs=outputs):
            _emissions(table, fx, emitter, message, outputs)
        case Crashed(error=error):
            assert message is not None
            dead_letter(fx, DeadLetterCode.CELL_CRASHED, cell, message.target, cell, message, error)
        case TimedOut():
            assert message is not None
            _refuse(
                table,
                fx,
                cell,
                message,
                DeadLetterCode.MESSAGE_TIMEOUT,
                "message_timeout backstop elapsed",
            )
        case Refused(code=code, detail=detail):
            assert message is not None
            if code in _ANSWERED:
                _refuse(table, fx, cell, message, code, detail)
            else:  # the cell has failed: nobody is told but the dead letters
                sender = message.reply_to or cell
                dead_letter(fx, code, sender, message.target, cell, message, detail)
        case _:
            assert_never(outcome)
    return fx


def _refuse(
    table: RoutingTable,
    fx: Effects,
    cell: str,
    message: Envelope,
    code: DeadLetterCode,
    text: str,
) -> None:
    if message.reply_to is not None:
        _route(table, fx, cell, substrate_reply(message, str(code), text))
    else:
        dead_letter(fx, code, cell, message.target, cell, message, text)


# -- the messages routing derives -----------------------------------------------------------


def _origin(sender: str, ttl: int) -> Envelope:
    """The stand-in parent of a long-running cell's own emission: a fresh trace, no context."""
    trace = uuid7()
    return Envelope(
        id=trace,
        trace_id=trace,
        parent_message_id=None,
        correlation_id=None,
        target=sender,
        reply_to=None,
        ttl=ttl,
        headers=Headers({}, {}),
        body={},
        created_at=int(time.time()),
    )


def _record(
    parent: Envelope, parent_id: str | None, target: str, hop: JsonObject, body: Any
) -> Envelope:
    """The message an emission would have become (what a dead letter stores)."""
    return Envelope(
        id=uuid7(),
        trace_id=parent.trace_id,
        parent_message_id=parent_id,
        correlation_id=parent.correlation_id,
        target=target,
        reply_to=None,
        ttl=parent.ttl,
        headers=Headers(parent.headers.context, hop),
        body=body,
        created_at=int(time.time()),
        partition=parent.partition,
        epoch=parent.epoch,
    )


def transit_follow_ups(
    message: Envelope, taken_edges: list[Taken], ttl: int, default_ttl: int
) -> list[Envelope]:
    """The copies a hive forwards: ``reply_to`` and correlation pass through, the hop is not
    reset, the body is shared, the TTL carried (or restored by a restoring edge)."""
    out: list[Envelope] = []
    carried = ttl
    for taken in taken_edges:
        ttl = restore_ttl(carried, default_ttl) if taken.edge.restore_ttl else carried
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
        partition=message.partition,
        epoch=message.epoch,
    )
