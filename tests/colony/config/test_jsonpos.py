"""Locating JSON paths in text: a realistic config, edge cases, then random documents."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from colony.config.jsonpos import Path, Positions, locate

CONFIG = """\
{
  "cell": {"type": "hive"},
  "params": {
    "graph": {
      "edges": [
        {"from": "./a", "to": "./b"},
        {"from": "./b", "to": "./c", "conditon": "hop.x == 1"}
      ]
    }
  }
}
"""


def where(text: str, line: int, needle: str) -> tuple[int, int]:
    """(line, column) of the first ``needle`` on 1-based ``line``, for readable asserts."""
    return line, text.splitlines()[line - 1].index(needle) + 1


def offset_of(text: str, position: tuple[int, int]) -> int:
    line, column = position
    lines = text.split("\n")
    return sum(len(earlier) + 1 for earlier in lines[: line - 1]) + column - 1


def test_a_misspelt_key_is_found_on_its_own_line_and_column() -> None:
    path = ("params", "graph", "edges", 1, "conditon")
    assert locate(CONFIG, path) == where(CONFIG, 7, '"conditon"')


def test_an_array_index_points_at_the_elements_first_character() -> None:
    assert locate(CONFIG, ("params", "graph", "edges", 1)) == where(CONFIG, 7, "{")
    assert locate(CONFIG, ("params", "graph", "edges", 0)) == where(CONFIG, 6, "{")


def test_a_missing_key_falls_back_to_the_key_of_the_object_lacking_it() -> None:
    assert locate(CONFIG, ("cell", "name")) == where(CONFIG, 2, '"cell"')
    assert locate(CONFIG, ("params", "graph", "nodes", 0)) == where(CONFIG, 4, '"graph"')
    assert locate(CONFIG, ("params", "graph", "edges", 1, "when")) == where(CONFIG, 7, "{")


def test_a_missing_top_level_key_falls_back_to_the_root_brace() -> None:
    assert locate(CONFIG, ("version",)) == (1, 1)
    assert locate('  \n {"a": 1}', ("b",)) == (2, 2)


def test_a_path_through_a_scalar_or_the_wrong_container_stops_at_its_last_real_step() -> None:
    assert locate(CONFIG, ("cell", "type", "deeper")) == where(CONFIG, 2, '"type"')
    assert locate(CONFIG, ("params", 0)) == where(CONFIG, 3, '"params"')
    assert locate(CONFIG, ("params", "graph", "edges", "0")) == where(CONFIG, 5, '"edges"')
    assert locate(CONFIG, ("params", "graph", "edges", 2)) == where(CONFIG, 5, '"edges"')
    assert locate(CONFIG, ("params", "graph", "edges", -1)) == where(CONFIG, 5, '"edges"')


def test_the_empty_path_is_the_first_non_blank_character() -> None:
    assert locate(CONFIG, ()) == (1, 1)
    assert locate("\n\n   [1]", ()) == (3, 4)
    assert locate(' \t"just a string"', ()) == (1, 3)
    assert locate("-1.5e3", ()) == (1, 1)


def test_keys_match_by_their_decoded_value() -> None:
    text = r'{"a\"b": 1, "\u00e9t\u00e9": {"x": 2}, "\ud834\udd1e": 3, "\/": 4}'
    assert locate(text, ('a"b',)) == (1, 2)
    assert locate(text, ("été", "x")) == (1, text.index('"x"') + 1)
    assert locate(text, ("𝄞",)) == (1, text.index(r'"\ud834') + 1)
    assert locate(text, ("/",)) == (1, text.index(r'"\/"') + 1)


def test_nested_arrays_are_indexed_at_every_level() -> None:
    text = '{"m": [[1, 2], [3, [4, {"deep": true}]]]}'
    assert locate(text, ("m", 1, 1, 1, "deep")) == (1, text.index('"deep"') + 1)
    assert locate(text, ("m", 1, 1, 0)) == (1, text.index("4") + 1)
    assert locate(text, ("m", 0, 1)) == (1, text.index("2") + 1)
    assert locate(text, ("m", 1, 0)) == (1, text.index("3") + 1)


def test_the_last_duplicate_key_wins_like_json_loads() -> None:
    text = '{"a": {"b": 1}, "a": {"c": 2}}'
    second_a = text.rindex('"a"') + 1
    assert locate(text, ("a",)) == (1, second_a)
    assert locate(text, ("a", "c")) == (1, text.index('"c"') + 1)
    # The earlier "a" had a "b", but json.loads keeps the later one, which has none.
    assert locate(text, ("a", "b")) == (1, second_a)


def test_columns_count_code_points_and_tabs_as_one() -> None:
    text = '{"ü😀": {\n\t"k": 1, "é": 2}}'
    assert locate(text, ("ü😀", "k")) == (2, 2)
    assert locate(text, ("ü😀", "é")) == (2, 10)


def test_windows_line_endings_do_not_shift_columns() -> None:
    text = '{\r\n  "a": {\r\n    "b": 1\r\n  }\r\n}\r\n'
    assert locate(text, ("a", "b")) == (3, 5)


def test_nonstandard_constants_that_json_loads_accepts_are_skipped() -> None:
    text = '{"x": [NaN, -Infinity, Infinity], "y": 1}'
    assert locate(text, ("y",)) == (1, text.index('"y"') + 1)
    assert locate(text, ("x", 1)) == (1, text.index("-Inf") + 1)


@pytest.mark.parametrize("text", ["", "   \n", "@", "}", "]", "tru", '"unterminated', "-", ",1"])
def test_text_that_never_starts_a_value_gives_none(text: str) -> None:
    assert locate(text, ()) is None
    assert locate(text, ("a", 0)) is None


@pytest.mark.parametrize(
    ("text", "path", "expected"),
    [
        ('{"a": }', ("a", "b"), (1, 2)),
        ('{"a": {"b": 1,,}', ("a", "b"), (1, 8)),
        ('{"a" 1}', ("a",), (1, 1)),
        ("[1, 2", (5,), (1, 1)),
        ('{"a": [1, }', ("a", 1), (1, 2)),
        ('{"a": "\x01"}', ("a",), (1, 2)),
        ("[}", (0,), (1, 1)),
    ],
)
def test_broken_json_keeps_the_best_match_found_before_the_damage(
    text: str, path: Path, expected: tuple[int, int]
) -> None:
    assert locate(text, path) == expected


def test_deep_nesting_is_skipped_without_recursion() -> None:
    depth = 50_000
    text = '{"deep": ' + "[" * depth + "]" * depth + ', "after": 1}'
    assert locate(text, ("after",)) == (1, text.index('"after"') + 1)
    assert locate(text, ("deep", 0, 0, 0)) == (1, text.index("[") + 4)


def test_a_large_document_is_scanned_in_linear_time() -> None:
    doc = {f"k{i}": {"list": list(range(20)), "s": "x\\y" * 5} for i in range(5_000)}
    text = json.dumps(doc, indent=2)
    last = len(doc) - 1
    # Megabytes of text: a quadratic scan would blow the time budget of the suite.
    assert locate(text, (f"k{last}", "list", 19)) is not None


# Random documents: every path that exists must land exactly on its key or element.
keys = st.text(max_size=6) | st.sampled_from(["", "a", "é", 'a"b', "\\", "\u2028", "😀"])
scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
documents = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=20,
)
dump_options = st.fixed_dictionaries(
    {"indent": st.none() | st.integers(0, 4), "ensure_ascii": st.booleans()}
)


def paths_in(doc: Any, prefix: Path = ()) -> Iterator[tuple[Path, Any]]:
    yield prefix, doc
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from paths_in(value, (*prefix, key))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            yield from paths_in(value, (*prefix, index))


def canonical(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True)


@settings(max_examples=300, deadline=None)
@given(documents, dump_options)
def test_every_existing_path_lands_on_its_key_or_element(doc: Any, options: Any) -> None:
    text = json.dumps(doc, **options)
    decoder = json.JSONDecoder()
    for path, value in paths_in(doc):
        position = locate(text, path)
        assert position is not None
        offset = offset_of(text, position)
        if path and isinstance(path[-1], str):
            assert text[offset] == '"'
            key, end = decoder.raw_decode(text, offset)
            assert key == path[-1]
            value_start = text.index(":", end) + 1
            while text[value_start] in " \t\n\r":
                value_start += 1
            found, _ = decoder.raw_decode(text, value_start)
        else:
            assert text[offset] == json.dumps(value, **options)[0]
            found, _ = decoder.raw_decode(text, offset)
        assert canonical(found) == canonical(value)


@settings(max_examples=150, deadline=None)
@given(documents, dump_options, st.data())
def test_truncated_text_never_raises(doc: Any, options: Any, data: st.DataObject) -> None:
    text = json.dumps(doc, **options)
    path, _ = data.draw(st.sampled_from(list(paths_in(doc))))
    # Also ask for a path that does not exist, to exercise the fallback on broken text.
    for cut in range(len(text) + 1):
        prefix = text[:cut]
        for asked in (path, (*path, "missing"), (*path, 0)):
            position = locate(prefix, asked)
            if cut == len(text):
                assert position is not None
            if position is not None:
                assert 0 <= offset_of(prefix, position) < len(prefix)


def _asked_of(doc: Any) -> list[Path]:
    """Every path of ``doc``, and for each one a key and an index that are not there."""
    return [
        asked
        for path, _ in paths_in(doc)
        for asked in (path, (*path, "missing"), (*path, 0), (*path, 7, "x"))
    ]


def _same_answers(text: str, asked: list[Path]) -> None:
    positions = Positions(text)
    for path in asked * 2:  # the second round is answered from the index
        assert positions.locate(path) == locate(text, path), path


def test_positions_answers_duplicate_keys_as_locate_does() -> None:
    text = '{"a": {"b": 1}, "a": {"c": [2, {"b": 3}]}, "a": 4, "d": {"a": {"b": 5}}}'
    asked: list[Path] = [("a",), ("a", "b"), ("a", "c", 1, "b"), ("d", "a", "b"), ("z",), ()]
    _same_answers(text, asked)
    _same_answers(text.replace(', "a": 4', ""), asked)


@settings(max_examples=200, deadline=None)
@given(documents, dump_options, st.data())
def test_positions_answers_every_path_as_locate_does(
    doc: Any, options: Any, data: st.DataObject
) -> None:
    text = json.dumps(doc, **options)
    cut = data.draw(st.integers(0, len(text)))
    asked = _asked_of(doc)
    _same_answers(text, asked)
    _same_answers(text[:cut], asked)  # broken text: the index steps aside


def test_positions_of_text_too_deep_to_index_are_still_answered() -> None:
    depth = 50_000
    text = '{"deep": ' + "[" * depth + "]" * depth + ', "after": 1}'
    _same_answers(text, [("after",), ("deep", 0, 0, 0), ("nothing",)])
