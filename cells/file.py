"""The ``file`` cell: read, write, list and stat files under one ``base_path``.

Stateless: up to ``max_concurrency`` calls at once; each does its file I/O in a worker thread
(``asyncio.to_thread``), so a large file never stalls the event loop.

The boundary (:mod:`cells.boundary`, shared with the ``edit`` cell) is checked lexically, then
on the real path, and the checked path is opened by an ``O_NOFOLLOW`` walk from the base; every
way out answers ``path_outside_boundary`` alike, whether or not the target exists.
"""

from __future__ import annotations

import asyncio
import base64
import os
import stat
import time
from dataclasses import dataclass
from typing import Any

from cells.boundary import DIR_FLAGS as _DIR_FLAGS
from cells.boundary import (
    BasePathParams,
    OpError,
    check_base,
    is_count,
    op_and_path,
    real_base,
    resolve,
)
from cells.boundary import failure as _failure
from cells.boundary import open_under as _open_under
from cells.text import dumps_sorted
from cells.toolcall import ToolCallError, elapsed_ms, parse_tool_call, tool_error, tool_result
from colony.cell import CellClass, CellSpec, CellType, Emission, pydantic_check
from colony.envelope import Envelope, JsonObject

__all__ = ["FILE", "FileCell", "FileParams"]

_FileOpError = OpError
_resolve = resolve
"""Looked up when a call runs, so a test can race the check (tests/security)."""

_OPS = ("read", "write", "list", "stat")
_READ_ONLY_ARGS = ("mode", "offset", "limit")


class FileParams(BasePathParams):
    """``base_path`` and ``max_concurrency``; nothing of the file cell's own."""


@dataclass(frozen=True, slots=True)
class _FileCall:
    op: str
    path: str
    content: str | None = None
    base64: bool = False
    offset: int = 0
    limit: int | None = None


def _parse_args(args: JsonObject) -> _FileCall:
    op, path = op_and_path(args, _OPS)
    if op != "read":
        extra = [key for key in _READ_ONLY_ARGS if key in args]
        if extra:
            raise _FileOpError("invalid_input", f"args.{extra[0]} is allowed only with op read")
    if op == "write":
        content = args.get("content")
        if not isinstance(content, str):
            raise _FileOpError(
                "invalid_input", "args.content missing or not a string (required for write)"
            )
        if path.endswith("/"):
            raise _FileOpError(
                "invalid_input", "args.path of a write must name a file, not end in /"
            )
        return _FileCall(op, path, content=content)
    if op != "read":
        return _FileCall(op, path)
    mode = args.get("mode", "text")
    if mode not in ("text", "base64"):
        raise _FileOpError("invalid_input", 'args.mode must be "text" or "base64"')
    offset = args.get("offset", 0)
    if not is_count(offset) or offset < 0:
        raise _FileOpError("invalid_input", "args.offset must be an integer >= 0")
    limit = args.get("limit")
    if limit is not None and (not is_count(limit) or limit < 1):
        raise _FileOpError("invalid_input", "args.limit must be an integer >= 1")
    return _FileCall(op, path, base64=mode == "base64", offset=offset, limit=limit)


# -- the operations (run in a worker thread) --------------------------------------------------


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    return "other"


