"""Findings about a colony tree, and the three ways ``--validate`` prints them.

A diagnostic names the file (relative to the colony root), the JSON path of the key, what is
wrong and what would fix it. Errors make a tree invalid; warnings do not, unless
``--validate-strict`` promotes them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from colony.config.jsonpos import Path as JsonPath


class Severity(StrEnum):
    """How much a finding matters."""

    ERROR = "error"
    """The tree cannot boot."""
    WARNING = "warning"
    """The tree boots, but something probably does not do what its author meant."""


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One finding about one place in the tree."""

    severity: Severity
    code: str
    """Stable snake_case identifier (e.g. ``unknown_key``); tests and CI filters match on it."""
    message: str
    """What is wrong, in one sentence."""
    file: str | None = None
    """Path relative to the colony root, e.g. ``main/planner/config.json``; None = the tree."""
    path: JsonPath = ()
    """Where in the file's JSON the problem sits."""
    hint: str | None = None
    """What would fix it."""
    line: int | None = None
    column: int | None = None
    related: tuple[str, ...] = field(default=())
    """Extra lines shown under the message (e.g. an expression with a caret)."""

    @property
    def pointer(self) -> str:
        """The JSON path as people write it: ``params.graph.edges[2].condition``."""
        return format_path(self.path)

    def promoted(self) -> Diagnostic:
        """This finding as an error (``--validate-strict``)."""
        return replace(self, severity=Severity.ERROR)


def format_path(path: JsonPath) -> str:
    out: list[str] = []
    for part in path:
        if isinstance(part, int):
            out.append(f"[{part}]")
        else:
            out.append(part if not out else f".{part}")
    return "".join(out)


def has_errors(diagnostics: Iterable[Diagnostic]) -> bool:
    return any(d.severity is Severity.ERROR for d in diagnostics)


def _location(d: Diagnostic, file_prefix: str) -> str:
    if d.file is None:
        return file_prefix.rstrip("/") or "."
    if d.line is None:
        return file_prefix + d.file
    return f"{file_prefix}{d.file}:{d.line}:{d.column or 1}"


def render_text(diagnostics: Sequence[Diagnostic], *, root: str, file_prefix: str = "") -> str:
    """Human-readable report, one block per finding, then a one-line verdict.

    ``file_prefix`` (the colony root as the user wrote it) makes each location a path an
    editor or terminal can open: ``colony/main/config.json:12:9``.
    """
    lines: list[str] = []
    for d in diagnostics:
        where = f" at {d.pointer}" if d.path else ""
        location = _location(d, file_prefix)
        lines.append(f"{location}: {d.severity.value}[{d.code}]{where}: {d.message}")
        lines.extend(f"    {extra}" for extra in d.related)
        if d.hint:
            lines.append(f"    fix: {d.hint}")
    errors = sum(d.severity is Severity.ERROR for d in diagnostics)
    warnings = len(diagnostics) - errors
    verdict = "invalid" if errors else "valid"
    lines.append(f"{root}: {verdict} ({errors} error(s), {warnings} warning(s))")
    return "\n".join(lines) + "\n"


def render_json(diagnostics: Sequence[Diagnostic], *, root: str) -> str:
    """One JSON object: the verdict, the counts and every finding."""
    errors = sum(d.severity is Severity.ERROR for d in diagnostics)
    doc = {
        "root": root,
        "valid": errors == 0,
        "errors": errors,
        "warnings": len(diagnostics) - errors,
        "diagnostics": [
            {
                "severity": d.severity.value,
                "code": d.code,
                "file": d.file,
                "path": d.pointer,
                "line": d.line,
                "column": d.column,
                "message": d.message,
                "hint": d.hint,
                "related": list(d.related),
            }
            for d in diagnostics
        ],
    }
    return json.dumps(doc, ensure_ascii=False) + "\n"


def _escape_property(value: str) -> str:
    # GitHub workflow commands: properties escape %, CR, LF, ':' and ','.
    return (
        value.replace("%", "%25")
        .replace("\r", "%0D")
        .replace("\n", "%0A")
        .replace(":", "%3A")
        .replace(",", "%2C")
    )


def _escape_data(value: str) -> str:
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def render_github(diagnostics: Sequence[Diagnostic], *, root: str, file_prefix: str = "") -> str:
    """GitHub Actions annotations (``::error file=…,line=…::…``) so CI shows findings inline.

    ``file_prefix`` is the colony root relative to the repository, so annotation paths point
    at real files in the checkout.
    """
    lines: list[str] = []
    for d in diagnostics:
        props: list[str] = []
        if d.file is not None:
            props.append(f"file={_escape_property(file_prefix + d.file)}")
            if d.line is not None:
                props.append(f"line={d.line}")
                props.append(f"col={d.column or 1}")
        props.append(f"title={_escape_property(f'meclaw {d.code}')}")
        text = f"{d.pointer}: {d.message}" if d.path else d.message
        if d.hint:
            text += f" Fix: {d.hint}"
        command = "error" if d.severity is Severity.ERROR else "warning"
        lines.append(f"::{command} {','.join(props)}::{_escape_data(text)}")
    errors = sum(d.severity is Severity.ERROR for d in diagnostics)
    lines.append(
        f"{root}: {'invalid' if errors else 'valid'} "
        f"({errors} error(s), {len(diagnostics) - errors} warning(s))"
    )
    return "\n".join(lines) + "\n"
