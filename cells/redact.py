"""Keeping secrets out of what a cell quotes: the one redaction every cell uses.

A cell that quotes a remote answer or an error (a search endpoint's error body, a provider's
error message, a library's exception text, a script's stderr) may be quoting a secret back: an
endpoint that echoes the bearer key it refused, a URL with a password in it. Whatever a cell
quotes goes to the message log, to the next cell and to the model, so it passes through a
:class:`Redactor` first. It replaces

* the values of the secrets the cell knows (its API key, its bot token, the variables its
  params pass to a process), also URL-encoded, and
* with :meth:`Redactor.text`, common secret shapes it cannot know: ``Bearer``/``Basic``
  credentials, ``sk-…``, GitHub, Slack, AWS, Google and Telegram bot key formats, the
  password of a ``scheme://user:password@host`` URL, and the values of ``api_key=``,
  ``token=``, ``password=``-like query parameters and JSON keys,

each with :data:`MARK`. A quoted remote answer that succeeded (a search result) only loses
the cell's own secrets (:meth:`Redactor.known`): it is data the caller asked for, and a page
about API keys may well show ``sk-…`` examples.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

__all__ = ["MARK", "Redactor", "looks_secret_key", "safe_url", "secret_values"]

MARK = "[redacted]"
"""What a secret is replaced with."""

MIN_SECRET = 4
"""Known values shorter than this are not replaced: they would blank ordinary words."""

_TOKEN = r"(?:(?=[\w.~+/=-]*\d)[\w.~+/=-]{8,}|[\w.~+/=-]{20,})"
"""A credential-like word: 8 or more token characters holding a digit, or 20 or more."""

_QUERY_NAME = (
    r"(?:api[_-]?key|apikey|key|access[_-]?token|[a-z_]*token|secret|password|sig|signature)"
)
_TEXT_NAME = (
    r"(?:[a-z0-9_-]*(?:api[_-]?key|apikey|access[_-]?key|secret[_-]?key|private[_-]?key|token"
    r"|secret|password|passwd))"
)

_SHAPES: list[tuple[re.Pattern[str], str]] = [
    # Authorization header values.
    (re.compile(r"\b((?i:bearer)|Basic|Token)(\s+)" + _TOKEN), r"\1\2" + MARK),
    # Well-known key formats.
    (re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{8,}"), MARK),
    (re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}|\bgithub_pat_\w{20,}"), MARK),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), MARK),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), MARK),
    (re.compile(r"\bAIza[0-9A-Za-z_-]{35}"), MARK),
    (re.compile(r"\b\d{6,12}:[A-Za-z0-9_-]{30,}"), MARK),  # a Telegram bot token
    # scheme://user:password@host
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]*:)[^/\s@]+@"), r"\1" + MARK + "@"),
    # ?api_key=…&token=… in a URL or a form body
    (re.compile(r"(?i)([?&;]" + _QUERY_NAME + r"=)(?!\[redacted\])[^&;#\s\"'<>]+"), r"\1" + MARK),
    # "api_key": "…", 'password': '…', secret = … in JSON, YAML or prose
    (
        re.compile(
            r"(?i)([\"']?\b"
            + _TEXT_NAME
            + r"[\"']?\s*[:=]\s*[\"']?)(?!\[redacted\])([^\s\"',;&}]{4,})"
        ),
        r"\1" + MARK,
    ),
]

_SECRET_KEYS = frozenset({"api_key", "apikey", "auth", "auth_ref", "token", "secret", "password"})
_SECRET_SUFFIXES = (
    "_key",
    "-key",
    "token",
    "secret",
    "password",
    "passwd",
    "_auth",
    "_pat",
    "_dsn",
)
_SECRET_WORDS = frozenset(
    {"token", "secret", "secrets", "password", "passwd", "credential", "credentials", "apikey"}
)


def looks_secret_key(name: str) -> bool:
    """A params key or variable name that probably holds a credential (``api_key``,
    ``OPENAI_API_KEY``, ``bot_token``, ``PGPASSWORD``, ``AWS_SECRET_ACCESS_KEY``…; not
    ``max_tokens``)."""
    lowered = name.lower()
    return (
        lowered in _SECRET_KEYS
        or lowered.endswith(_SECRET_SUFFIXES)
        or not _SECRET_WORDS.isdisjoint(re.split(r"[^a-z0-9]+", lowered))
    )


def secret_values(value: Any) -> list[str]:
    """Every string held under a credential-looking key of ``value``, at any depth: the
    secrets a cell's params give it."""
    found: list[str] = []
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        key, node = stack.pop()
        if isinstance(node, Mapping):
            stack.extend((str(k), v) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((key, v) for v in node)
        elif isinstance(node, str) and key and looks_secret_key(key):
            found.append(node)
    return found


class Redactor:
    """Replaces a cell's known secrets (and, in :meth:`text`, secret shapes) with :data:`MARK`."""

    __slots__ = ("_known",)

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        forms: set[str] = set()
        for secret in secrets:
            if secret and len(secret) >= MIN_SECRET:
                forms.update({secret, quote(secret, safe=""), quote(secret)})
        # Longest first, so a secret containing another is replaced whole.
        self._known = sorted(forms, key=len, reverse=True)

    def known(self, text: str) -> str:
        """``text`` without the values of the secrets this redactor was given."""
        for secret in self._known:
            if secret in text:
                text = text.replace(secret, MARK)
        return text

    def text(self, text: str) -> str:
        """``text`` without the known secrets and without anything shaped like a secret:
        for error texts and quoted error bodies."""
        text = self.known(text)
        for pattern, replacement in _SHAPES:
            text = pattern.sub(replacement, text)
        return text


def safe_url(url: str) -> str:
    """``url`` fit to quote in an error: the password of its user info and the values of its
    query parameters replaced with :data:`MARK` (a query often carries a key)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return Redactor().text(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:{MARK}@{host}" if ":" in userinfo else f"{user}@{host}"
    query = "&".join(
        f"{pair.split('=', 1)[0]}={MARK}" if "=" in pair else pair
        for pair in parts.query.split("&")
        if pair
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))