def _read(base: str, real: str, call: _FileCall) -> tuple[str, int]:
    # O_NONBLOCK: opening a FIFO must not wait for a writer (a regular file ignores it)
    fd = _open_under(base, real, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise _FileOpError("not_a_file", f"{call.path} is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise _FileOpError("not_a_file", f"{call.path} is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            handle.seek(call.offset)
            data = handle.read() if call.limit is None else handle.read(call.limit)
    finally:
        os.close(fd)
    if call.base64:
        return base64.b64encode(data).decode("ascii"), len(data)
    try:
        return data.decode("utf-8"), len(data)
    except UnicodeDecodeError as exc:
        raise _FileOpError(
            "io_error",
            f"{call.path} is not valid UTF-8 (byte {call.offset + exc.start}); read it with "
            'mode "base64"',
        ) from None


def _write(base: str, real: str, call: _FileCall) -> tuple[str, int]:
    parent = os.path.dirname(real)
    shown = os.path.dirname(call.path.rstrip("/")) or "."
    if not os.path.exists(parent):
        raise _FileOpError(
            "not_found",
            f"parent directory does not exist: {shown} (write does not create directories)",
        )
    if not os.path.isdir(parent):
        raise _FileOpError("not_a_directory", f"parent is not a directory: {shown}")
    if os.path.isdir(real):
        raise _FileOpError("not_a_file", f"{call.path} is a directory")
    data = (call.content or "").encode("utf-8", "surrogatepass")
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = _open_under(base, real, flags)
    except PermissionError:
        raise _FileOpError("io_error", f"write failed: permission denied ({call.path})") from None
    with os.fdopen(fd, "wb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _FileOpError("not_a_file", f"{call.path} is not a regular file")
        handle.truncate()
        handle.write(data)
    return dumps_sorted({"written": len(data)}), len(data)


def _list(base: str, real: str, call: _FileCall) -> tuple[str, int]:
    entries: list[JsonObject] = []
    # Not O_DIRECTORY: a file must answer not_a_directory, not ENOTDIR's "a parent of …".
    fd = _open_under(base, real, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            raise _FileOpError("not_a_directory", f"{call.path} is not a directory")
        with os.scandir(fd) as scan:
            for entry in scan:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue  # vanished or unreadable since the scan listed it
                item: JsonObject = {"name": _lossy(entry.name), "kind": _kind(info.st_mode)}
                if stat.S_ISREG(info.st_mode):
                    item["size"] = info.st_size
                entries.append(item)
    finally:
        os.close(fd)
    entries.sort(key=lambda item: item["name"])
    text = dumps_sorted(entries)
    return text, len(text.encode())


def _stat(base: str, real: str, call: _FileCall) -> tuple[str, int]:
    parent, name = os.path.split(real)
    if real == base or not name:
        info = os.lstat(real)
    else:
        fd = _open_under(base, parent, _DIR_FLAGS)
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        finally:
            os.close(fd)
    is_file = stat.S_ISREG(info.st_mode)
    text = dumps_sorted(
        {
            "kind": _kind(info.st_mode),
            "size": info.st_size if is_file else None,
            "modified": int(info.st_mtime),
        }
    )
    return text, len(text.encode())


def _lossy(name: str) -> str:
    """A file name that is not UTF-8 shows with replacement characters."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


_RUN = {"read": _read, "write": _write, "list": _list, "stat": _stat}


def _perform(base: str, call: _FileCall) -> tuple[str, int]:
    real = _resolve(base, call.path, for_write=call.op == "write")
    try:
        return _RUN[call.op](base, real, call)
    except OSError as exc:
        raise _failure(exc, call.path) from None


# -- the cell ---------------------------------------------------------------------------------


class FileCell:
    def __init__(self, spec: CellSpec) -> None:
        self.params = FileParams.model_validate(spec.params)
        self.path = spec.path
        self.base = real_base(self.params.base_path)

    async def handle(self, message: Envelope) -> list[Emission]:
        target = message.reply_to or self.path
        return [Emission(await self._answer(message.body), target)]

    async def _answer(self, body: Any) -> JsonObject:
        started = time.perf_counter()
        try:
            args, call_id = parse_tool_call(body)
        except ToolCallError as failure:
            return _error("unknown", failure.code, failure.text, failure.call_id, started)
        try:
            call = _parse_args(args)
        except _FileOpError as exc:
            return _error("unknown", exc.code, str(exc), call_id, started)
        try:
            text, size = await asyncio.to_thread(_perform, self.base, call)
        except _FileOpError as exc:
            return _error(call.op, exc.code, str(exc), call_id, started)
        header: JsonObject = {
            "operation": call.op,
            "bytes": size,
            "duration_ms": elapsed_ms(started),
        }
        if call.base64:
            header["encoding"] = "base64"
        return tool_result(text, call_id, header)


def _error(operation: str, code: str, text: str, call_id: str | None, started: float) -> JsonObject:
    return tool_error(
        code, text, call_id, {"operation": operation, "duration_ms": elapsed_ms(started)}
    )


FILE = CellType(
    "file",
    CellClass.STATELESS,
    FileCell,
    default_max_concurrency=8,
    check_params=pydantic_check(FileParams, check_base),
)
