"""CEL expressions: conformance, routing rules, errors, engine choice — on both engines."""

from __future__ import annotations

import logging
import math
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from colony import expressions
from colony.expressions import (
    ENGINE_ENV_VAR,
    ENGINE_NAMES,
    Engine,
    EngineUnavailableError,
    EvaluationError,
    ExpressionSyntaxError,
    JsonValue,
    Program,
    available_engines,
    default_engine,
    make_engine,
)

AVAILABLE = available_engines()
ENGINES = [
    pytest.param(
        name,
        id=name,
        marks=pytest.mark.skipif(
            name not in AVAILABLE, reason=f"{name} does not import on this platform"
        ),
    )
    for name in ENGINE_NAMES
]
CEL_EXPR_ONLY = pytest.mark.skipif(
    "cel-expr-python" not in AVAILABLE, reason="cel-expr-python does not import here"
)


@cache
def engine_for(name: str, extra: tuple[str, ...] = ()) -> Engine:
    """One engine per name and variable set, shared by the tests (as in the daemon)."""
    return make_engine(name, ("context", "hop", *extra))


# Built now, not inside a Hypothesis test: cel-python raises the recursion limit when its
# first environment is created, and Hypothesis warns about limits changed mid-test.
for _name in AVAILABLE:
    engine_for(_name)


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> Engine:
    name: str = request.param
    return engine_for(name)


def run(engine: Engine, source: str, **values: JsonValue) -> JsonValue:
    return engine.compile(source).evaluate(engine.activation(values))


def error_of(engine: Engine, source: str, **values: JsonValue) -> EvaluationError:
    with pytest.raises(EvaluationError) as caught:
        run(engine, source, **values)
    return caught.value


# ------------------------------------------------------------------ conformance

CASES: list[tuple[str, str, dict[str, JsonValue], tuple[JsonValue, ...]]] = [
    ("missing key -> error", "hop.route == 'x'", {"hop": {}}, ("err",)),
    ("has() on missing -> false", "has(hop.route)", {"hop": {}}, ("val", False)),
    ("true || error", "true || hop.route == 'x'", {"hop": {}}, ("val", True)),
    ("error || true", "hop.route == 'x' || true", {"hop": {}}, ("val", True)),
    ("false && error", "false && hop.route == 'x'", {"hop": {}}, ("val", False)),
    ("error && false", "hop.route == 'x' && false", {"hop": {}}, ("val", False)),
    ("int('3')", "int('3')", {}, ("val", 3)),
    ("int('abc') -> error", "int('abc')", {}, ("err",)),
    ("string concat", "'a' + hop.s + 'c'", {"hop": {"s": "b"}}, ("val", "abc")),
    ("overflow literal", "9223372036854775807 + 1", {}, ("err",)),
    ("overflow var", "x + 1", {"x": 9223372036854775807}, ("err",)),
    ("overflow mul", "x * 2", {"x": 9223372036854775807}, ("err",)),
    ("int() out of range", "int('9223372036854775808')", {}, ("err",)),
    ("divide by zero", "1 / x", {"x": 0}, ("err",)),
    ("no overload string+int", "'a' + x", {"x": 1}, ("err",)),
    ("no mixed arithmetic", "x + 1.5", {"x": 1}, ("err",)),
    ("in on map", "'route' in hop", {"hop": {}}, ("val", False)),
    ("size counts code points", "size(hop.s)", {"hop": {"s": "héllo"}}, ("val", 5)),
    ("ternary", "x > 1 ? 'big' : 'small'", {"x": 3}, ("val", "big")),
    (
        "exists macro",
        "hop.items.exists(i, i == 2)",
        {"hop": {"items": [1, 2, 3]}},
        ("val", True),
    ),
    ("startsWith", "hop.s.startsWith('he')", {"hop": {"s": "hello"}}, ("val", True)),
    ("heterogeneous equality", "x == 1.0", {"x": 1}, ("val", True)),
    ("undeclared variable", "nosuchvar == 1", {}, ("err",)),
]


