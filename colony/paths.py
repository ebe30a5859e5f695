"""Cell path resolution for a colony.

Every cell lives at an absolute, slash-separated path such as ``/main/agent``; the
root is ``/``. Messages and edges name their targets relative to the sender, with
shell-like rules:

* ``/x/y`` is absolute and only normalised;
* ``x``, ``./x`` are children of the sender; ``.`` and ``""`` are the sender itself;
* ``..`` steps to the parent, and stepping above ``/`` stays at ``/`` (a colony has
  nothing above its root, so clamping is safer than failing mid-route);
* empty segments (``//``), ``.`` segments and a trailing ``/`` are dropped;
* names compare in Unicode NFC, as the loader turns folder names into paths: a target written
  in NFD (as macOS spells ``café``) reaches the same cell.

``/colony`` and everything under it address the daemon, not a cell. :data:`COLONY_ENDPOINTS` is
the one list of what is there: which paths answer a routed message (the reads), which are served
over HTTP only, and ``/colony`` itself, which is no endpoint. The router, the loader (and so
``--validate``), the HTTP API and the read filters all take it from here.

Resolution is pure string work that never raises: it runs once per routed message,
so it avoids regexes and :mod:`pathlib` and keeps an already-normal path cheap.
"""

from __future__ import annotations

import enum
import unicodedata
from dataclasses import dataclass

__all__ = [
    "ANSWERING",
    "COLONY_ENDPOINT",
    "COLONY_ENDPOINTS",
    "ROOT",
    "ColonyEndpoint",
    "EndpointKind",
    "colony_endpoint_kind",
    "is_absolute",
    "is_colony_endpoint",
    "join",
    "normalise",
    "parent",
    "resolve",
]

ROOT = "/"
COLONY_ENDPOINT = "/colony"
"""Reserved subtree addressing the daemon itself rather than a cell."""

_COLONY_PREFIX = COLONY_ENDPOINT + "/"


def _push(stack: list[str], path: str) -> None:
    """Apply the segments of ``path`` to ``stack`` (the segments of a directory)."""
    for segment in path.split("/"):
        if segment == "..":
            if stack:
                stack.pop()
        elif segment and segment != ".":
            stack.append(segment)


def _is_normal(path: str) -> bool:
    """Whether ``path`` already has the canonical absolute form (the common case)."""
    if path == ROOT:
        return True
    if not path.startswith("/") or path.endswith("/") or "//" in path:
        return False
    # Cheap screen first: a path with no "/." cannot hold a "." or ".." segment.
    if "/." not in path:
        return True
    return all(segment not in (".", "..") for segment in path.split("/"))


def normalise(path: str) -> str:
    """Canonical absolute form of ``path``; a relative ``path`` is taken from the root."""
    if not path.isascii():
        path = unicodedata.normalize("NFC", path)
    if _is_normal(path):
        return path
    stack: list[str] = []
    _push(stack, path)
    return "/" + "/".join(stack)


def is_absolute(path: str) -> bool:
    """Whether ``path`` names a cell independently of any sender."""
    return path.startswith("/")


def resolve(sender: str, target: str) -> str:
    """Absolute, normalised path of ``target`` as named by the cell at ``sender``."""
    if not target.isascii():
        target = unicodedata.normalize("NFC", target)
    if target.startswith("/"):
        return normalise(target)
    if target in ("", "."):
        return normalise(sender)
    stack: list[str] = []
    _push(stack, sender)
    _push(stack, target)
    return "/" + "/".join(stack)


def parent(path: str) -> str:
    """Normalised parent of ``path``; the root is its own parent."""
    path = normalise(path)
    cut = path.rfind("/")
    return path[:cut] if cut > 0 else ROOT


def join(base: str, *segments: str) -> str:
    """Normalised ``base`` extended by ``segments``.

    Unlike :func:`os.path.join`, a segment starting with ``/`` does not restart from the
    root: segments are always relative to what precedes them, so joining a name taken
    from untrusted input cannot jump to an unrelated subtree (``..`` still applies).
    """
    stack: list[str] = []
    _push(stack, base)
    for segment in segments:
        _push(stack, segment)
    return "/" + "/".join(stack)


