"""CEL expressions (edge conditions, modifiers): the one module that talks to a CEL engine.

Two engines can run them. ``cel-expr-python`` binds Google's cel-cpp, the reference
runtime, and is fast, but ships wheels for a few platforms only; ``cel-python`` is pure
Python and runs everywhere. Everything else in the daemon sees only this module's
types, so the engines stay interchangeable and their differences are settled here:
errors become :class:`ExpressionSyntaxError` / :class:`EvaluationError` with the same
fields, and results become plain JSON-compatible Python.

Each engine is imported inside its own class, so a missing wheel matters only when that
engine is chosen. :func:`default_engine` picks one per process; ``MECLAW_CEL_ENGINE``
forces a choice.
"""

from __future__ import annotations

import datetime
import itertools
import logging
import math
import os
import re
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Final, TypeAlias

from colony.errors import ColonyError
from colony.persist.escape import has_surrogate

__all__ = [
    "ENGINE_ENV_VAR",
    "ENGINE_NAMES",
    "Activation",
    "Engine",
    "EngineUnavailableError",
    "EvaluationError",
    "ExpressionSyntaxError",
    "JsonValue",
    "Program",
    "available_engines",
    "default_engine",
    "make_engine",
]

JsonValue: TypeAlias = bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"] | None
"""What expressions read (activation values) and what they return."""

ENGINE_ENV_VAR: Final = "MECLAW_CEL_ENGINE"
CEL_EXPR_PYTHON: Final = "cel-expr-python"
CEL_PYTHON: Final = "cel-python"
ENGINE_NAMES: Final = (CEL_EXPR_PYTHON, CEL_PYTHON)
"""Engine names in order of preference."""

DEFAULT_VARIABLES: Final = ("context", "hop")
_MAP_VARIABLES: Final = frozenset(DEFAULT_VARIABLES)

_INT64_MIN: Final = -(2**63)
_UINT64_END: Final = 2**64


# --------------------------------------------------------------------------- errors


class ExpressionSyntaxError(ColonyError):
    """The source does not parse; raised by :meth:`Engine.compile`.

    Carries the position separately from the engine's wording so config diagnostics can
    point an editor at it and :meth:`caret` can show it, whichever engine found it.
    """

    code = "expression_syntax"

    def __init__(self, source: str, line: int, column: int, reason: str) -> None:
        super().__init__(f"{reason} at line {line}, column {column}")
        self.source = source
        self.line = line  # 1-based
        self.column = column  # 1-based, in code points
        self.reason = reason

    def caret(self) -> str:
        """The offending source line, then a ``^`` under the column."""
        lines = self.source.split("\n")
        text = lines[max(1, min(self.line, len(lines))) - 1]
        # Copy tabs so the caret lines up however the reader's terminal expands them.
        pad = "".join("\t" if ch == "\t" else " " for ch in text[: self.column - 1])
        pad += " " * max(0, self.column - 1 - len(text))
        return f"{text}\n{pad}^"


class EvaluationError(ColonyError):
    """Evaluating a compiled expression failed; the expression has no value.

    ``missing_key`` separates the routine case, a map key the message does not carry
    (routing logs those at DEBUG), from everything else (WARN).
    """

    code = "expression_failed"

    def __init__(self, reason: str, *, missing_key: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.missing_key = missing_key


class EngineUnavailableError(ColonyError, RuntimeError):
    """The requested engine is unknown or cannot be imported on this machine."""

    code = "expression_engine_unavailable"


# --------------------------------------------------------------------------- core types


class Activation:
    """The variables of one evaluation, converted at most once for the engine that built it.

    The router evaluates several edges against one message, so conversion happens here
    rather than in every :meth:`Program.evaluate`; and only when a program needs the engine:
    the usual edge condition (``has(hop.route) && hop.route == 'x'``) is answered from the
    plain values (see :func:`_shortcut`), and converting costs more than evaluating.
    """

    __slots__ = ("_engine", "_payload", "_plain", "_values")

    def __init__(self, engine: Engine, values: Mapping[str, JsonValue]) -> None:
        self._engine = engine
        self._values = values
        self._payload: Any = _UNCONVERTED
        self._plain: dict[str, dict[str, Any] | None] | None = None
        """Per map variable read by a shortcut: the value, or None when the engine must see
        it (not an object, or holding something an engine treats apart)."""

    def scope(self, name: str) -> dict[str, Any] | None:
        """The map variable ``name`` when every value in it is plain JSON (so both engines read
        it as it is); None otherwise."""
        plain = self._plain
        if plain is None:
            plain = self._plain = {}
        elif name in plain:
            return plain[name]
        value = self._values.get(name)
        found = value if type(value) is dict and _is_plain(value) else None
        plain[name] = found
        return found


class Program(ABC):
    """One compiled expression, ready to evaluate against many activations.

    ``check_error`` is the type checker's objection (cel-expr-python only), or None.
    Such an expression still runs, unchecked, and errors when evaluated — as the
    reference runtime does — while config validation can report it up front.
    """

    __slots__ = ("_engine", "check_error", "source")

    def __init__(self, engine: Engine, source: str, check_error: str | None = None) -> None:
        self._engine = engine
        self.source = source
        self.check_error = check_error

    @abstractmethod
    def evaluate(self, activation: Activation) -> JsonValue:
        """The value of the expression, as JSON-compatible Python.

        Raises :class:`EvaluationError` when the expression has no value for these
        variables, never anything else for a well-formed activation.
        """

    def _payload(self, activation: Activation) -> Any:
        # Activations hold engine-specific data; another engine's would fail obscurely.
        if activation._engine is not self._engine:
            raise ValueError("activation was built by a different engine than this program")
        payload = activation._payload
        if payload is _UNCONVERTED:
            payload = activation._payload = self._engine._convert(activation._values)
        return payload

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.source!r}>"


