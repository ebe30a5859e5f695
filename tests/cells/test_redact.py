"""cells.redact: what a cell quotes loses the secrets it knows and the shapes of common ones."""

from __future__ import annotations

import pytest

from cells.redact import MARK, Redactor, looks_secret_key, safe_url, secret_values

KEY = "k3y-Zq81vT0pLmWx"


def test_a_known_secret_is_replaced_also_url_encoded_and_inside_longer_text() -> None:
    redactor = Redactor([KEY, "a/b c+d=", None, "", "abc"])
    text = f"refused {KEY}; as a query: ?k=a%2Fb%20c%2Bd%3D; short values stay: abc"
    assert redactor.known(text) == (
        f"refused {MARK}; as a query: ?k={MARK}; short values stay: abc"
    )


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("Authorization: Bearer abcDEF123456789", "Authorization: Bearer "),
        ("bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig123", "bearer "),
        ("Incorrect API key provided: sk-proj-AbCdEf0123456789", "Incorrect API key provided: "),
        ("token ghp_0123456789abcdefghijABCDEFGHIJ", "token "),
        ("xoxb-1234567890-abcdefghij", ""),
        ("id AKIAIOSFODNN7EXAMPLE here", "id "),
        ("key AIzaSyA-0123456789abcdefghijklmnopqrstu", "key "),
        ("bot 123456789:AAH-abcdefghijklmnopqrstuvwxyz012345", "bot "),
        ("postgres://app:hunter2hunter2@db.internal:5432/x", "postgres://app:"),
        (
            "GET https://x.test/s?q=cats&api_key=abc123secret&n=1",
            "GET https://x.test/s?q=cats&api_key=",
        ),
        ('{"error": {"access_token": "opaque-value"}}', '{"error": {"access_token": "'),
        ("password=correcthorse", "password="),
    ],
)
def test_secret_shapes_are_redacted_in_error_texts(text: str, kept: str) -> None:
    redacted = Redactor().text(text)
    assert MARK in redacted
    assert redacted.startswith(kept)
    for word in ("abcDEF123456789", "AbCdEf0123456789", "hunter2hunter2", "abc123secret"):
        assert word not in redacted


@pytest.mark.parametrize(
    "text",
    [
        "HTTP 404 Not Found: no such model gpt-5",
        '{"max_tokens": 100, "tokens_used": 12}',
        "bearer of bad news",
        "Basic information about keys",
        "KeyError: 'results'",
        "the token expired",
        "https://example.test/search?q=python+tokens",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert Redactor().text(text) == text


def test_a_url_is_quoted_without_its_password_or_query_values() -> None:
    assert safe_url("https://u:pw@api.test:8443/v1/models?key=abc&x=1#frag") == (
        f"https://u:{MARK}@api.test:8443/v1/models?key={MARK}&x={MARK}"
    )
    assert safe_url("http://127.0.0.1:9/v1/chat/completions") == (
        "http://127.0.0.1:9/v1/chat/completions"
    )


def test_the_secrets_of_params_are_the_strings_under_credential_looking_keys() -> None:
    params = {
        "api_key": "a1",
        "model": "m",
        "upstream": {"x_api_key": "a2", "headers": [{"bot_token": "a3"}]},
        "max_tokens": 5,
        "env": {"GITHUB_TOKEN": "a4", "LANG": "C"},
    }
    assert sorted(secret_values(params)) == ["a1", "a2", "a3", "a4"]
    assert looks_secret_key("DATABASE_PASSWORD")
    assert not looks_secret_key("max_tokens")
