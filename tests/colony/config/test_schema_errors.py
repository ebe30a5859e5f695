"""Pydantic's errors as diagnostics: no Python leaks into a message a user reads."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from cells.code.params import CodeParams
from cells.proxy.params import ProxyParams
from cells.store.params import StoreParams
from colony.config.schema_errors import diagnostics_from

PYTHON_LEAKS = re.compile(r"Value error|Assertion failed|\bNone\b|\bTrue\b|\bFalse\b|!r\}")


class _Checked(BaseModel):
    model_config = ConfigDict(strict=True)

    name: str = "x"
    mode: str = "a"
    flag: bool = False

    @field_validator("name")
    @classmethod
    def _plain(cls, value: str) -> str:
        if value == "bad":
            raise ValueError("name may not be 'bad'")
        return value

    @field_validator("mode")
    @classmethod
    def _asserted(cls, value: str) -> str:
        assert value != "z", "mode z is not allowed"
        return value


def messages(model: type[BaseModel], value: Any) -> list[str]:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(value)
    return [f"{d.message} {d.hint or ''}" for d in diagnostics_from(caught.value, model, file="f")]


@pytest.mark.parametrize(
    ("model", "value"),
    [
        (_Checked, {"name": "bad"}),
        (_Checked, {"mode": "z"}),
        (_Checked, {"flag": None}),
        (CodeParams, {"runner": None, "script_inline": "x"}),
        (CodeParams, {"runner": True, "script_inline": "x"}),
        (CodeParams, {"script_inline": "x", "external_timeout_ms": -1}),
        (ProxyParams, {"bot_token": "t", "emit_to": "/x", "base_url": "ftp://h"}),
        (StoreParams, {"schema": {"sqlite_x": {"c": "text"}}}),
        (StoreParams, {"schema": {"t": {"c": None}}}),
    ],
)
def test_no_pydantic_prefix_or_python_value_reaches_a_config_message(
    model: type[BaseModel], value: Any
) -> None:
    for text in messages(model, value):
        assert not PYTHON_LEAKS.search(text), text


def test_a_validator_message_is_kept_whole_without_its_prefix() -> None:
    [text] = messages(_Checked, {"name": "bad"})
    assert text.startswith("name may not be 'bad'")


def test_a_literal_mismatch_shows_the_value_as_json() -> None:
    [text] = messages(CodeParams, {"runner": None, "script_inline": "x"})
    assert "got null" in text