class Engine(ABC):
    """Compiles CEL sources for a fixed set of variable names.

    Compiled programs (and syntax errors) are cached by source: expressions come from
    the topology, a small fixed set, and are compiled again on every reload.
    """

    name: ClassVar[str]

    def __init__(self, variables: Sequence[str] = DEFAULT_VARIABLES) -> None:
        self.variables = tuple(variables)
        self._cache: dict[str, Program | ExpressionSyntaxError] = {}

    def compile(self, source: str) -> Program:
        """The program for ``source``; raises :class:`ExpressionSyntaxError`."""
        found = self._cache.get(source)
        if found is None:
            try:
                found = self._compile(source)
            except ExpressionSyntaxError as exc:
                found = exc
            else:
                shortcut = _shortcut(source, self.variables) if found.check_error is None else None
                if shortcut is not None:
                    found = _ShortcutProgram(self, source, found, shortcut)
            self._cache[source] = found
        if isinstance(found, ExpressionSyntaxError):
            # A fresh exception each time: re-raising one instance would chain tracebacks.
            raise ExpressionSyntaxError(found.source, found.line, found.column, found.reason)
        return found

    def activation(self, values: Mapping[str, JsonValue]) -> Activation:
        """One message's variables; build once, evaluate many programs (converted for the
        engine when the first program needs it)."""
        return Activation(self, values)

    @abstractmethod
    def _convert(self, values: Mapping[str, JsonValue]) -> Any:
        """The engine's own form of an activation's variables."""

    @abstractmethod
    def _compile(self, source: str) -> Program: ...

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} variables={self.variables}>"


# --------------------------------------------------------------------------- results


def _format_duration(value: datetime.timedelta) -> str:
    """CEL's own duration text (``1.5s``), so both engines print durations alike."""
    micros = (value.days * 86400 + value.seconds) * 1_000_000 + value.microseconds
    sign = "-" if micros < 0 else ""
    seconds, fraction = divmod(abs(micros), 1_000_000)
    if fraction:
        return f"{sign}{seconds}.{fraction:06d}".rstrip("0") + "s"
    return f"{sign}{seconds}s"


def _format_timestamp(value: datetime.datetime) -> str:
    """RFC 3339 in UTC, CEL's own timestamp text."""
    if value.tzinfo is not None:
        value = value.astimezone(datetime.UTC)
        return value.replace(tzinfo=None).isoformat() + "Z"
    return value.isoformat()


def _to_json(value: object, bools: tuple[type, ...]) -> JsonValue:
    """Engine-native result → JSON-compatible Python.

    ``bools`` names the engine's boolean types: cel-python's ``BoolType`` subclasses
    ``int`` and must be caught before the integer branch.
    """
    if value is None or type(value) is bool:
        return value
    if isinstance(value, bools):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        # JSON has no NaN or infinities; None reads as "no usable number".
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bytes | bytearray):
        return None  # JSON has no bytes, and guessing an encoding would invent data
    if isinstance(value, list):
        return [_to_json(item, bools) for item in value]
    if isinstance(value, dict):
        return {_json_key(key, bools): _to_json(item, bools) for key, item in value.items()}
    if isinstance(value, datetime.datetime):
        return _format_timestamp(value)
    if isinstance(value, datetime.timedelta):
        return _format_duration(value)
    if isinstance(value, BaseException):
        # cel-python can leave an error inside a list or map literal.
        raise EvaluationError(_celpy_reason(value))
    if isinstance(value, type):
        # cel-python represents CEL types as its Python classes: IntType → "int".
        return value.__name__.removesuffix("Type").lower()
    return str(value)


