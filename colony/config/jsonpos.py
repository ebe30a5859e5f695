"""Find where in a JSON text a value lives, so diagnostics can carry a line and column.

:func:`json.loads` forgets positions, yet a config error is far more useful when an
editor or a CI annotation can jump to it. :func:`locate` rescans the text and follows
one JSON path, fully parsing only the containers on that path and skipping everything
else with a bracket-matching scan, so one call is linear in the size of the text.

Matching follows :func:`json.loads`: keys compare by their decoded value, and of
duplicate keys the last one wins. That falls out of the scan for free: matches are
met in document order and the last one recorded is the answer, including when a
later duplicate hides a deeper match inside an earlier one.
"""

from __future__ import annotations

import bisect
import re
from json import JSONDecodeError, JSONDecoder

__all__ = ["Path", "Positions", "locate", "offset_to_line_column"]

Path = tuple[str | int, ...]
"""A JSON path: object keys are ``str``, array indices are ``int``."""

_WHITESPACE = re.compile(r"[ \t\n\r]*")
_STRUCTURAL = re.compile(r'["\[\]{}]')
_SCALAR = re.compile(
    r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?"
    # json.loads also accepts these non-standard constants; so must we.
    r"|true|false|null|NaN|-?Infinity"
)
_OPENER = {"]": "[", "}": "{"}
_VALUE_STARTS = frozenset('{["-0123456789tfnNI')
# Strings go to json's own (C) decoder: escapes decode exactly as json.loads decodes them.
_STRING_DECODER = JSONDecoder()


class _Invalid(Exception):
    """The text stops being JSON; the caller settles for the best match so far."""


class _Scanner:
    """Walks ``text`` along ``path``, recording in ``found`` each match in text order."""

    __slots__ = ("found", "path", "pos", "text")

    def __init__(self, text: str, path: Path) -> None:
        self.text = text
        self.path = path
        self.pos = 0
        self.found: int | None = None

    def scan(self) -> int | None:
        """Offset of the deepest match of ``path``, or None if no value could be read."""
        self._skip_whitespace()
        root = self.pos
        if self.text.startswith(("{", "["), root):
            self.found = root  # a container is found once opened, even if cut short
        try:
            self.value(0)
        except (_Invalid, JSONDecodeError, RecursionError):
            # JSONDecodeError comes from a bad string, RecursionError from a path
            # thousands of levels deep. Either way, keep what was found so far.
            return self.found
        return root if self.found is None else self.found

    def _skip_whitespace(self) -> None:
        match = _WHITESPACE.match(self.text, self.pos)
        assert match is not None  # a "*" pattern always matches
        self.pos = match.end()

    def _expect(self, char: str) -> None:
        self._skip_whitespace()
        if self.text.startswith(char, self.pos):
            self.pos += 1
        else:
            raise _Invalid

    def _string(self) -> str:
        """Decode the string at ``pos`` (its opening quote) and step past it."""
        if not self.text.startswith('"', self.pos):
            raise _Invalid
        value, self.pos = _STRING_DECODER.raw_decode(self.text, self.pos)
        assert isinstance(value, str)
        return value

    def value(self, depth: int) -> None:
        """Step over the value at ``pos``, descending if ``path[depth]`` may be inside."""
        self._skip_whitespace()
        if depth == len(self.path):
            self._skip_value()
            return
        step = self.path[depth]
        char = self.text[self.pos : self.pos + 1]
        if char == "{" and isinstance(step, str):
            self._object(step, depth)
        elif char == "[" and isinstance(step, int):
            self._array(step, depth)
        else:
            self._skip_value()

    def _object(self, key: str, depth: int) -> None:
        self.pos += 1
        self._skip_whitespace()
        if self.text.startswith("}", self.pos):
            self.pos += 1
            return
        while True:
            self._skip_whitespace()
            start = self.pos
            name = self._string()
            self._expect(":")
            if name == key:
                self.found = start
                self.value(depth + 1)
            else:
                self._skip_whitespace()
                self._skip_value()
            self._skip_whitespace()
            char = self.text[self.pos : self.pos + 1]
            self.pos += 1
            if char == "}":
                return
            if char != ",":
                raise _Invalid

    def _array(self, index: int, depth: int) -> None:
        self.pos += 1
        self._skip_whitespace()
        if self.text.startswith("]", self.pos):
            self.pos += 1
            return
        current = 0
        while True:
            self._skip_whitespace()
            if current == index and self.text[self.pos : self.pos + 1] in _VALUE_STARTS:
                self.found = self.pos
                self.value(depth + 1)
            else:
                self._skip_value()
            current += 1
            self._skip_whitespace()
            char = self.text[self.pos : self.pos + 1]
            self.pos += 1
            if char == "]":
                return
            if char != ",":
                raise _Invalid

    def _skip_value(self) -> None:
        """Step over one value without recursion; only brackets and strings are checked."""
        text = self.text
        char = text[self.pos : self.pos + 1]
        if char == '"':
            self._string()
            return
        if char not in ("{", "["):
            match = _SCALAR.match(text, self.pos)
            if match is None:
                raise _Invalid
            self.pos = match.end()
            return
        open_brackets = [char]
        pos = self.pos + 1
        while open_brackets:
            match = _STRUCTURAL.search(text, pos)
            if match is None:
                raise _Invalid
            char = match.group()
            pos = match.end()
            if char == '"':
                pos = _STRING_DECODER.raw_decode(text, pos - 1)[1]
            elif char in "{[":
                open_brackets.append(char)
            elif open_brackets.pop() != _OPENER[char]:
                raise _Invalid
        self.pos = pos


