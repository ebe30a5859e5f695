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

Resolution is pure string work that never raises: it runs once per routed message,
so it avoids regexes and :mod:`pathlib` and keeps an already-normal path cheap.
"""

from __future__ import annotations

import unicodedata

__all__ = [
    "COLONY_ENDPOINT",
    "ROOT",
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