def _json_key(key: object, bools: tuple[type, ...]) -> str:
    """CEL map keys may be int, uint or bool; JSON object keys are strings."""
    plain = _to_json(key, bools)
    if isinstance(plain, bool):
        return "true" if plain else "false"
    return plain if isinstance(plain, str) else str(plain)


# --------------------------------------------------------------------------- cel-expr-python

_CPP_DIAGNOSTIC: Final = re.compile(r"ERROR: <input>:(\d+):(\d+): ([^\n]*)")
_CPP_STATUS_SUFFIX: Final = re.compile(r"\s*\[[A-Z_]+\]\s*$")


def _parse_cpp_diagnostic(source: str, message: str) -> ExpressionSyntaxError:
    """cel-cpp reports ``ERROR: <input>:L:C: reason`` plus an echo; keep the first one."""
    found = _CPP_DIAGNOSTIC.search(message)
    if found is None:
        return ExpressionSyntaxError(source, 1, 1, _CPP_STATUS_SUFFIX.sub("", message))
    reason = _CPP_STATUS_SUFFIX.sub("", found.group(3))
    return ExpressionSyntaxError(source, int(found.group(1)), int(found.group(2)), reason)


class _CelExprProgram(Program):
    __slots__ = ("_error_type", "_program")

    def __init__(
        self, engine: Engine, source: str, program: Any, error_type: Any, check_error: str | None
    ) -> None:
        super().__init__(engine, source, check_error)
        self._program = program
        self._error_type = error_type

    def evaluate(self, activation: Activation) -> JsonValue:
        payload = self._payload(activation)
        try:
            value = self._program.eval(payload)
            result = value.plain_value()
        except Exception as exc:  # the binding's contract is error values, not exceptions
            raise EvaluationError(f"{CEL_EXPR_PYTHON} failed: {exc!r}") from exc
        # Booleans are the common case (edge conditions) and an error never is one, so
        # answer them before paying for the type check.
        if type(result) is bool:
            return result
        if value.type() == self._error_type:
            reason = str(result)
            raise EvaluationError(
                reason, missing_key=reason.startswith("NOT_FOUND: Key not found in map")
            )
        return _to_json(result, (bool,))


class _CelExprEngine(Engine):
    """Google's cel-cpp: type-checks at compile time and evaluates in C++."""

    name = CEL_EXPR_PYTHON

    def __init__(self, variables: Sequence[str] = DEFAULT_VARIABLES) -> None:
        super().__init__(variables)
        from cel_expr_python import cel

        kind = cel.Type
        self._env = cel.NewEnv(
            variables={
                name: kind.Map(kind.STRING, kind.DYN) if name in _MAP_VARIABLES else kind.DYN
                for name in self.variables
            }
        )
        self._error_type = kind.ERROR

    def _compile(self, source: str) -> Program:
        check_error: str | None = None
        try:
            compiled = self._env.compile(source)
        except RuntimeError as checked:
            # Either a syntax error or a type error; only a parse-only compile can tell.
            try:
                compiled = self._env.compile(source, disable_check=True)
            except RuntimeError as parsed:
                raise _parse_cpp_diagnostic(source, str(parsed)) from None
            check_error = str(_parse_cpp_diagnostic(source, str(checked)))
        return _CelExprProgram(self, source, compiled, self._error_type, check_error)

    def _convert(self, values: Mapping[str, JsonValue]) -> Any:
        # The binding converts lazily: a value it cannot represent (an int beyond
        # uint64, say) makes that variable an error value when an expression reads it.
        return self._env.Activation(values if type(values) is dict else dict(values))


# --------------------------------------------------------------------------- cel-python

_CELPY_NOISE: Final = (
    (re.compile(r"<class 'celpy\.celtypes\.(\w+?)Type'>"), lambda m: m.group(1).lower()),
    (re.compile(r"<class '(?:\w+\.)*(\w+)'>"), lambda m: m.group(1)),
    (re.compile(r"Token\('RULE', '(\w+)'\)"), lambda m: m.group(1)),
)
_CELPY_MISSING_KEY: Final = ("no such member in mapping", "no such key")


