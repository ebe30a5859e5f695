"""Structured logs: one JSON object per line, event names in snake_case.

Each colony gets its own logger (no global configuration), so tests can run several colonies
and read their records. Nothing logs a substituted ``${VAR}`` value or a cell's params.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import sys
import threading
import time
from collections.abc import Mapping, MutableMapping, MutableSequence
from typing import Any, Protocol, TextIO

import structlog
from structlog.typing import FilteringBoundLogger

from colony.failures import one_line
from colony.persist.escape import has_surrogate


class Logger(Protocol):
    """What the daemon and its cells ask of a logger: structlog's bound logger, narrowed to the
    calls they make. Each call takes a snake_case event name and its fields as keywords;
    ``exception`` logs an error with the exception being handled, and ``bind`` gives a logger
    that adds ``fields`` to each of its events. :func:`file_logger` and :func:`list_logger`
    make the ones the daemon uses; mypy checks structlog's type against this one there."""

    def debug(self, event: str, **fields: Any) -> Any: ...

    def info(self, event: str, **fields: Any) -> Any: ...

    def warning(self, event: str, **fields: Any) -> Any: ...

    def error(self, event: str, **fields: Any) -> Any: ...

    def exception(self, event: str, **fields: Any) -> Any: ...

    def bind(self, **fields: Any) -> Logger: ...