@pytest.mark.parametrize("engine_name", ENGINES)
@pytest.mark.parametrize(
    ("source", "values", "expected"),
    [pytest.param(source, values, expected, id=case) for case, source, values, expected in CASES],
)
def test_each_engine_agrees_with_the_cel_spec_on_the_conformance_cases(
    engine_name: str,
    source: str,
    values: dict[str, JsonValue],
    expected: tuple[JsonValue, ...],
) -> None:
    engine = engine_for(engine_name, tuple(sorted(set(values) - {"context", "hop"})))
    if expected[0] == "err":
        with pytest.raises((ExpressionSyntaxError, EvaluationError)):
            engine.compile(source).evaluate(engine.activation(values))
        return
    result = engine.compile(source).evaluate(engine.activation(values))
    assert result == expected[1]
    assert type(result) is type(expected[1])  # True is a bool, 3 an int and not a bool


# ------------------------------------------------------------------ routing rules


@pytest.mark.parametrize(
    ("source", "hop"),
    [("hop.tool_name == 'web_search'", {}), ("hop.a.b", {"a": {}}), ("hop['k'] == 1", {})],
)
def test_a_key_the_message_does_not_carry_is_a_missing_key_error(
    engine: Engine, source: str, hop: JsonValue
) -> None:
    error = error_of(engine, source, hop=hop)
    assert error.missing_key
    assert error.reason


@pytest.mark.parametrize(
    ("source", "values"),
    [
        ("hop.n > 'x'", {"hop": {"n": 7}}),
        ("hopp.x == 1", {"hop": {}}),
        ("int('abc')", {}),
        ("1 / 0", {}),
    ],
)
def test_every_other_evaluation_error_is_not_a_missing_key_error(
    engine: Engine, source: str, values: dict[str, JsonValue]
) -> None:
    assert not error_of(engine, source, **values).missing_key


def test_has_guards_a_missing_key_without_any_error(engine: Engine) -> None:
    assert run(engine, "has(hop.k) && hop.k == 'v'", hop={}) is False
    assert run(engine, "has(hop.k) && hop.k == 'v'", hop={"k": "v"}) is True


@pytest.mark.parametrize("iteration", [1, "1"])
def test_int_reads_an_iteration_count_stored_as_int_or_as_string(
    engine: Engine, iteration: JsonValue
) -> None:
    assert run(engine, "int(context.iter) + 1", context={"iter": iteration}) == 2


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("'route' in hop", True),
        ("'nope' in hop", False),
        ("hop.route.contains('ir')", True),
        ("hop.route.startsWith('fi')", True),
        ("hop.route.endsWith('re')", True),
        ("hop.n > 3 ? 'big' : 'small'", "big"),
        ("hop.route in ['fire', 'water']", True),
        ("hop.n in [1, 2]", False),
        ("size(hop.items) == 2 && hop.items[1] == 'b'", True),
        ("hop.n >= 5.5 && hop.n < 10u", True),
        ("hop.n != 7.0", False),
    ],
)
def test_the_operators_routing_conditions_use_work(
    engine: Engine, source: str, expected: JsonValue
) -> None:
    hop: JsonValue = {"route": "fire", "n": 7, "items": ["a", "b"]}
    result = run(engine, source, hop=hop)
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("hop.b == 1.0", False),
        ("hop.b == 1", False),
        ("hop.b != 1", True),
        ("hop.n == null", False),
        ("hop.n != null", True),
        ("hop.b == true", True),
    ],
)
def test_equality_across_kinds_is_false_not_an_error(
    engine: Engine, source: str, expected: bool
) -> None:
    # CEL's heterogeneous equality: a bool is never a number, and values of different kinds
    # are simply unequal. cel-python alone would say true == 1 or raise on 1 == null.
    assert run(engine, source, hop={"b": True, "n": 1}) is expected


