"""Whether a ``cluster.dsn`` looks like a PostgreSQL connection string, without connecting.

``--validate`` must refuse a DSN libpq would refuse, yet never open a socket, and never quote
the DSN (it usually holds a password). So this module re-reads libpq's two syntaxes the way
libpq's own parser does (PostgreSQL 18, ``fe-connect.c``), and its messages name a keyword or a
position, never a value:

* a URI: ``postgresql://`` or ``postgres://`` (lower case, as libpq requires), no raw space
  (``%20``), every ``%`` followed by two hex digits and never ``%00``, an IPv6 ``[`` closed, and
  a query of ``keyword=value`` pairs joined by ``&`` (``ssl=true`` is libpq's JDBC spelling);
* ``keyword=value`` settings separated by whitespace, a value either bare (``\\`` escapes the
  next character) or single-quoted.

A keyword must be one of libpq's. :data:`KEYWORDS` are PostgreSQL 18's; a keyword not in it is
looked up in the installed libpq (through psycopg, when it imports) before it is refused, so a
newer libpq's keyword is never refused here. An empty DSN is refused by the caller: a cluster
names its database.
"""

from __future__ import annotations

import difflib
import functools

from colony.errors import ColonyError

URI_PREFIXES = ("postgresql://", "postgres://")

KEYWORDS = frozenset(
    {
        "application_name",
        "channel_binding",
        "client_encoding",
        "connect_timeout",
        "dbname",
        "fallback_application_name",
        "gssdelegation",
        "gssencmode",
        "gsslib",
        "host",
        "hostaddr",
        "keepalives",
        "keepalives_count",
        "keepalives_idle",
        "keepalives_interval",
        "krbsrvname",
        "load_balance_hosts",
        "max_protocol_version",
        "min_protocol_version",
        "oauth_client_id",
        "oauth_client_secret",
        "oauth_issuer",
        "oauth_scope",
        "options",
        "passfile",
        "password",
        "port",
        "replication",
        "require_auth",
        "requirepeer",
        "scram_client_key",
        "scram_server_key",
        "service",
        "ssl_max_protocol_version",
        "ssl_min_protocol_version",
        "sslcert",
        "sslcertmode",
        "sslcompression",
        "sslcrl",
        "sslcrldir",
        "sslkey",
        "sslkeylogfile",
        "sslmode",
        "sslnegotiation",
        "sslpassword",
        "sslrootcert",
        "sslsni",
        "target_session_attrs",
        "tcp_user_timeout",
        "user",
    }
)
"""libpq's connection keywords (PostgreSQL 18)."""

_ALIASES = frozenset({"requiressl"})
"""Keywords libpq still takes and translates (``requiressl=1`` is ``sslmode=require``)."""

_OTHER_SPELLINGS = {
    "database": "dbname",
    "db": "dbname",
    "username": "user",
    "pass": "password",
    "pwd": "password",
    "server": "host",
    "hostname": "host",
}
"""What other drivers call libpq's keywords; the hint names libpq's."""

_SPACE = " \t\n\v\f\r"
"""What C's ``isspace`` matches in libpq's parser."""

_BOTH_FORMS = (
    "write a URL such as postgresql://user@host:5432/dbname, or libpq settings such as "
    "host=… port=5432 dbname=… user=…"
)


class DsnProblem(ColonyError, ValueError):
    """What is wrong with a DSN, and how to fix it; neither quotes any part of the DSN."""

    code = "cluster_dsn_invalid"

    def __init__(self, reason: str, fix: str) -> None:
        self.reason = reason
        self.fix = fix
        super().__init__(reason)


def check(dsn: str) -> None:
    """Raise :class:`DsnProblem` when ``dsn`` is not a connection string libpq would parse."""
    if dsn.startswith(URI_PREFIXES):
        _check_uri(dsn.split("://", 1)[1])
        return
    scheme, sep, _ = dsn.partition("://")
    if sep and scheme and all(ch.isalnum() or ch in "+.-" for ch in scheme):
        if scheme.lower() in ("postgresql", "postgres"):
            raise DsnProblem(
                "libpq reads its URL scheme in lower case only",
                "write the scheme as postgresql:// (or postgres://).",
            )
        if scheme.lower().startswith(("postgresql+", "postgres+")):
            raise DsnProblem(
                "it is a SQLAlchemy-style URL (postgresql+driver://), which libpq does not read",
                "drop the +driver part: postgresql://user@host:5432/dbname.",
            )
        raise DsnProblem(
            "it is a URL whose scheme is not postgresql:// or postgres://; the cluster keeps "
            "its state in PostgreSQL only",
            "point it at a PostgreSQL server: postgresql://user@host:5432/dbname.",
        )
    _check_settings(dsn)


