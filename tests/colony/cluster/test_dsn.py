"""``cluster.dsn`` is checked the way libpq parses it, without connecting or quoting it."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from colony.cluster.dsn import DsnProblem, check

psycopg = pytest.importorskip("psycopg")
from psycopg import pq  # noqa: E402 (after the skip)


def libpq_parses(dsn: str) -> bool:
    try:
        pq.Conninfo.parse(dsn.encode())
    except (psycopg.OperationalError, psycopg.ProgrammingError):
        return False
    return True


def refusal(dsn: str) -> DsnProblem:
    with pytest.raises(DsnProblem) as refused:
        check(dsn)
    return refused.value


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://postgres@127.0.0.1:5432/test",
        "postgres://u:p%20w@db.internal/prod?sslmode=require&application_name=meclaw",
        "postgresql://",
        "postgresql:///colony?host=/var/run/postgresql",
        "postgresql://a:1,b:2/colony?target_session_attrs=read-write",
        "postgresql://[::1]:5432/colony?ssl=true",
        "host=127.0.0.1 port=5432 dbname=test user=postgres",
        "host = db  password='it\\'s quoted' dbname=x",
        "requiressl=1 host=a",
    ],
)
def test_a_dsn_libpq_reads_is_accepted(dsn: str) -> None:
    assert libpq_parses(dsn)
    check(dsn)


@pytest.mark.parametrize(
    ("dsn", "says", "fix"),
    [
        ("mysql://u@h/db", "scheme is not postgresql://", "postgresql://user@host"),
        ("postgresql+asyncpg://u@h/db", "SQLAlchemy-style", "drop the +driver"),
        ("POSTGRESQL://u@h/db", "lower case", "postgresql://"),
        ("localhost:5432/db", "setting 1 has no '='", "postgresql://user@host:5432/dbname"),
        ("host=a database=b", "keyword of setting 2 is not a libpq", "did you mean 'dbname'?"),
        ("host=a dbnme=b", "keyword of setting 2 is not a libpq", "did you mean 'dbname'?"),
        ("host='a", "quoted value of setting 1 is never closed", "close it"),
        ("=a", "setting 1 has no keyword", "postgresql://"),
        ("postgresql://u@h/db?sslmode", "query parameter 1 has no '='", "keyword=value"),
        ("postgresql://u@h/db?a=b=c", "query parameter 1 holds a second '='", "%3D"),
        ("postgresql://u@h/db?colour=red", "keyword of query parameter 1", "libpq"),
        ("postgresql://u@h/db%zz", "not followed by two hex digits", "%25"),
        ("postgresql://u@h/db%00", "%00", "remove"),
        ("postgresql://u@[::1/db", "IPv6 host opens '['", "close the address"),
        ("postgresql://u@[]/db", "IPv6 host is empty", "between"),
        ("postgresql://u@[::1]x/db", "followed by neither", "port after a colon"),
    ],
)
def test_a_dsn_libpq_refuses_is_refused_saying_why_and_how_to_fix_it(
    dsn: str, says: str, fix: str
) -> None:
    assert not libpq_parses(dsn)
    problem = refusal(dsn)
    assert says in problem.reason
    assert fix in problem.fix


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://meclaw:hunter2 hunter2@db/colony",
        "host=db password=hunter2 hunter2=x",
        "host=db password='hunter2",
        "postgresql://meclaw:hunter2%zz@db/colony",
        "mysql://meclaw:hunter2@db/colony",
    ],
)
def test_a_refusal_never_quotes_the_password(dsn: str) -> None:
    problem = refusal(dsn)
    assert "hunter2" not in f"{problem.reason} {problem.fix}"


_PIECES = st.sampled_from(
    [
        *"postgresql:/@[]%0aF?&= \t'\\hd,:é\n",
        "postgresql://",
        "postgres://",
        "host",
        "port",
        "dbname",
        "user",
        "sslmode",
        "requiressl",
        "ssl",
        "true",
        "%20",
        "%00",
        "%2",
        "%3D",
        "[::1]",
        "x",
    ]
)


@settings(max_examples=2000, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_PIECES, max_size=14).map("".join).filter(lambda s: s.strip() != ""))
def test_the_check_agrees_with_libpq_on_every_string(dsn: str) -> None:
    # libpq itself (psycopg's, which the cluster connects with) is the oracle: nothing it
    # reads is refused, nothing it refuses passes. (A blank DSN is the caller's refusal.)
    try:
        check(dsn)
        accepted = True
    except DsnProblem:
        accepted = False
    assert accepted == libpq_parses(dsn)
