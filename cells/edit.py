"""The ``edit`` cell: ``find_replace`` and ``insert_at_line`` on text files under ``base_path``.

Stateless: up to ``max_concurrency`` calls at once, file I/O in worker threads. The fence is the
``file`` cell's (:mod:`cells.boundary`): the same two-stage check, the same ``O_NOFOLLOW`` walk
from the base, the same ``path_outside_boundary`` for every way out.

Two things meclaw's edit cell does not do, because an agent editing code is exactly the caller
that loses work to them:

* **The write is atomic.** The new text goes to a temporary file made beside the original
  through the parent folder's fd, is synced, and is renamed over the original; a reader sees the
  old file or the new one, never a half-written one, and a failure leaves the original as it was.
* **Edits of one file are serialized.** A read-modify-write that overlaps another loses one of
  them; a lock per real path in the cell makes two calls on one file take turns.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import secrets
import stat
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from cells.boundary import (
    BasePathParams,
    OpError,
    check_base,
    failure,
    is_count,
    op_and_path,
    open_parent,
    real_base,
    reason,
    resolve,
)
from cells.toolcall import ToolCallError, elapsed_ms, parse_tool_call, tool_error, tool_result
from colony.cell import CellClass, CellSpec, CellType, Emission, pydantic_check
from colony.envelope import Envelope, JsonObject
from colony.observability import Logger
from colony.shielded import run_to_end

__all__ = ["EDIT", "EditCell", "EditParams"]

_OPS = ("find_replace", "insert_at_line")
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC | os.O_NONBLOCK
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class EditParams(BasePathParams):
    """``base_path`` and ``max_concurrency``, as the ``file`` cell's."""


# -- the arguments ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _EditCall:
    op: str
    path: str
    find: str = ""
    replace: str = ""
    expected: int | None = None
    line: int = 0
    content: str = ""


def _text(args: JsonObject, key: str, op: str) -> str:
    value = args.get(key)
    if not isinstance(value, str):
        raise OpError("invalid_input", f"args.{key} missing or not a string (required for {op})")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise OpError("invalid_input", f"args.{key} is not valid Unicode text") from None
    return value


def _parse_args(args: JsonObject) -> _EditCall:
    op, path = op_and_path(args, _OPS)
    if path.endswith("/"):
        raise OpError("invalid_input", "args.path of an edit must name a file, not end in /")
    expected = args.get("expected_matches")  # null is the same as absent
    if op == "insert_at_line":
        if expected is not None:
            raise OpError(
                "invalid_input", "args.expected_matches is allowed only with op find_replace"
            )
        line = args.get("line")
        if not is_count(line) or line < 1:
            raise OpError("invalid_input", "args.line missing or not an integer >= 1")
        return _EditCall(op, path, line=line, content=_text(args, "content", op))
    if expected is not None and (not is_count(expected) or expected < 1):
        raise OpError("invalid_input", "args.expected_matches must be an integer >= 1 or null")
    find = _text(args, "find", op)
    if not find:
        raise OpError("invalid_input", "args.find is empty")
    return _EditCall(op, path, find=find, replace=_text(args, "replace", op), expected=expected)


# -- the edit itself (pure) -------------------------------------------------------------------


def _plural(count: int, noun: str, nouns: str = "") -> str:
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


def _quoted(text: str) -> str:
    """``text`` as a JSON string, cut short: an error sentence names the pattern, not a page."""
    shown = json.dumps(text, ensure_ascii=False)
    return shown if len(shown) <= 60 else shown[:56] + '..."'


def lines_of(text: str) -> list[str]:
    """The lines of ``text``, each with its ``\\n``; a last line without one is a line too.
    Only ``\\n`` ends a line (a ``\\r`` stays in its line, as do form feeds)."""
    parts = text.split("\n")
    return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def find_replace(text: str, call: _EditCall) -> tuple[str, int, str]:
    """The new text, the number of matches replaced and the status sentence."""
    count = text.count(call.find)
    if count == 0:
        raise OpError("pattern_not_found", f"{_quoted(call.find)} not found in {call.path}")
    if call.expected is not None and call.expected != count:
        raise OpError(
            "unexpected_match_count",
            f"expected {_plural(call.expected, 'match', 'matches')} of {_quoted(call.find)} in "
            f"{call.path}, found {count}; the file is unchanged",
        )
    status = f"{_plural(count, 'occurrence')} replaced in {call.path}"
    return text.replace(call.find, call.replace), count, status


_BOM = "\ufeff"


