"""The ``base_path`` fence shared by the ``file`` and ``edit`` cells.

Both cells reach files only under one folder. The fence is checked in two stages, and every way
out gives the same answer — ``path_outside_boundary`` — whether or not the target exists, so a
cell is no oracle for the file system around its base:

1. lexically, before the file system is touched: absolute paths are ``invalid_input``, and a
   ``..`` that climbs above the base is refused;
2. on the real path: the path (for a write, its parent) is resolved through every symlink that
   exists, and the result must lie under the resolved base. A symlink pointing out is refused
   whether or not its target exists.

The checked path is then opened one component at a time from the base, each with
``O_NOFOLLOW`` relative to the folder before it, so swapping any component — a folder in the
middle as well as the last name — for a symlink between the check and the open fails instead of
escaping.

Written once: the two cells' copies would drift, and a fence that drifts leaks.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, TypeGuard

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from colony.cell import ParamProblem

__all__ = [
    "DIR_FLAGS",
    "OUTSIDE",
    "BasePathParams",
    "OpError",
    "check_base",
    "climbs_out",
    "failure",
    "inside",
    "is_count",
    "op_and_path",
    "open_parent",
    "open_under",
    "real_base",
    "reason",
    "resolve",
]

OUTSIDE = "path resolves outside base_path boundary"
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class BasePathParams(BaseModel):
    """The params of a cell fenced in one folder."""

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)

    base_path: str
    """Absolute path of an existing directory; every call's path is relative to it."""
    max_concurrency: Annotated[int, Field(ge=1)] = 8

    @field_validator("base_path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not os.path.isabs(value):
            raise PydanticCustomError(
                "base_path_relative", "base_path must be absolute, got {value}", {"value": value}
            )
        return value


def check_base(params: BasePathParams, folder: Path | None) -> list[ParamProblem]:
    """The base must exist as a directory (checked by ``--validate``, not on the first call)."""
    if os.path.isdir(params.base_path):
        return []
    what = "is not a directory" if os.path.exists(params.base_path) else "does not exist"
    return [
        ParamProblem(
            ("base_path",),
            "base_path_missing",
            f"base_path {params.base_path} {what}",
            "create the directory, or point base_path at an existing one.",
        )
    ]


class OpError(Exception):
    """A call that ends in an error reply: ``code`` is its ``error_code``, the message its
    sentence."""

    def __init__(self, code: str, text: str) -> None:
        super().__init__(text)
        self.code = code


def real_base(base_path: str) -> str:
    """``base_path`` resolved through its symlinks, which every check then compares against;
    raises ``NotADirectoryError`` when it is not a directory (``--validate`` said so first)."""
    base = os.path.realpath(base_path)
    if not os.path.isdir(base):
        raise NotADirectoryError(f"base_path {base_path} is not a directory")
    return base


def op_and_path(args: Mapping[str, Any], ops: tuple[str, ...]) -> tuple[str, str]:
    """A call's ``op`` (one of ``ops``) and ``path`` (a non-empty string without NUL), with
    the sentences both cells answer a bad one with (``invalid_input``)."""
    op = args.get("op")
    if not isinstance(op, str):
        raise OpError("invalid_input", "args.op missing or not a string")
    if op not in ops:
        raise OpError("invalid_input", f"unknown op: {op} (use one of {', '.join(ops)})")
    path = args.get("path")
    if not isinstance(path, str):
        raise OpError("invalid_input", "args.path missing or not a string")
    if not path:
        raise OpError("invalid_input", "args.path is empty")
    if "\0" in path:
        raise OpError("invalid_input", "args.path contains a NUL byte")
    return op, path


# -- stage 1 and 2: the check -----------------------------------------------------------------


def climbs_out(relative: str) -> bool:
    """Whether a ``..`` takes ``relative`` above its start, read without the file system."""
    depth = 0
    for part in relative.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return True
        elif part not in ("", "."):
            depth += 1
    return False


def inside(path: str, base: str) -> bool:
    return path == base or path.startswith(base.rstrip("/") + "/")


def resolve(base: str, relative: str, *, for_write: bool) -> str:
    """The real path ``relative`` names under ``base`` (itself real); raises :class:`OpError`.

    For a write only the parent must exist: it is resolved, and the last name is followed only
    when it is a symlink (which may point out)."""
    if os.path.isabs(relative):
        raise OpError("invalid_input", "path must be relative, not absolute")
    if climbs_out(relative):
        raise OpError("path_outside_boundary", OUTSIDE)
    joined = os.path.join(base, relative)
    if not for_write:
        real = os.path.realpath(joined)
        if not inside(real, base):
            raise OpError("path_outside_boundary", OUTSIDE)
        return real
    head, name = os.path.split(joined.rstrip("/") if joined != "/" else joined)
    parent = os.path.realpath(head)
    if not inside(parent, base):
        raise OpError("path_outside_boundary", OUTSIDE)
    target = os.path.join(parent, name)
    if os.path.islink(target):  # a link inside the base may still point out of it
        real = os.path.realpath(target)
        if not inside(real, base):
            raise OpError("path_outside_boundary", OUTSIDE)
        return real
    return target


# -- the walk: opening a checked path ---------------------------------------------------------


def open_parent(base: str, real: str) -> tuple[int, str]:
    """The folder holding ``real`` (a checked path under ``base``), opened one component at a
    time from the base without following a link, and the last name in it ("" when ``real``
    is the base itself, whose fd is then returned). The caller closes the fd.

    A folder swapped for a link out between the check and the walk fails (``ELOOP`` or
    ``ENOTDIR``) instead of being followed."""
    parts = [p for p in os.path.relpath(real, base).split(os.sep) if p not in ("", ".")]
    fd = os.open(base, DIR_FLAGS)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd, parts[-1] if parts else ""


def open_under(base: str, real: str, flags: int, mode: int = 0o666) -> int:
    """Open ``real`` (a checked path under ``base``) through :func:`open_parent`, the last
    name with ``O_NOFOLLOW`` too."""
    fd, name = open_parent(base, real)
    try:
        if not name:
            return os.dup(fd) if flags & os.O_DIRECTORY else os.open(".", flags, dir_fd=fd)
        return os.open(name, flags | os.O_NOFOLLOW, mode, dir_fd=fd)
    finally:
        os.close(fd)


def failure(exc: OSError, relative: str) -> OpError:
    """The reply to a file-system error met on the way to ``relative``."""
    if exc.errno == errno.ENOENT:
        return OpError("not_found", f"path not found: {relative}")
    if exc.errno == errno.ENOTDIR:
        return OpError("not_a_directory", f"a parent of {relative} is not a directory")
    if exc.errno == errno.EISDIR:
        return OpError("not_a_file", f"{relative} is a directory")
    if exc.errno == errno.ELOOP:
        return OpError("io_error", f"{relative}: too many levels of symbolic links")
    return OpError("io_error", f"{relative}: {reason(exc)}")


def reason(exc: OSError) -> str:
    """What went wrong, in the system's words (lower case), without the path."""
    return (os.strerror(exc.errno) if exc.errno else str(exc)).lower()


def is_count(value: Any) -> TypeGuard[int]:
    """A JSON integer argument (``true`` is not one, though Python counts it an int)."""
    return isinstance(value, int) and not isinstance(value, bool)
