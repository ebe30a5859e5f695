"""The message envelope and the content a cell emits.

An envelope has ten fields and only the colony sets them. Its headers have two compartments:

* ``context`` lives for the whole chain; only edges (and the ingress, at birth) write it;
* ``hop`` lives for one leg: the emitting cell's ``header`` becomes the next ``hop``, refined by
  the edge taken; a hive transit carries it unchanged.

What a cell produces is *content*: a JSON object whose ``header`` key (if an object) becomes
the next ``hop`` and whose other keys are the body.

Envelopes, headers and bodies are shared between follow-ups and the message log without
copying: treat them as read-only once built.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from colony.ids import uuid7

JsonObject = dict[str, Any]

DEFAULT_TTL = 64
"""Routing budget when neither the sender nor ``colony.json`` says otherwise."""


@dataclass(slots=True)
class Headers:
    """The two header compartments."""

    context: JsonObject = field(default_factory=dict)
    """Chain-long: only edges and the ingress write it."""
    hop: JsonObject = field(default_factory=dict)
    """One leg: replaced by every cell emission."""


@dataclass(slots=True)
class Envelope:
    """One message in flight."""

    id: str
    trace_id: str
    parent_message_id: str | None
    correlation_id: str | None
    target: str
    """As the producer wrote it; on delivery, the resolved absolute path."""
    reply_to: str | None
    ttl: int
    """Routing decisions this message may still take."""
    headers: Headers
    body: Any
    created_at: int
    """Unix seconds."""
    partition: int = 0
    """The conversation's partition (a colony with a ``cluster`` block: ``colony.cluster``),
    chosen at ingress and inherited like the trace id. Not part of the stored envelope: the
    journal keeps it in a column. 0 in a colony without a cluster."""
    epoch: int | None = 0
    """The epoch of this node's ownership of ``partition`` when the message entered its
    memory, inherited by follow-ups; a unit made under an epoch that is no longer the
    partition's is refused (fenced). None: a message for a partition another node owns (it is
    journalled for that node to claim, never handled here)."""

    @property
    def context(self) -> JsonObject:
        return self.headers.context

    @property
    def hop(self) -> JsonObject:
        return self.headers.hop

    def to_json(self) -> JsonObject:
        """The serialized form dead letters store (meclaw's ``message_to_json`` shape)."""
        doc = self.head_json()
        doc["body_kind"] = "inline"
        doc["body_payload"] = self.body
        doc["created_at"] = self.created_at
        return doc

    def head_json(self) -> JsonObject:
        """:meth:`to_json` up to the body (ids, paths, TTL, headers): the journal stores the
        body apart, so a body shared by follow-ups is serialised once."""
        return {
            "id": self.id,
            "trace_id": self.trace_id,
            "parent_message_id": self.parent_message_id,
            "correlation_id": self.correlation_id,
            "target": self.target,
            "reply_to": self.reply_to,
            "ttl": self.ttl,
            "headers": {"context": self.headers.context, "hop": self.headers.hop},
        }

    @classmethod
    def from_json(cls, doc: JsonObject) -> Envelope:
        headers = doc.get("headers") or {}
        return cls(
            id=doc["id"],
            trace_id=doc["trace_id"],
            parent_message_id=doc.get("parent_message_id"),
            correlation_id=doc.get("correlation_id"),
            target=doc["target"],
            reply_to=doc.get("reply_to"),
            ttl=doc["ttl"],
            headers=Headers(dict(headers.get("context") or {}), dict(headers.get("hop") or {})),
            body=doc.get("body_payload"),
            created_at=doc["created_at"],
        )


def source_message(
    target: str,
    body: Any,
    *,
    ttl: int = DEFAULT_TTL,
    context: JsonObject | None = None,
    hop: JsonObject | None = None,
    trace_id: str | None = None,
) -> Envelope:
    """A message entering the colony from outside: no parent, no ``reply_to``, and (unless
    the ingress supplies one) ``trace_id == id``."""
    message_id = uuid7()
    return Envelope(
        id=message_id,
        trace_id=trace_id or message_id,
        parent_message_id=None,
        correlation_id=None,
        target=target,
        reply_to=None,
        ttl=ttl,
        headers=Headers(dict(context or {}), dict(hop or {})),
        body=body,
        created_at=int(time.time()),
    )


def split_content(content: JsonObject) -> tuple[JsonObject, JsonObject]:
    """``(hop, body)`` of a cell's content: ``header`` becomes the hop (a non-object header
    counts as empty), every other key is the body."""
    if "header" not in content:
        return {}, content
    header = content["header"]
    body = {key: value for key, value in content.items() if key != "header"}
    return (header if isinstance(header, dict) else {}), body


def follow_up(
    parent: Envelope,
    *,
    target: str,
    context: JsonObject,
    hop: JsonObject,
    body: Any,
    reply_to: str | None,
    ttl: int,
) -> Envelope:
    """A message derived from ``parent``: same trace (and partition), parent link, fresh id
    and timestamp."""
    # Positional: built several times per hand-off, and keywords cost a dataclass more.
    return Envelope(
        uuid7(),
        parent.trace_id,
        parent.id,
        parent.correlation_id,
        target,
        reply_to,
        ttl,
        Headers(context, hop),
        body,
        int(time.time()),
        parent.partition,
        parent.epoch,
    )