def _check_uri(rest: str) -> None:
    """libpq's URI grammar: ``[user[:password]@][host[:port]][,…][/dbname][?k=v&…]``."""
    i, n = 0, len(rest)
    credentials = next((j for j, ch in enumerate(rest) if ch in "@/"), n)
    if credentials < n and rest[credentials] == "@":
        colon = rest.find(":", 0, credentials)
        if colon < 0:
            _decode(rest[:credentials], "the user name")
        else:
            _decode(rest[:colon], "the user name")
            _decode(rest[colon + 1 : credentials], "the password")
        i = credentials + 1
    hosts: list[str] = []
    ports: list[str] = []
    end = ""
    while True:
        if i < n and rest[i] == "[":
            close = rest.find("]", i + 1)
            if close < 0:
                raise DsnProblem(
                    "an IPv6 host opens '[' without closing it",
                    "close the address: postgresql://user@[::1]:5432/dbname.",
                )
            if close == i + 1:
                raise DsnProblem("an IPv6 host is empty ('[]')", "put the address between them.")
            hosts.append(rest[i + 1 : close])
            i = close + 1
            if i < n and rest[i] not in ":/?,":
                raise DsnProblem(
                    "an IPv6 host's ']' is followed by neither ':', '/', '?' nor ','",
                    "write the port after a colon: postgresql://user@[::1]:5432/dbname.",
                )
        else:
            start = i
            while i < n and rest[i] not in ":/?,":
                i += 1
            hosts.append(rest[start:i])
        end = rest[i] if i < n else ""
        if end == ":":
            start = i = i + 1
            while i < n and rest[i] not in "/?,":
                i += 1
            ports.append(rest[start:i])
            end = rest[i] if i < n else ""
        if end != ",":
            break
        i += 1
    _decode(",".join(hosts), "the host")
    _decode(",".join(ports), "the port")
    if end == "/":
        start = i + 1
        query = rest.find("?", start)
        i = n if query < 0 else query
        _decode(rest[start:i], "the database name")
        end = "?" if query >= 0 else ""
    if end == "?":
        _check_query(rest[i + 1 :])


def _check_query(query: str) -> None:
    index = 0
    while query:
        index += 1
        pair, _, query = query.partition("&")
        key, eq, value = pair.partition("=")
        if not eq:
            raise DsnProblem(
                f"query parameter {index} has no '='",
                "write each query parameter as keyword=value, joined by '&'.",
            )
        if "=" in value:
            raise DsnProblem(
                f"query parameter {index} holds a second '='",
                "percent-encode an '=' inside a value as %3D.",
            )
        where = f"query parameter {index}"
        name = _decode(key, f"the keyword of {where}")
        if name == "ssl" and _decode(value, f"the value of {where}") == "true":
            continue  # libpq's JDBC spelling of sslmode=require
        _decode(value, f"the value of {where}")
        _check_keyword(name, where)


def _decode(part: str, what: str) -> str:
    """``part`` percent-decoded as libpq decodes a URI component (spaces may only pad it)."""
    text = part.strip(" ")
    if " " in text:
        raise DsnProblem(f"{what} in the URL holds a space", "percent-encode each space as %20.")
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] != "%":
            out.append(text[i])
            i += 1
            continue
        digits = text[i + 1 : i + 3]
        if len(digits) < 2 or not all(ch in "0123456789abcdefABCDEF" for ch in digits):
            raise DsnProblem(
                f"a '%' in {what} of the URL is not followed by two hex digits",
                "percent-encode a literal '%' as %25.",
            )
        if digits == "00":
            raise DsnProblem(f"{what} of the URL holds %00, which libpq forbids", "remove it.")
        out.append(chr(int(digits, 16)))
        i += 3
    return "".join(out)


def _check_settings(dsn: str) -> None:
    i, n = 0, len(dsn)
    index = 0
    while i < n:
        if dsn[i] in _SPACE:
            i += 1
            continue
        index += 1
        start = i
        while i < n and dsn[i] != "=" and dsn[i] not in _SPACE:
            i += 1
        name = dsn[start:i]
        while i < n and dsn[i] in _SPACE:
            i += 1
        if i >= n or dsn[i] != "=":
            raise DsnProblem(
                f"it is neither a postgresql:// URL nor libpq settings: setting {index} has no '='",
                _BOTH_FORMS + ".",
            )
        i += 1
        while i < n and dsn[i] in _SPACE:
            i += 1
        if i < n and dsn[i] == "'":
            i += 1
            while True:
                if i >= n:
                    raise DsnProblem(
                        f"the quoted value of setting {index} is never closed",
                        "close it with ' (write \\' for a quote inside it).",
                    )
                if dsn[i] == "\\":
                    i += 2
                    continue
                if dsn[i] == "'":
                    i += 1
                    break
                i += 1
        else:
            while i < n and dsn[i] not in _SPACE:
                i += 2 if dsn[i] == "\\" else 1
        _check_keyword(name, f"setting {index}")


def _check_keyword(name: str, where: str) -> None:
    if name in KEYWORDS or name in _ALIASES or name in _installed_keywords():
        return
    if not name:
        raise DsnProblem(f"{where} has no keyword before its '='", _BOTH_FORMS + ".")
    # The keyword is not quoted either: after an unquoted space, a password's tail reads as one.
    known = sorted(KEYWORDS | _installed_keywords())
    guess = _OTHER_SPELLINGS.get(name.lower()) or next(
        iter(difflib.get_close_matches(name, known, n=1)), None
    )
    hint = f"did you mean '{guess}'? " if guess else "quote a value holding a space; "
    raise DsnProblem(
        f"the keyword of {where} is not a libpq connection keyword",
        hint + "the keywords are listed in PostgreSQL's libpq documentation (Parameter Key Words).",
    )


@functools.cache
def _installed_keywords() -> frozenset[str]:
    """The installed libpq's keywords (through psycopg), or none when it does not import."""
    try:
        from psycopg import pq
    except ImportError:
        return frozenset()
    return frozenset(option.keyword.decode() for option in pq.Conninfo.get_defaults())