def _celpy_reason(exc: BaseException) -> str:
    """A readable one-liner from a CELEvalError, whose args are (message, class, args)."""
    args = exc.args
    reason = str(args[0]) if args else type(exc).__name__
    # "undeclared reference to 'x' (in activation '<repr of everything>')"
    reason = reason.split(" (in activation ", 1)[0]
    if len(args) >= 3 and isinstance(args[2], tuple) and args[2]:
        # The wrapped Python exception's args: the key for "no such key", or the detail
        # behind a generic message such as "return error for overflow".
        reason = f"{reason}: {'; '.join(str(arg) for arg in args[2])}"
    for pattern, replacement in _CELPY_NOISE:
        reason = pattern.sub(replacement, reason)
    return reason


class _CelPythonProgram(Program):
    __slots__ = ("_bools", "_error", "_runner")

    def __init__(
        self,
        engine: Engine,
        source: str,
        runner: Any,
        error: type[Exception],
        bools: tuple[type, ...],
    ) -> None:
        super().__init__(engine, source)
        self._runner = runner
        self._error = error
        self._bools = bools

    def evaluate(self, activation: Activation) -> JsonValue:
        payload = self._payload(activation)
        try:
            result = self._runner.evaluate(payload)
        except self._error as exc:  # celpy both raises and returns its errors
            result = exc
        except Exception as exc:  # celpy documents stray Python errors as its own bugs
            raise EvaluationError(f"{CEL_PYTHON} failed: {exc!r}") from exc
        if isinstance(result, self._error):
            reason = _celpy_reason(result)
            raise EvaluationError(reason, missing_key=reason.startswith(_CELPY_MISSING_KEY))
        return _to_json(result, self._bools)


class _Unrepresentable(Exception):
    """An activation value cel-python has no type for."""


class _CelPythonEngine(Engine):
    """Pure-Python CEL, for platforms without cel-cpp wheels.

    Aligned with cel-cpp where it matters to routing: int/uint/double compare by
    numeric value, ints out of range poison their variable instead of raising.
    """

    name = CEL_PYTHON

    def __init__(self, variables: Sequence[str] = DEFAULT_VARIABLES) -> None:
        super().__init__(variables)
        import celpy
        from celpy import celtypes, evaluation
        from celpy.celparser import CELParseError
        from celpy.evaluation import CELEvalError
        from lark.exceptions import UnexpectedCharacters, UnexpectedToken

        # Its debug logging formats whole activations on every lookup when enabled, and
        # it logs errors that it then raises (and we report); keep the daemon's log clean.
        logging.getLogger("celpy").setLevel(logging.CRITICAL)

        self._ct = celtypes
        self._parse_error: type[Exception] = CELParseError
        self._unexpected_token = UnexpectedToken
        self._unexpected_chars = UnexpectedCharacters
        self._eval_error: type[Exception] = CELEvalError
        self._bools: tuple[type, ...] = (celtypes.BoolType,)
        self._functions = _numeric_comparisons(celtypes, evaluation)
        # celpy's Environment *sets* the recursion limit to 2500; never lower ours.
        limit = sys.getrecursionlimit()
        self._env = celpy.Environment()
        sys.setrecursionlimit(max(limit, sys.getrecursionlimit()))

    def _compile(self, source: str) -> Program:
        try:
            ast = self._env.compile(source)
        except self._parse_error as exc:
            raise self._syntax_error(source, exc) from None
        runner = self._env.program(ast, functions=self._functions)
        return _CelPythonProgram(self, source, runner, self._eval_error, self._bools)

    def _syntax_error(self, source: str, exc: Exception) -> ExpressionSyntaxError:
        """Rebuild the reason from lark's exception: celpy's message is only an echo."""
        cause = exc.__context__
        line = getattr(exc, "line", None) or 1
        column = getattr(exc, "column", None) or 1
        if isinstance(cause, self._unexpected_token) and cause.token.type == "$END":
            # lark places end-of-input on the last token; cel-cpp puts it after the text.
            lines = source.split("\n")
            return ExpressionSyntaxError(
                source, len(lines), len(lines[-1]) + 1, "Syntax error: unexpected end of input"
            )
        if isinstance(cause, self._unexpected_token):
            reason = f"Syntax error: unexpected {cause.token.value!r}"
        elif isinstance(cause, self._unexpected_chars):
            reason = f"Syntax error: unexpected character {cause.char!r}"
        else:
            first = str(exc.args[0]).split("\n", 1)[0] if exc.args else ""
            reason = f"Syntax error: {first or type(exc).__name__}"
        return ExpressionSyntaxError(source, line, column, reason)

    def _convert(self, values: Mapping[str, JsonValue]) -> Any:
        payload: dict[str, Any] = {}
        for name, value in values.items():
            try:
                payload[name] = self._to_cel(value)
            except _Unrepresentable as exc:
                # As cel-cpp does: the variable becomes an error when an expression reads it.
                payload[name] = self._eval_error(f"{exc} in variable {name!r}")
        return payload

    def _to_cel(self, value: object) -> Any:
        ct = self._ct
        if value is None:
            return None
        if isinstance(value, bool):
            return ct.BoolType(value)
        if isinstance(value, str):
            return ct.StringType(value)
        if isinstance(value, int):
            if _INT64_MIN <= value < 2**63:
                return ct.IntType(value)
            if 0 <= value < _UINT64_END:
                return ct.UintType(value)  # what cel-cpp does with the same Python int
            raise _Unrepresentable(f"integer {value} is out of range")
        if isinstance(value, float):
            return ct.DoubleType(value)
        if isinstance(value, list):
            return ct.ListType([self._to_cel(item) for item in value])
        if isinstance(value, dict):
            return ct.MapType({self._to_cel(k): self._to_cel(v) for k, v in value.items()})
        raise _Unrepresentable(f"unsupported value type {type(value).__name__}")


