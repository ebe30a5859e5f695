"""Which partition a conversation belongs to: the same answer on every node, for ever.

A cluster splits the colony's work into ``partitions`` slices, each owned by one node at a
time; everything a conversation does runs on the owner of its partition, in order. The key is
read once, at ingress, from the path ``cluster.partition_by`` names; every follow-up inherits
the partition like the trace id (:class:`colony.envelope.Envelope`), so an edge that sets the
key later never moves a chain that is under way.

Rules, each chosen so that one conversation is never split across nodes:

* The path is ``trace_id`` or ``context.<key>[.<key>…]`` (nested objects). A key is any
  non-empty JSON key without a ``.`` and without whitespace at either end (no CEL: the path is
  read on the hot path of every ingress and must never fail).
* A value that is absent, ``null``, an object or an array gives no key: the message falls
  back to its trace id, which every follow-up of the chain shares, so the fallback is the same
  for every message of it.
* Scalars become a canonical string, and ``42``, ``42.0`` and ``"42"`` are one key: a chat id
  that one door sends as a number and another as a string is still one conversation. Merging
  two keys only puts two conversations on one partition (harmless: a partition holds many);
  splitting one would break its order. ``true``/``false`` become ``"true"``/``"false"``.
* :func:`partition_of` hashes with BLAKE2b (8-byte digest, big-endian, modulo the partition
  count), never Python's salted ``hash()``: every process on every machine agrees. Changing the
  canonical form or the hash moves live conversations between partitions during a rolling
  upgrade; the known answers in ``tests/colony/cluster/test_partition.py`` pin both.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Mapping
from typing import Any

from colony.errors import ColonyError

TRACE_ID = "trace_id"
"""The default ``partition_by``: every trace is its own conversation."""

CONTEXT = "context"
"""The only other root a ``partition_by`` path may start from."""


class PartitionPathError(ColonyError, ValueError):
    """A ``partition_by`` path this module cannot read. Its message never quotes the path
    (it may come from a ``${VAR}``)."""

    code = "cluster_partition_by_invalid"


@functools.lru_cache(maxsize=64)
def context_keys(path: str) -> tuple[str, ...]:
    """The context keys ``path`` walks, outermost first; ``()`` for ``trace_id``.

    Raises :class:`PartitionPathError` saying what is wrong.
    """
    if path == TRACE_ID:
        return ()
    root, dot, rest = path.partition(".")
    if root != CONTEXT:
        raise PartitionPathError(
            "it must be trace_id or start with 'context.' (only the trace id and context "
            "reach every follow-up of a message)"
        )
    if not dot or not rest:
        raise PartitionPathError("it names context itself; name a key in it (context.chat_id)")
    keys = tuple(rest.split("."))
    for index, key in enumerate(keys, start=1):
        if not key:
            raise PartitionPathError(
                f"key {index} after 'context' is empty (a doubled or trailing '.')"
            )
        if key != key.strip():
            raise PartitionPathError(f"key {index} after 'context' starts or ends with whitespace")
    return keys


def canonical(value: Any) -> str | None:
    """``value`` as a partition key, or None when it gives none (absent, null, object,
    array). Numbers that are whole are written as integers, so ``42``, ``42.0`` and ``"42"``
    are one key."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return _integer(value)
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer():
            return _integer(int(value))
        return repr(value)
    return None


def _integer(value: int) -> str:
    try:
        return str(value)
    except ValueError:  # more digits than int→str allows: hex is not limited, and as stable
        return hex(value)


def partition_key(path: str, trace_id: str, context: Mapping[str, Any]) -> str:
    """The key ``path`` reads from a message entering the colony; its trace id when the path
    gives no scalar there. Raises :class:`PartitionPathError` for a path that cannot be read
    (``--validate`` refuses those first)."""
    keys = context_keys(path)
    if not keys:
        return trace_id
    node: Any = context
    for key in keys:
        if not isinstance(node, Mapping):
            return trace_id
        node = node.get(key)
    found = canonical(node)
    return trace_id if found is None else found


def partition_of(key: str, partitions: int) -> int:
    """The partition of ``key`` among ``partitions``: the first 8 bytes of BLAKE2b over its
    UTF-8 (lone surrogates kept as they are), read big-endian, modulo ``partitions``."""
    if partitions < 1:
        raise ValueError(f"partitions must be at least 1, got {partitions}")
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % partitions