def offset_to_line_column(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of ``text[offset]``; columns count code points."""
    line_start = text.rfind("\n", 0, offset) + 1
    return text.count("\n", 0, offset) + 1, offset - line_start + 1


def locate(text: str, path: Path) -> tuple[int, int] | None:
    """1-based (line, column) of the value at ``path`` in the JSON ``text``.

    A key is located at its opening quote, an array element at its first character,
    the empty path at the document's first non-blank character. When ``path`` runs
    past what exists (a missing key, an index out of range, a scalar where a container
    was expected), the deepest ancestor that does exist is returned instead, so a
    "required key missing" error still points at the object that lacks it.

    Never raises: on text that stops being JSON the best match found before that point
    is returned, or None when not even the top-level value could be read.
    """
    found = _Scanner(text, path).scan()
    return None if found is None else offset_to_line_column(text, found)


class _Indexer(_Scanner):
    """Walks a whole text once, recording where every key and element starts, by path."""

    __slots__ = ("starts",)

    def __init__(self, text: str) -> None:
        super().__init__(text, ())
        self.starts: dict[Path, int] = {}
        """Of duplicates the last, as :func:`locate` answers: later in the text is larger."""

    def node(self, path: Path) -> None:
        self._skip_whitespace()
        char = self.text[self.pos : self.pos + 1]
        if char == "{":
            self._members(path)
        elif char == "[":
            self._elements(path)
        else:
            self._skip_value()

    def _members(self, path: Path) -> None:
        self.pos += 1
        self._skip_whitespace()
        if self.text.startswith("}", self.pos):
            self.pos += 1
            return
        while True:
            self._skip_whitespace()
            start = self.pos
            name = self._string()
            self._expect(":")
            self.starts[(*path, name)] = start
            self.node((*path, name))
            self._skip_whitespace()
            char = self.text[self.pos : self.pos + 1]
            self.pos += 1
            if char == "}":
                return
            if char != ",":
                raise _Invalid

    def _elements(self, path: Path) -> None:
        self.pos += 1
        self._skip_whitespace()
        if self.text.startswith("]", self.pos):
            self.pos += 1
            return
        index = 0
        while True:
            self._skip_whitespace()
            if self.text[self.pos : self.pos + 1] not in _VALUE_STARTS:
                raise _Invalid
            self.starts[(*path, index)] = self.pos
            self.node((*path, index))
            index += 1
            self._skip_whitespace()
            char = self.text[self.pos : self.pos + 1]
            self.pos += 1
            if char == "]":
                return
            if char != ",":
                raise _Invalid


class Positions:
    """:func:`locate` for many paths of one text.

    The first few questions are answered by :func:`locate` itself. After that the whole text
    is indexed once (where each key and element starts, and each line), so a file with a
    thousand diagnostics, such as a hive whose every edge names a missing cell, costs one
    scan rather than a thousand. Text the index cannot read keeps being answered by
    :func:`locate`, so every answer is the one it would give.
    """

    SCANS_BEFORE_INDEX = 2

    def __init__(self, text: str) -> None:
        self.text = text
        self._asked = 0
        self._index: tuple[int, dict[Path, int], list[int]] | None = None
        self._unindexable = False

    def locate(self, path: Path) -> tuple[int, int] | None:
        self._asked += 1
        due = self._asked > self.SCANS_BEFORE_INDEX
        if due and self._index is None and not self._unindexable:
            self._index = self._build()
            self._unindexable = self._index is None
        if self._index is None:
            return locate(self.text, path)
        root, starts, lines = self._index
        # locate() keeps the last match it meets along the path, and it meets them in text
        # order: the answer is the largest start among the path's prefixes found.
        found = root
        for depth in range(1, len(path) + 1):
            start = starts.get(path[:depth])
            if start is not None and start > found:
                found = start
        line = bisect.bisect_right(lines, found)
        return line, found - lines[line - 1] + 1

    def _build(self) -> tuple[int, dict[Path, int], list[int]] | None:
        indexer = _Indexer(self.text)
        try:
            indexer._skip_whitespace()
            root = indexer.pos
            if root >= len(self.text):
                return None
            indexer.node(())
        except (_Invalid, JSONDecodeError, RecursionError):
            return None
        lines = [0]
        newline = self.text.find("\n")
        while newline >= 0:
            lines.append(newline + 1)
            newline = self.text.find("\n", newline + 1)
        return root, indexer.starts, lines