def test_a_map_result_becomes_plain_json_compatible_python(engine: Engine) -> None:
    result = run(engine, "{'a': [1, 2.5, null, 'x', true], 'b': {'c': hop.n}}", hop={"n": 3})
    assert result == {"a": [1, 2.5, None, "x", True], "b": {"c": 3}}
    assert type(result) is dict
    assert isinstance(result["a"], list)
    assert [type(item) for item in result["a"]] == [int, float, type(None), str, bool]


def test_non_string_map_keys_are_stringified(engine: Engine) -> None:
    assert run(engine, "{1: 'one', 2: 'two'}") == {"1": "one", "2": "two"}
    assert run(engine, "{3u: 'three'}") == {"3": "three"}
    assert run(engine, "{true: 'yes', false: 'no'}") == {"true": "yes", "false": "no"}


@pytest.mark.parametrize("source", ["0.0 / 0.0", "1.0 / 0.0", "-1.0 / 0.0", "[1.0 / 0.0]"])
def test_nan_and_infinite_results_become_none(engine: Engine, source: str) -> None:
    result = run(engine, source)
    assert result is None or result == [None]


def test_bytes_become_none_and_durations_and_timestamps_their_cel_text(engine: Engine) -> None:
    source = "[b'ab', duration('1.5s'), timestamp('2020-01-01T00:00:00Z'), 5u]"
    assert run(engine, source) == [None, "1.5s", "2020-01-01T00:00:00Z", 5]


def test_integers_beyond_int64_are_uint_and_beyond_uint64_an_error_when_read(
    engine: Engine,
) -> None:
    assert run(engine, "hop.big", hop={"big": 2**63}) == 2**63
    activation = engine.activation({"hop": {"big": 2**64, "ok": 1}})  # must not raise
    assert engine.compile("true").evaluate(activation) is True
    with pytest.raises(EvaluationError):
        engine.compile("hop.ok").evaluate(activation)


def test_one_activation_serves_several_programs(engine: Engine) -> None:
    activation = engine.activation({"hop": {"route": "fire"}, "context": {"iter": "3"}})
    sources = ["hop.route == 'fire'", "int(context.iter) < 12", "hop.route == 'water'"]
    assert [engine.compile(s).evaluate(activation) for s in sources] == [True, True, False]


def test_an_activation_from_another_engine_is_refused(engine: Engine) -> None:
    other = make_engine(engine.name)
    with pytest.raises(ValueError, match="different engine"):
        engine.compile("true").evaluate(other.activation({}))


