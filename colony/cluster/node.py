"""What a cluster member is called (``meclaw --node NAME``).

The name identifies a node to the others (partition owners, leases, ``GET /health``) and
names its lease file on a shared root (``colony.db-lease.<name>``, :mod:`colony.lease`), so
it is restricted to what is safe in a file name, a log line and a SQL value alike: 1 to 63
characters of ASCII letters, digits, ``.``, ``_`` and ``-``, starting with a letter or a
digit (a host name's alphabet plus ``_``). The default, ``<host name>-<pid>``, is unique
among the live processes of a machine, and a restarted daemon is a new node: its
predecessor's partitions are taken over by lease expiry, never inherited by name.
"""

from __future__ import annotations

import os
import re
import socket

NODE_NAME_MAX = 63

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_OUTSIDE = re.compile(r"[^A-Za-z0-9._-]+")


def node_name_problem(name: str) -> str | None:
    """What makes ``name`` unusable as a node name, or None when it is fine."""
    if not name:
        return "a node name cannot be empty"
    if len(name) > NODE_NAME_MAX:
        return f"a node name is at most {NODE_NAME_MAX} characters, this one has {len(name)}"
    if _NAME.fullmatch(name) is None:
        return (
            "a node name holds only ASCII letters, digits, '.', '_' and '-', and starts with "
            "a letter or a digit"
        )
    return None


def default_node_name(host: str | None = None, pid: int | None = None) -> str:
    """``<host name>-<pid>``, the host name cut and cleaned to fit :func:`node_name_problem`."""
    suffix = f"-{os.getpid() if pid is None else pid}"
    cleaned = _OUTSIDE.sub("-", socket.gethostname() if host is None else host)
    cleaned = cleaned.lstrip("._-")[: NODE_NAME_MAX - len(suffix)] or "node"
    return cleaned + suffix
