"""Structured logs: one JSON object per line, event names in snake_case.

Each colony gets its own logger (no global configuration), so tests can run several colonies
and read their records. Nothing logs a substituted ``${VAR}`` value or a cell's params.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping, MutableMapping, MutableSequence
from typing import Any, TextIO

import structlog

from colony.failures import one_line

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


def file_logger(stream: TextIO, level: str = "info", *, echo: TextIO | None = None) -> Any:
    """A logger writing JSON lines to ``stream`` (``<root>/log.jsonl`` in the daemon); with
    ``echo``, warnings and errors are also written there, one compact line each."""
    return structlog.wrap_logger(
        structlog.WriteLogger(stream),
        processors=[
            *_processors(),
            *_echo(echo),
            structlog.processors.JSONRenderer(ensure_ascii=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level_number(level)),
        cache_logger_on_first_use=True,
    )


class _Collect:
    def __init__(self, sink: MutableSequence[dict[str, Any]]) -> None:
        self._sink = sink

    def __call__(self, _logger: Any, _name: str, event: MutableMapping[str, Any]) -> Any:
        self._sink.append(dict(event))
        raise structlog.DropEvent


def list_logger(sink: MutableSequence[dict[str, Any]], level: str = "debug") -> Any:
    """A logger that appends each event dict to ``sink`` (for tests and the harness)."""
    return structlog.wrap_logger(
        structlog.PrintLogger(sys.stderr),
        processors=[*_processors(), _Collect(sink)],
        wrapper_class=structlog.make_filtering_bound_logger(level_number(level)),
        cache_logger_on_first_use=True,
    )


# -- the direct-mode stderr echo --------------------------------------------------------------

_ECHO_LEVELS = frozenset({"warning", "error", "critical"})
_ECHO_FIRST = ("cell", "error_code", "target", "sender", "error", "detail", "trace_id")
"""Fields shown first, in this order; ``traceback`` is never echoed (the ``error`` field, or
the traceback's last line, says what was raised; the full one is in the log file)."""


class StderrEcho:
    """Writes each warning and error as one compact line: ``meclaw: error cell_crashed
    cell=/greeter error=ValueError: boom trace_id=...``. A person running ``meclaw --root R``
    in a terminal sees what failed without opening ``log.jsonl``."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def __call__(self, _logger: Any, _name: str, event: MutableMapping[str, Any]) -> Any:
        if event.get("level") in _ECHO_LEVELS:
            try:
                self._stream.write(echo_line(event) + "\n")
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


def _echo(stream: TextIO | None) -> list[Any]:
    return [] if stream is None else [StderrEcho(stream)]