def insert_at_line(text: str, call: _EditCall) -> tuple[str, int, str]:
    """The new text with ``call.content`` before line ``call.line`` (1-based), closed by one
    ``\\n`` unless it is empty or has one. A file whose last line has no ``\\n`` keeps it that
    way: content put after that line (``line`` = lines + 1) continues it.

    Two marks of the file are kept: a UTF-8 byte order mark stays the file's first character
    (content for line 1 goes after it), and in a CRLF file (its first line ends in ``\\r\\n``)
    the closing line end added to the content is ``\\r\\n``."""
    bom = _BOM if text.startswith(_BOM) else ""
    text = text[len(bom) :]
    lines = lines_of(text)
    if not 1 <= call.line <= len(lines) + 1:
        raise OpError(
            "invalid_input",
            f"args.line {call.line} is out of range: {call.path} has "
            f"{_plural(len(lines), 'line')}, so line must be 1..{len(lines) + 1}",
        )
    content = call.content
    if content and not content.endswith("\n"):
        content += "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    index = call.line - 1
    new = bom + "".join(lines[:index]) + content + "".join(lines[index:])
    added = _plural(content.count("\n"), "line")
    status = f"{added} inserted at line {call.line} of {call.path}"
    return new, 1, status


_APPLY = {"find_replace": find_replace, "insert_at_line": insert_at_line}


# -- the file (run in a worker thread) --------------------------------------------------------


def _checked(base: str, call: _EditCall) -> str:
    """The real path the call edits, inside the fence (raises :class:`OpError`)."""
    real = resolve(base, call.path, for_write=False)
    if real == base:
        raise OpError("not_a_file", f"{call.path} is a directory")
    return real


@dataclass(frozen=True, slots=True)
class _Done:
    """What an edit that happened reports."""

    status: str
    changed: int
    size: int
    unsynced: str | None = None
    """Why syncing the folder after the rename failed; ``None`` when the edit is durable."""


def _edit(base: str, real: str, call: _EditCall) -> _Done:
    """Edit ``real``: the status sentence, the matches changed, the new size in bytes and
    whether the rename reached the disk."""
    try:
        folder, name = open_parent(base, real)
    except OSError as exc:
        raise failure(exc, call.path) from None
    try:
        text, info = _read(folder, name, call.path)
        new, changed, status = _APPLY[call.op](text, call)
        data = new.encode("utf-8")
        unsynced = _replace(folder, name, data, info, call.path)
    finally:
        os.close(folder)
    return _Done(status, changed, len(data), unsynced)


def _read(folder: int, name: str, shown: str) -> tuple[str, os.stat_result]:
    """The text of ``name`` in ``folder`` and its stat.

    Its type is looked at before anything is opened: a device node or a FIFO is never opened
    at all. A file the cell may not write is refused here, not replaced anyway through the
    folder; the check asks the kernel (with the cell's effective ids) instead of opening the
    file for writing, so the file is opened read-only and a watcher sees no close-after-write
    for every edit tried."""
    try:
        seen = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except OSError as exc:
        raise failure(exc, shown) from None
    for kind, code in ((stat.S_ISLNK, errno.ELOOP), (stat.S_ISDIR, errno.EISDIR)):
        if kind(seen.st_mode):  # answered as opening it would be (a link: swapped since)
            raise failure(OSError(code, os.strerror(code)), shown)
    if not stat.S_ISREG(seen.st_mode):
        raise OpError("not_a_file", f"{shown} is not a regular file")
    if not os.access(name, os.W_OK, dir_fd=folder, effective_ids=True):
        raise _denied(shown)
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=folder)
    except PermissionError:
        raise _denied(shown) from None
    except OSError as exc:
        raise failure(exc, shown) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OpError("not_a_file", f"{shown} is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read()
    except OSError as exc:
        raise failure(exc, shown) from None
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8"), info
    except UnicodeDecodeError as exc:
        raise OpError(
            "io_error", f"{shown} is not valid UTF-8 (byte {exc.start}); edit works on text files"
        ) from None


def _denied(shown: str) -> OpError:
    return OpError("io_error", f"permission denied: {shown} (an edit must read and write it)")


def _replace(folder: int, name: str, data: bytes, info: os.stat_result, shown: str) -> str | None:
    """Put ``data`` in place of ``name`` atomically: a synced temporary file in the same folder,
    with the original's permission bits, renamed over it; then the folder synced. A failure
    before the rename removes the temporary file and leaves the original as it was (raised).
    A failed folder sync comes after the edit happened, so it is not an error: its reason is
    returned (``None`` when the sync worked)."""
    temp = f".edit-{secrets.token_hex(8)}.tmp"
    mode = stat.S_IMODE(info.st_mode)
    try:
        fd = os.open(temp, _TEMP_FLAGS, mode & 0o777, dir_fd=folder)
    except OSError as exc:
        raise _write_failed(exc, shown) from None
    try:
        try:
            _keep_owner(fd, info)
            os.fchmod(fd, mode)  # the umask narrowed what open set
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=folder)
        if isinstance(exc, OSError):
            raise _write_failed(exc, shown) from None
        raise
    try:
        os.fsync(folder)
    except OSError as exc:
        return reason(exc)
    return None


