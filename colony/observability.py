"""Structured logs: one JSON object per line, event names in snake_case.

Each colony gets its own logger (no global configuration), so tests can run several colonies
and read their records. Nothing logs a substituted ``${VAR}`` value or a cell's params.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping, MutableSequence
from typing import Any, TextIO

import structlog

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


def file_logger(stream: TextIO, level: str = "info") -> Any:
    """A logger writing JSON lines to ``stream`` (``<root>/log.jsonl`` in the daemon)."""
    return structlog.wrap_logger(
        structlog.WriteLogger(stream),
        processors=[*_processors(), structlog.processors.JSONRenderer(ensure_ascii=False)],
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