def test_errors_are_reported_by_exceptions_not_by_log_records(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        for source in ["hop.x", "1 / 0", "'a' + 1", "int('abc')", "nosuchvar"]:
            with pytest.raises(EvaluationError):
                run(engine, source, hop={})
    assert caplog.records == []


# ------------------------------------------------------------------ syntax errors


def test_a_syntax_error_carries_a_one_based_position_and_a_clean_reason(engine: Engine) -> None:
    source = "hop.route == 'x' &&"
    with pytest.raises(ExpressionSyntaxError) as caught:
        engine.compile(source)
    error = caught.value
    assert (error.source, error.line) == (source, 1)
    assert error.column >= len("hop.route == 'x' &")  # at the '&&' or just after the end
    assert error.column <= len(source) + 1
    assert error.reason
    assert source not in error.reason
    assert "\n" not in error.reason
    assert "INVALID_ARGUMENT" not in error.reason
    assert "<input>" not in error.reason
    assert str(error) == f"{error.reason} at line 1, column {error.column}"


def test_caret_shows_the_source_line_with_a_caret_under_the_column(engine: Engine) -> None:
    with pytest.raises(ExpressionSyntaxError) as caught:
        engine.compile("1 +* 2")
    assert (caught.value.line, caught.value.column) == (1, 4)
    assert caught.value.caret() == "1 +* 2\n   ^"


def test_a_syntax_error_on_a_later_line_reports_that_line(engine: Engine) -> None:
    with pytest.raises(ExpressionSyntaxError) as caught:
        engine.compile("hop.a == 1 &&\n  hop.b +* 2")
    assert (caught.value.line, caught.value.column) == (2, 10)
    assert caught.value.caret() == "  hop.b +* 2\n         ^"


def test_caret_keeps_tabs_so_it_lines_up() -> None:
    error = ExpressionSyntaxError("\ta +* b", 1, 5, "Syntax error")
    assert error.caret() == "\ta +* b\n\t   ^"


def test_caret_copes_with_a_column_past_the_end() -> None:
    assert ExpressionSyntaxError("ab", 1, 4, "x").caret() == "ab\n   ^"


# ------------------------------------------------------------------ type checking


@CEL_EXPR_ONLY
@pytest.mark.parametrize("source", ["hopp.x == 1", "'a' + 1"])
def test_an_expression_that_parses_but_does_not_type_check_still_runs_and_errors(
    source: str,
) -> None:
    engine = engine_for("cel-expr-python")
    program = engine.compile(source)
    assert program.check_error
    assert "line 1, column" in program.check_error
    with pytest.raises(EvaluationError) as caught:
        program.evaluate(engine.activation({"hop": {}}))
    assert not caught.value.missing_key


def test_a_well_typed_expression_has_no_check_error(engine: Engine) -> None:
    assert engine.compile("has(hop.route) && hop.route == 'fire'").check_error is None


def test_cel_python_never_reports_check_errors() -> None:
    assert engine_for("cel-python").compile("hopp.x == 1").check_error is None


# ------------------------------------------------------------------ caching


def test_compiling_a_source_twice_returns_the_same_program(engine: Engine) -> None:
    first = engine.compile("hop.route == 'cached'")
    assert isinstance(first, Program)
    assert engine.compile("hop.route == 'cached'") is first


def test_a_cached_syntax_error_is_raised_again_with_the_same_details(engine: Engine) -> None:
    raised = []
    for _ in range(2):
        with pytest.raises(ExpressionSyntaxError) as caught:
            engine.compile("a +* b")
        raised.append(caught.value)
    assert raised[0] is not raised[1]
    assert str(raised[0]) == str(raised[1])


# ------------------------------------------------------------------ engine choice


def test_available_engines_always_include_the_pure_python_one() -> None:
    assert "cel-python" in AVAILABLE
    assert set(AVAILABLE) <= set(ENGINE_NAMES)


def test_default_engine_prefers_cel_expr_python_when_it_imports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(expressions, "_defaults", {})
    monkeypatch.delenv(ENGINE_ENV_VAR, raising=False)
    engine = default_engine()
    assert engine.name == AVAILABLE[0]
    assert engine.variables == ("context", "hop")
    assert default_engine() is engine


@pytest.mark.parametrize("engine_name", ENGINES)
def test_the_environment_variable_forces_an_engine(
    monkeypatch: pytest.MonkeyPatch, engine_name: str
) -> None:
    monkeypatch.setattr(expressions, "_defaults", {})
    monkeypatch.setenv(ENGINE_ENV_VAR, engine_name)
    assert default_engine().name == engine_name


def test_an_unknown_engine_in_the_environment_variable_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(expressions, "_defaults", {})
    monkeypatch.setenv(ENGINE_ENV_VAR, "cel-go")
    with pytest.raises(EngineUnavailableError, match=ENGINE_ENV_VAR) as caught:
        default_engine()
    assert all(name in str(caught.value) for name in ENGINE_NAMES)


def test_a_forced_engine_that_does_not_import_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def without_wheel(variables: object) -> Engine:
        raise ImportError("no wheel for this platform")

    monkeypatch.setattr(expressions, "_defaults", {})
    monkeypatch.setitem(expressions._ENGINE_CLASSES, "cel-expr-python", without_wheel)
    monkeypatch.setenv(ENGINE_ENV_VAR, "cel-expr-python")
    with pytest.raises(EngineUnavailableError, match=ENGINE_ENV_VAR) as caught:
        default_engine()
    assert "no wheel" in str(caught.value)


def test_make_engine_refuses_an_unknown_name() -> None:
    with pytest.raises(EngineUnavailableError, match="cel-python"):
        make_engine("cel-go")


def test_declared_variables_other_than_context_and_hop_hold_any_value(engine: Engine) -> None:
    custom = make_engine(engine.name, ("context", "hop", "n"))
    program = custom.compile("n.size() > 1 || n == 3")
    assert program.check_error is None  # n is dyn: neither a map nor a string to the checker
    values: list[JsonValue] = [3, "abc", [1, 2]]
    assert [program.evaluate(custom.activation({"n": value})) for value in values] == [
        True,
        True,
        True,
    ]


# ------------------------------------------------------------------ properties

json_scalars = (
    st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats()
    | st.text(max_size=8)
    | st.booleans()
    | st.none()
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
messages = st.dictionaries(
    st.sampled_from(["route", "from", "n", "items"]) | st.text(max_size=6),
    json_values,
    max_size=5,
)


@pytest.mark.parametrize("engine_name", ENGINES)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hop=messages, context=messages, route=st.none() | json_values)
def test_a_guarded_condition_on_any_message_is_a_bool_or_an_evaluation_error(
    engine_name: str, hop: dict[str, JsonValue], context: dict[str, JsonValue], route: JsonValue
) -> None:
    if route is not None:
        hop = {**hop, "route": route}
    engine = engine_for(engine_name)
    program = engine.compile("has(hop.route) && hop.route == 'fire'")
    try:
        result = program.evaluate(engine.activation({"hop": hop, "context": context}))
    except EvaluationError:
        return
    assert type(result) is bool
    assert result == (hop.get("route") == "fire")


@pytest.mark.parametrize("engine_name", ENGINES)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    source=st.lists(
        st.characters(codec="ascii", min_codepoint=32, max_codepoint=126)
        | st.sampled_from(["hop.", "context.", "has(", " && ", " == ", "'", "\n", "\t", "é"]),
        max_size=20,
    ).map("".join)
)
def test_compiling_any_text_gives_a_program_or_a_syntax_error(
    engine_name: str, source: str
) -> None:
    engine = engine_for(engine_name)
    compiled: Program | ExpressionSyntaxError
    try:
        compiled = engine.compile(source)
    except ExpressionSyntaxError as error:
        compiled = error
    if isinstance(compiled, ExpressionSyntaxError):
        assert compiled.line >= 1
        assert compiled.column >= 1
        assert compiled.caret().count("\n") == 1
        return
    program = compiled
    try:
        result = program.evaluate(engine.activation({"hop": {}, "context": {}}))
    except EvaluationError:
        return
    assert not isinstance(result, float) or math.isfinite(result)