def _numeric_comparisons(celtypes: Any, evaluation: Any) -> dict[str, Any]:
    """Overrides for celpy's comparison operators that compare int, uint and double
    across types by numeric value, as CEL specifies (celpy raises "no matching
    overload" for ``1 == 1.0``). Every other pair, bool included, is left to celpy.
    """
    import operator

    numbers = (celtypes.IntType, celtypes.UintType, celtypes.DoubleType)
    double = celtypes.DoubleType
    make_bool = celtypes.BoolType

    def numeric(v: Any) -> int | float:
        # Python compares int with float exactly, so no precision is lost here.
        return float(v) if isinstance(v, double) else int(v)

    def is_number(v: Any) -> bool:
        # celpy's BoolType subclasses IntType, but in CEL a bool is never a number.
        return isinstance(v, numbers) and not isinstance(v, make_bool)

    def comparison(
        compare: Callable[[Any, Any], bool], fallback: Callable[[Any, Any], Any]
    ) -> Callable[[Any, Any], Any]:
        def apply(a: Any, b: Any) -> Any:
            if type(a) is not type(b) and is_number(a) and is_number(b):
                return make_bool(compare(numeric(a), numeric(b)))
            return fallback(a, b)

        return apply

    def equality(negate: bool, fallback: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        ordered = comparison(operator.ne if negate else operator.eq, fallback)

        def apply(a: Any, b: Any) -> Any:
            # CEL equality across kinds is simply false (true == 1, 1 == null), never an error.
            if isinstance(a, make_bool) is not isinstance(b, make_bool) or (a is None) is not (
                b is None
            ):
                return make_bool(negate)
            return ordered(a, b)

        return apply

    return {
        "_==_": equality(False, evaluation.bool_eq),
        "_!=_": equality(True, evaluation.bool_ne),
        "_<_": comparison(operator.lt, evaluation.bool_lt),
        "_<=_": comparison(operator.le, evaluation.bool_le),
        "_>_": comparison(operator.gt, evaluation.bool_gt),
        "_>=_": comparison(operator.ge, evaluation.bool_ge),
    }


# --------------------------------------------------------------------------- shortcuts
#
# Most edge conditions are key tests and string comparisons on the headers
# (``has(hop.route) && hop.route == 'fire'``); converting the headers for an engine costs more
# than such an expression is worth. A source made only of the forms below is also compiled to
# Python closures that read the plain values. A closure answers only where both engines give
# the same value: anything else (a key the message lacks, a float, a type mix, an overflow, a
# variable holding something an engine converts apart) is ``_DEFER``, and the engine's program
# evaluates as before. So a shortcut never changes a value or an error, only who computes it.
#
#   or   := and ('||' and)*          and  := rel ('&&' rel)*
#   rel  := sum (('=='|'!='|'<'|'<='|'>'|'>=') sum)?
#   sum  := unary (('+'|'-') unary)*  unary := '!' unary | atom
#   atom := VAR '.' KEY | 'has' '(' VAR '.' KEY ')' | 'int' '(' or ')' | '(' or ')'
#         | 'true' | 'false' | INT | 'STRING' | "STRING"     (VAR: context or hop; no escapes)

_UNCONVERTED: Final = object()
"""An activation's payload before a program needed the engine's form."""
_DEFER: Final[Any] = object()
"""A shortcut's answer when the engine must answer."""
_PLAIN_LIMIT: Final = 10_000
"""Values looked at, at most, to find a variable plain (past it, the engine answers)."""
_INT_TEXT: Final = re.compile(r"-?(?:0|[1-9][0-9]*)", re.ASCII)
_TOKEN: Final = re.compile(
    r"""\s*(?:(&&|\|\||==|!=|<=|>=|[<>!+\-().])|([A-Za-z_][A-Za-z0-9_]*)"""
    r"""|(0|[1-9][0-9]*)(?![A-Za-z0-9_.])|'([^'\\\n\r]*)'|"([^"\\\n\r]*)")"""
)
_INT64_END: Final = 2**63

Scopes: TypeAlias = dict[str, Any]
"""The plain map variables a shortcut reads, by name."""
Shortcut: TypeAlias = Callable[[Scopes], Any]
Answer: TypeAlias = Callable[[Activation], Any]
"""A compiled shortcut: a value, or ``_DEFER``."""


def _is_plain(value: dict[str, Any]) -> bool:
    """``value`` holds only what both engines convert alike and without error: objects with
    string keys, arrays, strings without lone surrogates, int64/uint64 integers, finite
    floats, booleans and null. (Headers are mostly flat objects: their values are looked at
    in this loop, without the stack a nested value needs.)"""
    budget = _PLAIN_LIMIT
    stack: list[Any] = []
    items: Any = value.items()
    while True:
        for key, item in items:
            if type(key) is not str or has_surrogate(key):
                return False
            if not _plain_scalar(item):
                if type(item) is dict:
                    stack.append(item.items())
                elif type(item) is list:
                    stack.append(zip(itertools.repeat(""), item))  # as if keyed by ""
                else:
                    return False
        if not stack:
            return True
        budget -= 1
        if not budget:
            return False
        items = stack.pop()


def _plain_scalar(item: Any) -> bool:
    kind = type(item)
    if kind is str:
        return not has_surrogate(item)
    if kind is bool or item is None:
        return True
    if kind is int:
        return bool(_INT64_MIN <= item < _UINT64_END)
    if kind is float:
        return math.isfinite(item)  # cel-python's int(inf) escapes as OverflowError
    return False


def _scalar(value: Any) -> Any:
    """A header value as a shortcut uses it (strings, booleans, int64), else ``_DEFER``."""
    kind = type(value)
    if kind is str or kind is bool:
        return value
    if kind is int and _INT64_MIN <= value < _INT64_END:
        return value
    return _DEFER


class _NoShortcut(Exception):
    """The source uses something the shortcuts do not cover."""


class _Parser:
    def __init__(self, source: str, variables: frozenset[str]) -> None:
        self.variables = variables
        self.used: set[str] = set()
        """The variables the source reads."""
        self.tokens: list[tuple[str, str]] = []
        at, end = 0, len(source)
        while at < end:
            if source[at:].isspace():
                break
            found = _TOKEN.match(source, at)
            if found is None:
                raise _NoShortcut
            op, name, number, single, double = found.groups()
            if op is not None:
                self.tokens.append(("op", op))
            elif name is not None:
                self.tokens.append(("name", name))
            elif number is not None:
                self.tokens.append(("int", number))
            else:
                text = single if single is not None else double
                if has_surrogate(text):
                    raise _NoShortcut
                self.tokens.append(("str", text))
            at = found.end()
        self.at = 0

    def parse(self) -> Shortcut:
        fn = self.disjunction()
        if self.at != len(self.tokens):
            raise _NoShortcut
        return fn

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self, kind: str, text: str | None = None) -> str:
        token = self.peek()
        if token is None or token[0] != kind or (text is not None and token[1] != text):
            raise _NoShortcut
        self.at += 1
        return token[1]

    def accept(self, *ops: str) -> str | None:
        token = self.peek()
        if token is not None and token[0] == "op" and token[1] in ops:
            self.at += 1
            return token[1]
        return None

    def disjunction(self) -> Shortcut:
        fn = self.conjunction()
        while self.accept("||"):
            fn = _junction(fn, self.conjunction(), decides=True)
        return fn

    def conjunction(self) -> Shortcut:
        fn = self.relation()
        while self.accept("&&"):
            fn = _junction(fn, self.relation(), decides=False)
        return fn

    def relation(self) -> Shortcut:
        fn = self.sum()
        op = self.accept("==", "!=", "<", "<=", ">", ">=")
        if op is None:
            return fn
        fn = _compare(op, fn, self.sum())
        if self.accept("==", "!=", "<", "<=", ">", ">="):
            raise _NoShortcut  # a chain of relations: left to the engine
        return fn

    def sum(self) -> Shortcut:
        fn = self.unary()
        while op := self.accept("+", "-"):
            fn = _arithmetic(op == "-", fn, self.unary())
        return fn

    def unary(self) -> Shortcut:
        if self.accept("!"):
            return _negation(self.unary())
        return self.atom()

    def selection(self) -> tuple[str, str]:
        variable = self.take("name")
        if variable not in self.variables:
            raise _NoShortcut
        self.used.add(variable)
        self.take("op", ".")
        return variable, self.take("name")

    def atom(self) -> Shortcut:
        token = self.peek()
        if token is None:
            raise _NoShortcut
        kind, text = token
        if kind == "op" and text == "(":
            self.at += 1
            fn = self.disjunction()
            self.take("op", ")")
            return fn
        if kind == "str":
            self.at += 1
            return _constant(text)
        if kind == "int":
            self.at += 1
            value = int(text)
            if value >= _INT64_END:
                raise _NoShortcut
            return _constant(value)
        if kind != "name":
            raise _NoShortcut
        if text in ("true", "false"):
            self.at += 1
            return _constant(text == "true")
        if text in ("has", "int"):
            self.at += 1
            self.take("op", "(")
            fn = _has(*self.selection()) if text == "has" else _to_int(self.disjunction())
            self.take("op", ")")
            return fn
        variable, key = self.selection()
        token = self.peek()
        if token is not None and token[0] == "op" and token[1] in (".", "("):
            raise _NoShortcut  # a deeper selection or a method call
        return _select(variable, key)