def _keep_owner(fd: int, info: os.stat_result) -> None:
    """Give the new file the original's owner and group where the cell may (root may; anyone
    may pick a group they belong to); otherwise they are the cell's own. The group is tried
    alone when the pair is refused: a cell that may not give the file away may still keep a
    group it belongs to, and a shared project folder lives on its group."""
    mine = os.fstat(fd)
    if (mine.st_uid, mine.st_gid) == (info.st_uid, info.st_gid):
        return
    try:
        os.fchown(fd, info.st_uid, info.st_gid)
    except PermissionError:
        if mine.st_gid != info.st_gid:
            with contextlib.suppress(PermissionError):
                os.fchown(fd, -1, info.st_gid)


def _write_failed(exc: OSError, shown: str) -> OpError:
    return OpError("io_error", f"write failed: {reason(exc)} ({shown}); the file is unchanged")


# -- the cell ---------------------------------------------------------------------------------


class _PathLocks:
    """One lock per real path, held while a call edits that file; gone when nobody holds or
    waits for it, so the table never outgrows the calls in flight."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, path: str) -> AsyncIterator[None]:
        lock, users = self._held.get(path, (asyncio.Lock(), 0))
        self._held[path] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._held[path]
            if users == 1:
                del self._held[path]
            else:
                self._held[path] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._held)


class EditCell:
    def __init__(self, spec: CellSpec) -> None:
        self.params = EditParams.model_validate(spec.params)
        self.path = spec.path
        self.log: Logger | None = spec.log
        self.base = real_base(self.params.base_path)
        self.locks = _PathLocks()

    async def handle(self, message: Envelope) -> list[Emission]:
        target = message.reply_to or self.path
        return [Emission(await self._answer(message.body), target)]

    async def _answer(self, body: Any) -> JsonObject:
        started = time.perf_counter()
        try:
            args, call_id = parse_tool_call(body)
        except ToolCallError as failed:
            return self._error("unknown", failed.code, failed.text, failed.call_id, started)
        try:
            call = _parse_args(args)
        except OpError as exc:
            return self._error("unknown", exc.code, str(exc), call_id, started)
        try:
            real = await asyncio.to_thread(_checked, self.base, call)
            async with self.locks.hold(real):
                # The thread cannot be stopped: a cancelled caller (the colony's backstop)
                # still waits for it, so the file's lock covers the write until it ends.
                done = await run_to_end(
                    asyncio.ensure_future(asyncio.to_thread(_edit, self.base, real, call))
                )
        except OpError as exc:
            return self._error(call.op, exc.code, str(exc), call_id, started)
        header: JsonObject = {
            "operation": call.op,
            "matches_changed": done.changed,
            "bytes": done.size,
            "duration_ms": elapsed_ms(started),
        }
        status = done.status
        if done.unsynced is not None:
            # The edit happened: an error here would make a retrying agent edit twice.
            header["durable"] = False
            status += (
                f"; syncing the folder failed ({done.unsynced}), so the edit may not survive "
                "a crash"
            )
            if self.log is not None:
                self.log.warning(
                    "edit_not_durable",
                    cell=self.path,
                    operation=call.op,
                    path=call.path,
                    reason=f"folder fsync failed: {done.unsynced}",
                )
        elif self.log is not None:
            self.log.debug(
                "edit_ok", cell=self.path, operation=call.op, matches_changed=done.changed
            )
        return tool_result(status, call_id, header)

    def _error(
        self, operation: str, code: str, text: str, call_id: str | None, started: float
    ) -> JsonObject:
        if self.log is not None:
            self.log.info(
                "edit_error", cell=self.path, operation=operation, error_code=code, detail=text
            )
        header: JsonObject = {
            "operation": operation,
            "matches_changed": 0,
            "duration_ms": elapsed_ms(started),
        }
        return tool_error(code, text, call_id, header)


EDIT = CellType(
    "edit",
    CellClass.STATELESS,
    EditCell,
    default_max_concurrency=8,
    check_params=pydantic_check(EditParams, check_base),
)