def is_colony_endpoint(path: str) -> bool:
    """Whether the normalised ``path`` addresses the daemon's own ``/colony`` subtree."""
    return path == COLONY_ENDPOINT or path.startswith(_COLONY_PREFIX)


# -- the /colony endpoints --------------------------------------------------------------------


class EndpointKind(enum.Enum):
    """What a path under ``/colony`` is, as the router, the loader and the API see it."""

    INVALID = "invalid"
    """``/colony`` itself names the subtree, not an endpoint: a message to it is dead-lettered
    ``colony_endpoint_invalid``."""
    READ = "read"
    """Answers a routed message (to its ``reply_to``) with the body its ``GET`` serves."""
    HTTP_ONLY = "http_only"
    """Served over HTTP only: a message to it is dead-lettered ``colony_endpoint_unimplemented``."""
    UNKNOWN = "unknown"
    """In the subtree but no endpoint at all: routed like :attr:`HTTP_ONLY`."""


@dataclass(frozen=True, slots=True)
class ColonyEndpoint:
    """One entry of :data:`COLONY_ENDPOINTS`."""

    path: str
    """Normalised; a ``{name}`` segment stands for any one segment (``{id}``, a letter's id)."""
    kind: EndpointKind
    about: str
    """What it serves, in a few words."""


COLONY_ENDPOINTS: tuple[ColonyEndpoint, ...] = (
    ColonyEndpoint(COLONY_ENDPOINT, EndpointKind.INVALID, "the subtree itself"),
    ColonyEndpoint("/colony/registry", EndpointKind.READ, "the cells, their types and states"),
    ColonyEndpoint("/colony/graph", EndpointKind.READ, "the nodes and edges inside a scope"),
    ColonyEndpoint("/colony/trace", EndpointKind.READ, "the message-log rows of a trace"),
    ColonyEndpoint("/colony/messages", EndpointKind.READ, "the message log, newest first"),
    ColonyEndpoint(
        "/colony/dead_letters", EndpointKind.READ, "the dead letters (HTTP DELETE drains them)"
    ),
    ColonyEndpoint(
        "/colony/dead_letters/{id}", EndpointKind.HTTP_ONLY, "one dead letter and its message"
    ),
    ColonyEndpoint(
        "/colony/dead_letters/{id}/replay", EndpointKind.HTTP_ONLY, "re-drive a dead letter"
    ),
    ColonyEndpoint("/colony/cells/revive", EndpointKind.HTTP_ONLY, "revive a failed cell"),
    ColonyEndpoint("/colony/runs", EndpointKind.READ, "recent traces, one line each"),
    ColonyEndpoint("/colony/stats", EndpointKind.READ, "decisions and dead letters per 10 s"),
    ColonyEndpoint("/colony/events", EndpointKind.HTTP_ONLY, "live events (Server-Sent Events)"),
)
"""Every ``/colony`` endpoint, the reads in the order the API documents them."""

ANSWERING: frozenset[str] = frozenset(
    e.path for e in COLONY_ENDPOINTS if e.kind is EndpointKind.READ
)
"""The paths that answer a routed message; a message to any other ``/colony`` path is
dead-lettered, and ``--validate`` warns about an edge that names one."""


def _matches(pattern: str, path: str) -> bool:
    want = pattern.split("/")
    have = path.split("/")
    return len(want) == len(have) and all(
        w == h or (w.startswith("{") and w.endswith("}") and h != "")
        for w, h in zip(want, have, strict=True)
    )


def colony_endpoint_kind(path: str) -> EndpointKind | None:
    """What the normalised ``path`` is under ``/colony``; None when it lies outside."""
    if not is_colony_endpoint(path):
        return None
    if path in ANSWERING:
        return EndpointKind.READ
    for endpoint in COLONY_ENDPOINTS:
        if _matches(endpoint.path, path):
            return endpoint.kind
    return EndpointKind.UNKNOWN