# -- shortcuts: the common conditions answered without the engine, never differently ---------

SHORTCUT_SOURCES = [
    "has(hop.route) && hop.route == 'fire'",
    "has(hop.route) && hop.route != 'fire'",
    'has(context.store_origin) && context.store_origin == "user"',
    "hop.route == 'fire'",
    "has(hop.route) && hop.route == 'fire' && int(context.iter) < 12",
    "int(context.iter) + 1",
    "int(context.iter) - 1 >= 0",
    "'collector'",
    "!has(hop.x) || hop.x == true",
    "(hop.n < 3 || hop.n > 7) && !(hop.s <= 'm')",
    "hop.n + 9223372036854775807",
    "int(hop.s) == 5",
]
_keys = st.sampled_from(["route", "iter", "store_origin", "x", "n", "s"])
_values = (
    st.sampled_from(
        [
            "fire",
            "user",
            "0",
            "5",
            "-0",
            "007",
            "12",
            "m",
            "\ud800",
            "x y",
            "9223372036854775808",
            "-9223372036854775809",
            "99999999999999999999",
        ]
    )
    | st.integers(-(2**64), 2**65)
    | st.booleans()
    | st.none()
    | st.floats()
    | st.lists(st.integers(), max_size=2)
    | st.just(b"raw")
)