def _shortcut(source: str, variables: Sequence[str]) -> Answer | None:
    """The closure answering ``source`` where it can, or None when it uses anything else."""
    try:
        parser = _Parser(source, _MAP_VARIABLES.intersection(variables))
        fn = parser.parse()
    except _NoShortcut:
        return None
    used = tuple(sorted(parser.used))

    def shortcut(activation: Activation) -> Any:
        # Every variable read must be plain, even one a short circuit skips: cel-python
        # evaluates both sides, and one of its errors escapes ``false && ...``.
        for name in used:
            if activation.scope(name) is None:
                return _DEFER
        return fn(activation._plain)  # type: ignore[arg-type]  # filled by scope()

    return shortcut


def _constant(value: Any) -> Shortcut:
    return lambda scopes: value


def _select(variable: str, key: str) -> Shortcut:
    def select(scopes: Scopes) -> Any:
        scope = scopes[variable]
        if key not in scope:
            return _DEFER  # the engine's error (a missing key) has its own wording
        return _scalar(scope[key])

    return select


def _has(variable: str, key: str) -> Shortcut:
    def has(scopes: Scopes) -> Any:
        return key in scopes[variable]

    return has


def _junction(left: Shortcut, right: Shortcut, decides: bool) -> Shortcut:
    """``&&`` (``decides`` False) or ``||`` (True): a left side equal to ``decides`` is the
    answer whatever the right side is, an error included, as in CEL; a left side that is not
    a bool is the engine's to judge (CEL's ``error && false`` is false)."""
    passes = not decides

    def junction(scopes: Scopes) -> Any:
        first = left(scopes)
        if first is decides:
            return decides
        if first is not passes:
            return _DEFER
        second = right(scopes)
        return second if type(second) is bool else _DEFER

    return junction