LEVELS = {
    "trace": logging.DEBUG,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def level_number(name: str) -> int:
    return LEVELS[name.lower()]


def _processors() -> list[Any]:
    return [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]


def _json_line(event: Any, **kw: Any) -> str:
    """One log line; a string UTF-8 cannot encode (a lone surrogate) is written as JSON's
    ``\\udXXX`` escape instead of failing the write."""
    text = json.dumps(event, **kw)
    return json.dumps(event, **{**kw, "ensure_ascii": True}) if has_surrogate(text) else text


class Rotation:
    """``log.jsonl`` rotated by size, as the standard library's ``RotatingFileHandler`` does:
    past ``max_bytes`` the file becomes ``log.jsonl.1``, ``.1`` becomes ``.2`` and so on, the
    one past ``keep`` is deleted (``keep`` 0: the full file is deleted), and a new file is
    opened (its descriptor returned). A line is never split between two files. Never raises:
    when a rename or the new file fails, :meth:`rotate` says so (None) and is not tried again
    for ``RETRY_S``."""

    RETRY_S = 10.0

    def __init__(self, path: str, max_bytes: int, keep: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.keep = keep
        self._retry_at = 0.0
        self.error = ""

    def names(self) -> list[str]:
        """The rotated files, newest first (``log.jsonl.1`` ...)."""
        return [f"{self.path}.{n}" for n in range(1, self.keep + 1)]

    def _shift(self) -> None:
        """``.1`` to ``.2`` and so on, then the full file to ``.1`` (``keep`` 0: deleted).
        Each step moves a file onto a name the step before freed, so a shift cut short by a
        failure and tried again loses nothing kept."""
        if self.keep == 0:
            os.unlink(self.path)
            return
        names = self.names()
        for older, newer in zip(reversed(names[1:]), reversed(names[:-1]), strict=True):
            if os.path.lexists(newer):
                os.replace(newer, older)
        os.replace(self.path, names[0])

    def rotate(self) -> int | None:
        now = time.monotonic()
        if now < self._retry_at:
            return None
        try:
            # Without the file, an earlier try moved it aside and then failed to open the new
            # one: only the opening is left to do (shifting again would push the kept files
            # out, one per try, and never bring the log back).
            if os.path.lexists(self.path):
                self._shift()
            return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        except OSError as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            self._retry_at = now + self.RETRY_S
            return None


def _named_file(stream: TextIO) -> bool:
    """``stream`` is the file its name says (not ``<stdout>`` sent to a file)."""
    name = getattr(stream, "name", None)
    try:
        return isinstance(name, str) and os.path.samestat(os.stat(name), os.fstat(stream.fileno()))
    except (OSError, ValueError):
        return False


class SafeFileWriter:
    """A structlog logger for ``log.jsonl`` whose writes never raise into the caller.

    A log line is written from inside routing; when the disk is full (or the file is gone) a
    raising write turned a ``POST /messages`` into a 500 (issue 15, item 12). Here a failed
    write is counted and dropped, said on stderr at most every ``WARN_EVERY_S`` seconds, and
    reported in the log itself (``log_lines_dropped``) as soon as a write works again. On a
    regular file each line goes out in one ``write(2)``, and a line cut short by a full disk
    is cut off again, so the file never holds half a line."""

    WARN_EVERY_S = 10.0

    def __init__(self, stream: TextIO, *, max_bytes: int = 0, keep: int = 0) -> None:
        self._stream = stream
        self._fd: int | None = None
        try:
            fd = stream.fileno()
            if stat.S_ISREG(os.fstat(fd).st_mode):
                stream.flush()
                self._fd = fd
        except (OSError, ValueError, AttributeError):
            pass
        self._rotation = (
            Rotation(stream.name, max_bytes, keep)
            if self._fd is not None and max_bytes > 0 and _named_file(stream)
            else None
        )
        self._owned: int | None = None
        """The file a rotation opened (the stream given stays the caller's to close)."""
        self._lock = threading.Lock()
        self.dropped = 0
        """Lines dropped since the last one written."""
        self._error = ""
        self._warned_at = -self.WARN_EVERY_S

    def msg(self, message: str) -> None:
        with self._lock:
            if self.dropped:
                report = _json_line(
                    {
                        "event": "log_lines_dropped",
                        "dropped": self.dropped,
                        "error": self._error,
                        "level": "warning",
                        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                        "detail": "the log file could not be written (see error); this many "
                        "lines were dropped",
                    }
                )
                if not self._write(report + "\n"):
                    self._lost()
                    return
                self.dropped = 0
            if not self._write(message + "\n"):
                self._lost()

    log = debug = info = warn = warning = err = error = critical = exception = fatal = msg

    def _write(self, text: str) -> bool:
        data = text.encode("utf-8", "backslashreplace")
        try:
            if self._fd is None:
                self._stream.write(data.decode("utf-8"))
                self._stream.flush()
                return True
            end = os.lseek(self._fd, 0, os.SEEK_END)
            if self._rotation is not None and end and end + len(data) > self._rotation.max_bytes:
                end = self._rotate(end)
            written = 0
            try:
                while written < len(data):
                    written += os.write(self._fd, data[written:])
            except OSError:
                if written:  # never leave half a line behind
                    os.ftruncate(self._fd, end)
                raise
            return True
        except (OSError, ValueError) as exc:
            self._error = f"{type(exc).__name__}: {exc}"
            return False

    def _rotate(self, end: int) -> int:
        """Move the full file aside and write to a new one; where the next line goes. When
        rotating fails the line goes to the full file (a line is never lost to rotation) and
        the next try waits ``Rotation.RETRY_S``."""
        assert self._rotation is not None
        fresh = self._rotation.rotate()
        if fresh is None:
            return end
        owned, self._owned = self._owned, fresh
        self._fd = fresh
        if owned is not None:
            with contextlib.suppress(OSError):
                os.close(owned)
        return 0

    def _lost(self) -> None:
        self.dropped += 1
        now = time.monotonic()
        if now - self._warned_at < self.WARN_EVERY_S:
            return
        self._warned_at = now
        try:
            sys.stderr.write(
                f"meclaw: cannot write the log file ({self._error}); {self.dropped} line(s) "
                "dropped so far, counted and reported in the log once it can be written\n"
            )
            sys.stderr.flush()
        except (OSError, ValueError):
            pass


def file_logger(
    stream: TextIO,
    level: str = "info",
    *,
    echo: TextIO | None = None,
    tracebacks: bool = False,
    max_bytes: int = 0,
    keep: int = 0,
) -> Logger:
    """A logger writing JSON lines to ``stream`` (``<root>/log.jsonl`` in the daemon); a
    failed write never raises (see :class:`SafeFileWriter`). With ``echo``, warnings and
    errors are also written there, one compact line each (followed by the traceback a line
    carries, with ``tracebacks``: ``--debug``). ``max_bytes`` (a regular file only, never
    stdout): rotated past that size, ``keep`` rotated files kept (:class:`Rotation`)."""
    logger: FilteringBoundLogger = structlog.wrap_logger(
        SafeFileWriter(stream, max_bytes=max_bytes, keep=keep),
        processors=[
            *_processors(),
            *_echo(echo, tracebacks),
            structlog.processors.JSONRenderer(serializer=_json_line, ensure_ascii=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level_number(level)),
        cache_logger_on_first_use=True,
    )
    return logger  # structlog's own type, checked here against the protocol


class _Collect:
    def __init__(self, sink: MutableSequence[dict[str, Any]]) -> None:
        self._sink = sink

    def __call__(self, _logger: Any, _name: str, event: MutableMapping[str, Any]) -> Any:
        self._sink.append(dict(event))
        raise structlog.DropEvent


def list_logger(sink: MutableSequence[dict[str, Any]], level: str = "debug") -> Logger:
    """A logger that appends each event dict to ``sink`` (for tests and the harness)."""
    logger: FilteringBoundLogger = structlog.wrap_logger(
        structlog.PrintLogger(sys.stderr),
        processors=[*_processors(), _Collect(sink)],
        wrapper_class=structlog.make_filtering_bound_logger(level_number(level)),
        cache_logger_on_first_use=True,
    )
    return logger  # structlog's own type, checked here against the protocol


# -- the direct-mode stderr echo --------------------------------------------------------------

_ECHO_LEVELS = frozenset({"warning", "error", "critical"})
_ECHO_FIRST = ("cell", "error_code", "target", "sender", "error", "detail", "trace_id")
"""Fields shown first, in this order; ``traceback`` is not one of them (the ``error`` field, or
the traceback's last line, says what was raised; the full one is in the log file, and on
stderr after the line under ``--debug``)."""


class StderrEcho:
    """Writes each warning and error as one compact line: ``meclaw: error cell_crashed
    cell=/greeter error=ValueError: boom trace_id=...``. A person running ``meclaw --root R``
    in a terminal sees what failed without opening ``log.jsonl``."""

    def __init__(self, stream: TextIO, tracebacks: bool = False) -> None:
        self._stream = stream
        self._tracebacks = tracebacks
        """Write the event's ``traceback`` after its line (``--debug``)."""

    def __call__(self, _logger: Any, _name: str, event: MutableMapping[str, Any]) -> Any:
        if event.get("level") in _ECHO_LEVELS:
            try:
                text = echo_line(event) + "\n"
                found = event.get("traceback") if self._tracebacks else None
                if isinstance(found, str) and found:
                    text += found.rstrip("\n") + "\n"
                self._stream.write(text)
                self._stream.flush()
            except (OSError, ValueError):  # a closed or broken stderr never stops the log
                pass
        return event


def echo_line(event: Mapping[str, Any]) -> str:
    """One line for ``event``: level, event name, then its fields (known ones first)."""
    skip = {"event", "level", "timestamp", "traceback"}
    keys = [k for k in _ECHO_FIRST if k in event]
    keys += sorted(k for k in event if k not in skip and k not in _ECHO_FIRST)
    fields = []
    for key in keys:
        value = event[key]
        if value is None:
            continue
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        fields.append(f"{key}={one_line(text, 200)}")
    return " ".join([f"meclaw: {event.get('level', 'info')} {event.get('event', '')}", *fields])


def _echo(stream: TextIO | None, tracebacks: bool) -> list[Any]:
    return [] if stream is None else [StderrEcho(stream, tracebacks)]