def _answer(program: Program, activation: expressions.Activation) -> object:
    try:
        return ("value", program.evaluate(activation))
    except EvaluationError as exc:
        return ("error", exc.reason, exc.missing_key)


def test_the_usual_conditions_and_modifiers_have_a_shortcut(engine: Engine) -> None:
    for source in SHORTCUT_SOURCES:
        assert isinstance(engine.compile(source), expressions._ShortcutProgram), source
    for source in ["hop.a.b == 'x'", "size(hop.route) > 1", "hop.route in ['a']", "1.5 < 2"]:
        assert not isinstance(engine.compile(source), expressions._ShortcutProgram), source


@pytest.mark.parametrize("engine_name", ENGINES)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    source=st.sampled_from(SHORTCUT_SOURCES),
    context=st.dictionaries(_keys, _values, max_size=4),
    hop=st.dictionaries(_keys, _values, max_size=4),
)
def test_a_shortcut_answers_exactly_as_the_engine_does(
    engine_name: str, source: str, context: dict[str, JsonValue], hop: dict[str, JsonValue]
) -> None:
    engine = engine_for(engine_name)
    program = engine.compile(source)
    assert isinstance(program, expressions._ShortcutProgram)
    values: dict[str, JsonValue] = {"context": context, "hop": hop}
    fast = _answer(program, engine.activation(values))
    slow = _answer(program._program, engine.activation(values))
    assert fast == slow


# Sources drawn from the shortcut grammar itself (and a little past it), so a form the fixed
# list above misses is still compared with the engine.
_names = st.sampled_from(["route", "iter", "n", "s", "x"])
_selection = st.builds(lambda v, k: f"{v}.{k}", st.sampled_from(["hop", "context"]), _names)
_literal = st.sampled_from(["0", "1", "7", "9223372036854775807", "'fire'", '"5"', "''", "true"])
_leaf = _selection | _literal | _selection.map(lambda s: f"has({s})")


def _grown(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    binary = st.sampled_from(["&&", "||", "==", "!=", "<", "<=", ">", ">=", "+", "-"])
    return (
        st.builds(lambda a, op, b: f"{a} {op} {b}", inner, binary, inner)
        | inner.map(lambda a: f"!{a}")
        | inner.map(lambda a: f"({a})")
        | inner.map(lambda a: f"int({a})")
    )


_relation = st.builds(
    lambda a, op, b: f"{a} {op} {b}",
    _leaf,
    st.sampled_from(["==", "!=", "<", "<=", ">", ">=", "+", "-"]),
    _leaf,
)
_sources = _relation | st.recursive(_leaf | _relation, _grown, max_leaves=6)
_usual = st.integers(-3, 10) | st.sampled_from(["fire", "5", "-0", "007", "a", ""]) | st.booleans()
_scope = st.dictionaries(_names, _usual | _usual | _values, min_size=3, max_size=5)


@pytest.mark.parametrize("engine_name", ENGINES)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    source=_sources,
    context=_scope,
    hop=_scope,
)
def test_any_source_in_the_shortcut_grammar_answers_exactly_as_the_engine(
    engine_name: str, source: str, context: dict[str, JsonValue], hop: dict[str, JsonValue]
) -> None:
    engine = engine_for(engine_name)
    try:
        program = engine.compile(source)
    except ExpressionSyntaxError:
        return
    if not isinstance(program, expressions._ShortcutProgram):
        return
    values: dict[str, JsonValue] = {"context": context, "hop": hop}
    fast = _answer(program, engine.activation(values))
    slow = _answer(program._program, engine.activation(values))
    assert fast == slow, source