def _negation(operand: Shortcut) -> Shortcut:
    def negation(scopes: Scopes) -> Any:
        value = operand(scopes)
        return (not value) if type(value) is bool else _DEFER

    return negation


_ORDER: Final[dict[str, Callable[[Any, Any], bool]]] = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def _compare(op: str, left: Shortcut, right: Shortcut) -> Shortcut:
    if op in ("==", "!="):
        negate = op == "!="

        def equality(scopes: Scopes) -> Any:
            a = left(scopes)
            if a is _DEFER:
                return _DEFER
            b = right(scopes)
            if b is _DEFER or type(a) is not type(b):
                return _DEFER  # across types the engines differ: theirs to say
            return (a != b) if negate else (a == b)

        return equality
    order = _ORDER[op]

    def ordering(scopes: Scopes) -> Any:
        a = left(scopes)
        if a is _DEFER:
            return _DEFER
        b = right(scopes)
        kind = type(a)
        if b is _DEFER or kind is not type(b) or kind is bool:
            return _DEFER
        return order(a, b)  # ints by value, strings by code point (as UTF-8 bytes order)

    return ordering


def _arithmetic(subtract: bool, left: Shortcut, right: Shortcut) -> Shortcut:
    def arithmetic(scopes: Scopes) -> Any:
        a = left(scopes)
        if type(a) is not int:
            return _DEFER
        b = right(scopes)
        if type(b) is not int:
            return _DEFER
        value = a - b if subtract else a + b
        return value if _INT64_MIN <= value < _INT64_END else _DEFER  # overflow: an error

    return arithmetic


