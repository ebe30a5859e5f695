"""Read the files of a colony tree without trusting what sits at their paths.

A path named ``config.json`` may be a folder, a FIFO (opening it for reading waits for a
writer that never comes), ``/dev/zero`` behind a symlink (reading never ends), a symlink
loop, or a regular file of any size. Every file the loader and the params checks read comes
through :func:`read_bytes`: it opens without blocking, checks that it holds a regular file,
and reads at most a fixed number of bytes. Parsing (:func:`parse_json`) refuses what
meclaw's JSON parser refuses and what would make later code fail instead of a diagnostic:
nesting deeper than 128 levels (serde_json's limit), numbers Python cannot hold as a value
(more than 4,300 digits, ``1e400``, ``NaN``) and strings holding a lone UTF-16 surrogate.

Each problem is a :class:`ReadProblem` carrying a stable code, a sentence, a fix and, where
known, a line and column: the loader turns it into a diagnostic.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from colony import jsonwire
from colony.config.jsonpos import Path as JsonPath
from colony.errors import ColonyError
from colony.persist.escape import has_surrogate, storable_text

MAX_CONFIG_BYTES = 16 * 1024 * 1024
"""A ``config.json`` or ``colony.json``; the largest real ones (inline scripts) are ~100 KB."""
MAX_ENV_BYTES = 1024 * 1024
"""An env file: ``KEY=VALUE`` lines."""
MAX_SEED_BYTES = 256 * 1024 * 1024
"""A cell's ``seed/*.jsonl`` (rows loaded into a store when its database is created)."""
MAX_DEPTH = jsonwire.MAX_DEPTH
"""Deepest nesting of arrays and objects accepted (serde_json's recursion limit, so a tree
meclaw parses is never refused for its depth)."""


class ReadProblem(ColonyError):
    """Why a file cannot be used, in words for the person who wrote it."""

    def __init__(
        self,
        code: str,
        message: str,
        hint: str,
        line: int | None = None,
        column: int | None = None,
        path: JsonPath = (),
    ) -> None:
        super().__init__(message)
        self.code = code
        """Stable snake_case identifier, used as the diagnostic's code."""
        self.message = message
        self.hint = hint
        self.line = line
        self.column = column
        self.path = path
        """Inside the document, when the problem is one value (a lone surrogate)."""


def _kind(mode: int) -> str | None:
    """What a non-regular file is, in a phrase; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_bytes(path: Path | str, limit: int) -> bytes:
    """The content of the regular file at ``path`` (symlinks followed), at most ``limit``
    bytes. Raises :class:`FileNotFoundError` when nothing is there (callers decide whether
    that is a problem) and :class:`ReadProblem` for everything else."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer. It changes nothing for a
        # regular file, and fstat on the open descriptor judges what was opened (no race
        # with a swap between a stat and the open).
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        if os.path.islink(path):
            raise ReadProblem(
                "unreadable_file",
                "the file is a symbolic link to nothing",
                "point the link at a file, or replace it with the file.",
            ) from None
        raise
    except IsADirectoryError:
        raise _not_regular("a folder") from None
    except OSError as exc:
        raise _os_problem(exc) from None
    try:
        info = os.fstat(fd)
        kind = _kind(info.st_mode)
        if kind is not None:
            raise _not_regular(kind)
        if info.st_size > limit:
            raise _too_large(limit)
        chunks: list[bytes] = []
        size = 0
        while True:  # st_size may lie (a file still growing): stop at the limit regardless
            chunk = os.read(fd, max(limit + 1 - size, 1))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
        return b"".join(chunks)
    except OSError as exc:
        raise _os_problem(exc) from None
    finally:
        os.close(fd)


def _not_regular(kind: str) -> ReadProblem:
    return ReadProblem(
        "not_a_file",
        f"this is {kind}, not a regular file",
        "replace it with a regular file (or remove it).",
    )


def _too_large(limit: int) -> ReadProblem:
    return ReadProblem(
        "file_too_large",
        f"the file is larger than {limit:,} bytes, the most read from a file of this kind",
        "make it smaller (keep large data in a store's seed or a blob, not in a config).",
    )


def _os_problem(exc: OSError) -> ReadProblem:
    if exc.errno == errno.ELOOP:
        return ReadProblem(
            "unreadable_file",
            "the path is a loop of symbolic links",
            "point the link at a real file.",
        )
    if isinstance(exc, PermissionError):
        return ReadProblem(
            "unreadable_file",
            "permission denied",
            "make the file readable by the user the daemon runs as.",
        )
    return ReadProblem(
        "unreadable_file", f"cannot read the file: {exc.strerror or exc}", "check the file."
    )


def decode(data: bytes) -> str:
    """UTF-8 text with newlines as ``\\n``; :class:`ReadProblem` names the first bad line."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ReadProblem(
            "invalid_json",
            f"the file is not UTF-8 text (byte {exc.start + 1}, line {line})",
            "save it as UTF-8.",
            line,
        ) from None
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


_HINTS = {
    "syntax": "fix the JSON syntax at this line and column.",
    "number": "write a finite number of a sensible size (or quote it as a string).",
    "depth": "flatten the document.",
    "unicode": "remove the escape, or write the character itself.",
    "encoding": "save it as UTF-8.",
}


def parse_json(text: str) -> Any:
    """The JSON value of ``text``; :class:`ReadProblem` for anything meclaw would not parse
    or that no later check could hold (see the module docstring). The reading itself is
    :func:`colony.jsonwire.loads`, as for every JSON text from outside."""
    try:
        return jsonwire.loads(text, "the file")
    except jsonwire.JsonRefused as exc:
        code = "invalid_unicode" if exc.kind == "unicode" else "invalid_json"
        message = f"invalid JSON: {exc.reason}" if exc.kind == "syntax" else exc.reason
        raise ReadProblem(
            code, message, _HINTS[exc.kind], exc.line, exc.column, path=exc.path or ()
        ) from None


def is_text(value: str) -> bool:
    """Whether ``value`` is valid Unicode text (no lone surrogate): it can be stored and sent."""
    return not has_surrogate(value)


printable = storable_text
"""``value`` with each lone surrogate written as its escape (``\\ud800``), for messages."""


def read_json(path: Path | str, limit: int = MAX_CONFIG_BYTES) -> tuple[str, Any]:
    """The text and the JSON value of the file at ``path`` (see :func:`read_bytes`)."""
    text = decode(read_bytes(path, limit))
    return text, parse_json(text)


def jsonl(path: Path | str, limit: int = MAX_SEED_BYTES) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` of each non-blank line of a JSON-lines file; a bad line is a
    :class:`ReadProblem` whose message starts with ``line N:``."""
    text = decode(read_bytes(path, limit))
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line:
            continue
        try:
            yield number, parse_json(line)
        except ReadProblem as problem:
            message = problem.message.removeprefix("invalid JSON: ")
            raise ReadProblem(
                problem.code, f"line {number}: not JSON ({message})", problem.hint, number
            ) from None
