"""A real PostgreSQL for the tests that need one (the cluster backend, stores on PostgreSQL).

The server is the one at ``COLONY_TEST_PG_DSN`` (default: the machine's own on 127.0.0.1:5432,
database ``test``, user ``postgres``, trust auth). Each test gets a schema of its own, dropped
afterwards, and a DSN whose ``search_path`` is that schema, so tests on two xdist workers never
see each other's tables. Without a server a test skips, loudly; under ``.ci/run``
(``COLONY_REQUIRE_PG=1``) it fails instead: CI must not pass by skipping the cluster.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from colony.persist.db import ColonyDb
from colony.persist.pg.db import PgDb

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"


def server_dsn() -> str:
    return os.environ.get("COLONY_TEST_PG_DSN") or DEFAULT_DSN


def pg_problem() -> str | None:
    """None when a PostgreSQL server answers at :func:`server_dsn`, else why not."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (pip install -e '.[dev]')"
    try:
        with psycopg.connect(server_dsn(), connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc) else ''}"
    return None


def require_pg() -> None:
    """Skip (loudly) or, under CI, fail when no PostgreSQL answers."""
    problem = pg_problem()
    if problem is None:
        return
    message = (
        f"POSTGRESQL TEST SKIPPED LOUDLY: no server at {server_dsn()} ({problem}); start one or "
        "set COLONY_TEST_PG_DSN"
    )
    if os.environ.get("COLONY_REQUIRE_PG"):
        pytest.fail(message.replace("SKIPPED LOUDLY", "REQUIRED (COLONY_REQUIRE_PG=1)"))
    pytest.skip(message)


def with_search_path(dsn: str, schema: str) -> str:
    """``dsn`` whose sessions use ``schema`` first, named after it (``application_name``)."""
    option = quote(f"-csearch_path={schema}", safe="")
    return f"{dsn}{'&' if '?' in dsn else '?'}options={option}&application_name={schema}"


@dataclass(frozen=True)
class PgSchema:
    """One test's schema: connect with ``dsn`` and everything lands in ``name``."""

    name: str
    dsn: str
    server: str


@pytest.fixture
def pg_schema() -> Iterator[PgSchema]:
    require_pg()
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    server = server_dsn()
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    try:
        yield PgSchema(name, with_search_path(server, name), server)
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            # Sessions a test left open (a killed daemon's) must not hold the drop up.
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND application_name = %s",
                (name,),
            )
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture(params=["sqlite", "postgresql"])
def either_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ColonyDb | PgDb]:
    """A colony's database on either backend, written by that backend's writer."""
    opened: ColonyDb | PgDb
    if request.param == "sqlite":
        opened = ColonyDb(tmp_path / "colony.db")
    else:
        schema: PgSchema = request.getfixturevalue("pg_schema")
        opened = PgDb(schema.dsn, "reader", 1)
    try:
        yield opened
    finally:
        opened.close()


def chat_cluster(schema: PgSchema, lease_ms: int, partitions: int = 4) -> dict[str, Any]:
    """A ``colony.json`` ``cluster`` block on ``schema``, conversations keyed by chat."""
    return {
        "dsn": schema.dsn,
        "partitions": partitions,
        "lease_ms": lease_ms,
        "partition_by": "context.chat_id",
    }