def _to_int(operand: Shortcut) -> Shortcut:
    def to_int(scopes: Scopes) -> Any:
        value = operand(scopes)
        kind = type(value)
        if kind is int:
            return value
        if kind is str and _INT_TEXT.fullmatch(value):
            number = int(value)
            return number if _INT64_MIN <= number < _INT64_END else _DEFER
        return _DEFER

    return to_int


class _ShortcutProgram(Program):
    """An engine's program with a shortcut in front: the shortcut's answer when it has one."""

    __slots__ = ("_program", "_shortcut")

    def __init__(self, engine: Engine, source: str, program: Program, shortcut: Answer) -> None:
        super().__init__(engine, source, program.check_error)
        self._program = program
        self._shortcut = shortcut

    def evaluate(self, activation: Activation) -> JsonValue:
        if activation._engine is self._engine:
            value = self._shortcut(activation)
            if value is not _DEFER:
                return value  # type: ignore[no-any-return]
        return self._program.evaluate(activation)


# --------------------------------------------------------------------------- choosing

_ENGINE_CLASSES: Final[dict[str, type[Engine]]] = {
    CEL_EXPR_PYTHON: _CelExprEngine,
    CEL_PYTHON: _CelPythonEngine,
}
_IMPORT_NAMES: Final = {CEL_EXPR_PYTHON: "cel_expr_python.cel", CEL_PYTHON: "celpy"}
_defaults: dict[str, Engine] = {}  # by the value of MECLAW_CEL_ENGINE, "" when unset


def _importable(name: str) -> bool:
    import importlib

    try:
        importlib.import_module(_IMPORT_NAMES[name])
    except ImportError:
        return False
    return True


def available_engines() -> list[str]:
    """Names of the engines that import here, fastest first."""
    return [name for name in ENGINE_NAMES if _importable(name)]


def make_engine(name: str, variables: Sequence[str] = DEFAULT_VARIABLES) -> Engine:
    """A new engine by name, with its own cache; raises :class:`EngineUnavailableError`."""
    engine_class = _ENGINE_CLASSES.get(name)
    if engine_class is None:
        raise EngineUnavailableError(
            f"unknown CEL engine {name!r}; choose one of {', '.join(ENGINE_NAMES)}"
        )
    try:
        return engine_class(variables)
    except ImportError as exc:
        raise EngineUnavailableError(f"CEL engine {name!r} cannot be imported: {exc}") from exc


def default_engine() -> Engine:
    """The process-wide engine for ``context`` and ``hop``.

    cel-expr-python when it imports, else cel-python; ``MECLAW_CEL_ENGINE`` forces one.
    The variable is read on every call (a dict lookup) so tests and restarts can switch.
    """
    forced = os.environ.get(ENGINE_ENV_VAR, "").strip()
    engine = _defaults.get(forced)
    if engine is not None:
        return engine
    if not forced:
        engine = make_engine(CEL_EXPR_PYTHON if _importable(CEL_EXPR_PYTHON) else CEL_PYTHON)
    elif forced not in _ENGINE_CLASSES:
        raise EngineUnavailableError(
            f"{ENGINE_ENV_VAR}={forced!r} is not a CEL engine; "
            f"set it to one of {', '.join(ENGINE_NAMES)} or unset it"
        )
    else:
        try:
            engine = make_engine(forced)
        except EngineUnavailableError as exc:
            raise EngineUnavailableError(
                f"{ENGINE_ENV_VAR}={forced!r}, but {exc}; engines available here: "
                f"{', '.join(available_engines()) or 'none'} (or unset {ENGINE_ENV_VAR})"
            ) from exc
    _defaults[forced] = engine
    return engine
