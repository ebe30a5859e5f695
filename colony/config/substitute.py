"""``${VAR}`` substitution in config values, and the ``.env`` file it reads.

Rules (meclaw's, plus decisions.md #8):

* ``${VAR}`` must have a value; ``${VAR:-fallback}`` uses the fallback when VAR is unset *or
  empty*; ``$${X}`` is the literal ``${X}``; a lone ``$`` is literal; an unterminated ``${`` is
  an error; every other shell form (``${V:=x}``, ``${V:?m}``, ``${V:+x}``, ``${V-x}``, names
  holding ``-+?=``) is refused as unsupported.
* An exported variable wins; the ``--env`` file (default ``<root>/.env``) supplies the rest
  (as python-dotenv and docker compose do; issue 15 overrides decisions.md #8, which read the
  file first). ``VAR=`` is a value (empty), not a missing variable, in either place.
* Substitution happens in memory on every string value (never on keys); files keep their
  tokens, so secrets never land on disk. Substituted values are never logged or echoed: the
  result remembers which paths were substituted so diagnostics can avoid printing them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from colony.config import reading
from colony.config.jsonpos import Path as JsonPath
from colony.errors import ColonyError


class EnvFileError(ColonyError):
    """The ``.env`` file (or one of its lines) cannot be read."""

    code = "env_file_invalid"

    def __init__(self, line: int | None, reason: str) -> None:
        self.line = line
        """None when the problem is the file, not a line."""
        self.reason = reason
        super().__init__(f"line {line}: {reason}" if line is not None else reason)


def parse_env_file(text: str) -> dict[str, str]:
    """Parse ``KEY=VALUE`` lines: blank and ``#`` lines skipped, whitespace trimmed, one pair
    of surrounding double quotes stripped. A non-empty line without ``=`` is an error."""
    values: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise EnvFileError(number, "no '=' separator (expected KEY=VALUE)")
        key = key.strip()
        if not key:
            raise EnvFileError(number, "empty variable name before '='")
        value = value.strip()
        if len(value) >= 2 and value[0] == '"' and value[-1] == '"':
            value = value[1:-1]
        values[key] = value
    return values


def load_env_file(path: Path) -> dict[str, str]:
    """The variables of ``path``; a file that does not exist holds none. A path that is not a
    regular file, or is larger than :data:`~colony.config.reading.MAX_ENV_BYTES`, is an
    :class:`EnvFileError` (never a hang on a FIFO or an endless read of a device)."""
    try:
        text = reading.decode(reading.read_bytes(path, reading.MAX_ENV_BYTES))
    except FileNotFoundError:
        return {}
    except reading.ReadProblem as problem:
        raise EnvFileError(problem.line, problem.message) from None
    return parse_env_file(text)


class Variables:
    """Where ``${VAR}`` looks: the process environment first, then the env file."""

    def __init__(
        self, file_values: Mapping[str, str], environ: Mapping[str, str] | None = None
    ) -> None:
        self._file = file_values
        self._environ = os.environ if environ is None else environ

    def get(self, name: str) -> str | None:
        value = self._environ.get(name)
        if value is None:
            value = self._file.get(name)
        return value


@dataclass(frozen=True, slots=True)
class SubstitutionProblem:
    """One ``${...}`` that could not be resolved, and where it sits."""

    path: JsonPath
    code: str
    """``env_var_missing``, ``unsupported_substitution`` or ``unterminated_substitution``."""
    token: str
    """The offending token as written in the file (never a substituted value)."""


@dataclass(slots=True)
class Substituted:
    """A config document after substitution."""

    value: Any
    substituted_paths: set[JsonPath] = field(default_factory=set)
    """Paths of strings whose value came (partly) from a variable: never echo these."""
    problems: list[SubstitutionProblem] = field(default_factory=list)
    """Strings with a problem keep their original text in ``value``."""


class _Problem(Exception):
    def __init__(self, code: str, token: str) -> None:
        self.code = code
        self.token = token


_UNSUPPORTED_CHARS = frozenset("-+?=")


def _resolve_token(inner: str, variables: Variables) -> str:
    colon = inner.find(":")
    if colon >= 0:
        name, rest = inner[:colon], inner[colon + 1 :]
        if not rest.startswith("-"):
            raise _Problem("unsupported_substitution", "${" + inner + "}")
        value = variables.get(name)
        return value if value else rest[1:]
    if any(ch in _UNSUPPORTED_CHARS for ch in inner):
        raise _Problem("unsupported_substitution", "${" + inner + "}")
    value = variables.get(inner)
    if value is None:
        raise _Problem("env_var_missing", "${" + inner + "}")
    return value


def expand(text: str, variables: Variables) -> tuple[str, bool]:
    """Expand one string; returns the result and whether any variable was read.

    Raises ``_Problem`` (internal) for the first bad token.
    """
    if "$" not in text:
        return text, False
    out: list[str] = []
    used = False
    i = 0
    n = len(text)
    while i < n:
        dollar = text.find("$", i)
        if dollar < 0:
            out.append(text[i:])
            break
        out.append(text[i:dollar])
        if text.startswith("$${", dollar):
            end = text.find("}", dollar + 3)
            if end < 0:
                raise _Problem("unterminated_substitution", text[dollar:])
            out.append(text[dollar + 1 : end + 1])
            i = end + 1
        elif text.startswith("${", dollar):
            end = text.find("}", dollar + 2)
            if end < 0:
                raise _Problem("unterminated_substitution", text[dollar:])
            out.append(_resolve_token(text[dollar + 2 : end], variables))
            used = True
            i = end + 1
        else:
            out.append("$")
            i = dollar + 1
    return "".join(out), used


def _may_change(value: Any) -> bool:
    """Whether substitution could touch ``value``: a container, or a string with a '$'."""
    if isinstance(value, str):
        return "$" in value
    return isinstance(value, (dict, list))


def substitute(document: Any, variables: Variables) -> Substituted:
    """Substitute every string value of a parsed JSON document, collecting every problem."""
    result = Substituted(value=None)
    result.value = _walk(document, (), variables, result)
    return result


def _walk(node: Any, path: JsonPath, variables: Variables, result: Substituted) -> Any:
    # A module-level function rather than a closure: a closure that calls itself is a
    # reference cycle, left for the cyclic collector once per file of the tree.
    if isinstance(node, str):
        try:
            value, used = expand(node, variables)
        except _Problem as problem:
            result.problems.append(SubstitutionProblem(path, problem.code, problem.token))
            return node
        if used:
            result.substituted_paths.add(path)
        return value
    # A value that cannot change is kept without building its path (most of a tree's values:
    # numbers, names, text without a '$').
    if isinstance(node, list):
        return [
            _walk(item, (*path, index), variables, result) if _may_change(item) else item
            for index, item in enumerate(node)
        ]
    if isinstance(node, dict):
        return {
            key: _walk(item, (*path, key), variables, result) if _may_change(item) else item
            for key, item in node.items()
        }
    return node
