from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from colony.config.substitute import (
    EnvFileError,
    Variables,
    parse_env_file,
    substitute,
)


def subst(value: object, file: dict[str, str] | None = None, environ: dict[str, str] | None = None):
    return substitute(value, Variables(file or {}, environ or {}))


def test_a_plain_variable_is_replaced_from_the_env_file() -> None:
    result = subst({"k": "model=${MODEL}"}, {"MODEL": "small"})
    assert result.value == {"k": "model=small"}
    assert result.problems == []


def test_an_exported_variable_wins_over_the_env_file() -> None:
    # As with python-dotenv and docker compose: what the shell exported overrides the file.
    assert subst("${A}", {"A": "file"}, {"A": "env"}).value == "env"
    assert subst("${A}", {"A": "file"}, {"A": ""}).value == ""  # exported empty is a value


def test_the_env_file_supplies_variables_the_environment_lacks() -> None:
    assert subst("${A}", {"A": "file"}, {}).value == "file"
    assert subst("${A}", {}, {"A": "env"}).value == "env"


@pytest.mark.parametrize(
    ("file", "expected"), [({}, "fallback"), ({"A": ""}, "fallback"), ({"A": "set"}, "set")]
)
def test_a_default_is_used_when_the_variable_is_unset_or_empty(
    file: dict[str, str], expected: str
) -> None:
    assert subst("${A:-fallback}", file).value == expected


def test_an_empty_value_is_a_value_not_a_missing_variable() -> None:
    result = subst("[${A}]", {"A": ""})
    assert result.value == "[]"
    assert result.problems == []


def test_a_doubled_dollar_writes_the_token_literally() -> None:
    result = subst("$${NOT_A_VAR} and $${X:-y}")
    assert result.value == "${NOT_A_VAR} and ${X:-y}"
    assert result.problems == []
    assert result.substituted_paths == set()


def test_a_lone_dollar_is_literal() -> None:
    assert subst("costs $5, $ alone, trailing $").value == "costs $5, $ alone, trailing $"


@pytest.mark.parametrize(
    "token",
    ["${V:=x}", "${V:?msg}", "${V:+x}", "${V-x}", "${V+x}", "${V?}", "${V=x}", "${uuid7:label}"],
)
def test_shell_forms_other_than_the_default_are_refused(token: str) -> None:
    result = subst({"k": token}, {"V": "1"})
    assert [(p.code, p.path, p.token) for p in result.problems] == [
        ("unsupported_substitution", ("k",), token)
    ]


def test_an_unterminated_token_is_an_error() -> None:
    result = subst(["ok", "${OPEN"], {"OPEN": "x"})
    assert [(p.code, p.path) for p in result.problems] == [("unterminated_substitution", (1,))]
    assert result.value == ["ok", "${OPEN"]


def test_a_missing_variable_is_reported_with_its_json_path() -> None:
    result = subst({"params": {"keys": ["x", "${API_KEY}"]}})
    [problem] = result.problems
    assert problem.code == "env_var_missing"
    assert problem.path == ("params", "keys", 1)
    assert problem.token == "${API_KEY}"


def test_a_context_token_of_a_template_is_a_missing_variable_in_a_live_tree() -> None:
    [problem] = subst("${ctx.user}").problems
    assert problem.code == "env_var_missing"


def test_every_problem_of_a_document_is_reported_not_just_the_first() -> None:
    result = subst({"a": "${X}", "b": "${Y:=1}", "c": ["${Z}"]})
    assert sorted(p.code for p in result.problems) == [
        "env_var_missing",
        "env_var_missing",
        "unsupported_substitution",
    ]


def test_keys_and_non_string_values_are_never_substituted() -> None:
    doc = {"${KEY}": 1, "n": 2, "b": True, "z": None}
    assert subst(doc, {"KEY": "k"}).value == doc


def test_paths_of_substituted_values_are_remembered_so_they_are_never_echoed() -> None:
    result = subst({"a": "${S}", "b": "plain", "c": "$${S}"}, {"S": "secret"})
    assert result.substituted_paths == {("a",)}


def test_the_env_file_skips_comments_and_blank_lines_and_strips_one_pair_of_quotes() -> None:
    text = '# comment\n\n  A = 1 \nB="two words"\nC=""\nD="\nE=x=y\n'
    assert parse_env_file(text) == {"A": "1", "B": "two words", "C": "", "D": '"', "E": "x=y"}


def test_a_line_without_an_equals_sign_is_an_error_naming_its_line() -> None:
    with pytest.raises(EnvFileError, match=r"^line 3: no '=' separator"):
        parse_env_file("A=1\n\nBROKEN\n")


@given(st.text())
def test_text_without_a_dollar_sign_is_never_changed(text: str) -> None:
    if "$" in text:
        text = text.replace("$", "")
    assert subst(text).value == text


@given(
    st.recursive(
        st.text(alphabet="${}:-AB=x ", max_size=12),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
        ),
        max_leaves=8,
    )
)
def test_substitution_never_raises_on_any_document(doc: object) -> None:
    result = subst(doc, {"A": "1"}, {"B": ""})
    for problem in result.problems:
        assert problem.code in {
            "env_var_missing",
            "unsupported_substitution",
            "unterminated_substitution",
        }
