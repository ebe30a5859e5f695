"""The store's dialects: the names, values and errors each database gets, pinned one by one."""

from __future__ import annotations

import re
import sqlite3
import sys
from collections.abc import Iterator

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cells.store.dialect import (
    POSTGRES_NAME_BYTES,
    dialect_of,
    pg_identifier,
    sqlite_number,
    sqlite_real_text,
)
from cells.store.ops import plan
from colony.celltables import storage_failure
from tests.cells.store.test_store import SCHEMA
from tests.pg import PgSchema

names = st.text(st.characters(exclude_categories=["Cs"]), max_size=120)


@given(names)
def test_a_postgresql_name_fits_63_bytes_and_a_short_plain_name_is_kept(name: str) -> None:
    made = pg_identifier(name)
    assert len(made.encode()) <= POSTGRES_NAME_BYTES
    assert made == pg_identifier(name)  # deterministic: every daemon finds the same table
    plain = 0 < len(name.encode()) <= 63 and "%" not in name and "\x00" not in name
    if plain and not re.search(r"~[0-9a-f]{10}\Z", name):
        assert made == name
    assert "%" not in made
    assert "\x00" not in made
    assert made  # PostgreSQL refuses an empty identifier: "" is hashed too


@given(names, names)
def test_two_names_never_share_a_postgresql_name(one: str, other: str) -> None:
    if one != other:
        assert pg_identifier(one) != pg_identifier(other)


def test_a_long_name_keeps_a_readable_start_and_names_ending_like_a_hash_are_hashed() -> None:
    long = "/" + "hive/" * 12 + "memory:" + "t" * 63
    assert pg_identifier(long).startswith("/hive/hive/")
    assert pg_identifier(long) != pg_identifier(long + "x")
    cut = pg_identifier(long)
    assert pg_identifier(cut) != cut  # a name shaped like a hashed one is hashed again
    assert pg_identifier("/é" * 40).encode().decode() == pg_identifier("/é" * 40)  # whole chars


@pytest.fixture(scope="module")
def sqlite_conn() -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (i INTEGER, s TEXT)")
    yield conn
    conn.close()


numeric_looking = st.text(
    st.sampled_from(list("0123456789+-.eE x\t\n")), max_size=12
) | st.from_regex(r"\A[ ]?[+-]?[0-9]{1,25}(\.[0-9]{0,5})?([eE][+-]?[0-9]{1,3})?[ ]?\Z")


@given(numeric_looking)
def test_numeric_text_becomes_the_number_sqlites_int_column_keeps(
    sqlite_conn: sqlite3.Connection, text: str
) -> None:
    sqlite_conn.execute("DELETE FROM t")
    sqlite_conn.execute("INSERT INTO t (i) VALUES (?)", (text,))
    kept, kind = sqlite_conn.execute("SELECT i, typeof(i) FROM t").fetchone()
    number = sqlite_number(text)
    if kind == "text":
        assert number is None
    elif kind == "integer":
        assert number == kept
        assert type(number) is int
    else:  # SQLite's text-to-real is not always correctly rounded ("3e-308"): within an ulp
        assert type(number) is float
        assert number == pytest.approx(kept, rel=4 * sys.float_info.epsilon, abs=4 * 5e-324)


@given(st.floats(allow_nan=False))
def test_a_float_in_a_text_column_is_the_text_sqlite_keeps(
    sqlite_conn: sqlite3.Connection, value: float
) -> None:
    sqlite_conn.execute("DELETE FROM t")
    sqlite_conn.execute("INSERT INTO t (s) VALUES (?)", (value,))
    (kept,) = sqlite_conn.execute("SELECT s FROM t").fetchone()
    assert sqlite_real_text(value) == kept


def test_the_sqlite_dialect_spells_the_sql_the_store_always_ran() -> None:
    guard = {
        "operation": "update",
        "table": "thread",
        "set": {"fired": True},
        "where": {"turn_id": "t1", "iter": {"in": [0, 1]}, "role": {"or_null": {"neq": "x"}}},
    }
    step = plan(guard, SCHEMA, "/memory:")
    assert step.sql == (
        'UPDATE "/memory:thread" SET "fired" = ? WHERE "turn_id" = ? AND "iter" IN (?, ?) '
        'AND ("role" != ? OR "role" IS NULL)'
    )
    assert step.values == [1, "t1", 0, 1, "x"]
    listed = {
        "operation": "select",
        "table": "thread",
        "columns": ["role"],
        "order_by": [{"col": "iter", "dir": "desc"}],
        "limit": 3,
    }
    assert plan(listed, SCHEMA, "/m:").sql == (
        'SELECT "role" FROM "/m:thread" ORDER BY "iter" DESC, rowid LIMIT ?'
    )
    assert plan({**listed, "distinct": True}, SCHEMA, "/m:").sql == (
        'SELECT DISTINCT "role" FROM "/m:thread" NOT INDEXED ORDER BY "iter" DESC LIMIT ?'
    )


def test_the_postgresql_dialect_spells_the_same_calls_its_way() -> None:
    pg = dialect_of("postgres")
    guard = {"operation": "update", "table": "thread", "set": {"fired": 1}, "where": {"iter": 0}}
    assert plan(guard, SCHEMA, "/memory:", pg).sql == (
        'UPDATE "/memory:thread" SET "fired" = %s WHERE "iter" = %s'
    )
    listed = {
        "operation": "select",
        "table": "thread",
        "columns": ["role"],
        "order_by": [{"col": "iter", "dir": "desc"}],
        "limit": 3,
    }
    assert plan(listed, SCHEMA, "/m:", pg).sql == (
        'SELECT "role" FROM "/m:thread" ORDER BY "iter" DESC NULLS LAST, "~row" LIMIT %s'
    )


def test_an_unknown_dialect_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="no store dialect 'mysql' \\(known: sqlite, postgres\\)"):
        dialect_of("mysql")


def test_postgresql_errors_that_blame_the_server_or_the_connection_are_storage_failures(
    pg_schema: PgSchema,
) -> None:
    with psycopg.connect(pg_schema.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (k int PRIMARY KEY)")
        conn.execute("INSERT INTO t VALUES (1)")
        data_errors: list[BaseException] = []
        for sql in (
            "INSERT INTO t VALUES (1)",  # unique violation
            "SELEC 1",  # syntax
            "SELECT 'x'::int",  # invalid text representation
            "SELECT * FROM nowhere",  # undefined table
            "SET statement_timeout = 1; SELECT pg_sleep(1)",  # a cancelled statement: a timeout
        ):
            with pytest.raises(psycopg.Error) as caught:
                conn.execute(sql)
            data_errors.append(caught.value)
        conn.execute("SET statement_timeout = 0")
        assert [storage_failure(exc) for exc in data_errors] == [False] * 5
        with psycopg.connect(pg_schema.dsn) as holder, psycopg.connect(pg_schema.dsn) as waiter:
            holder.execute("UPDATE t SET k = 2 WHERE k = 1")  # holds the row
            waiter.execute("SET lock_timeout = 10")
            with pytest.raises(psycopg.errors.LockNotAvailable) as busy:
                waiter.execute("UPDATE t SET k = 3 WHERE k = 1")
        assert storage_failure(busy.value)  # another daemon's lock, as SQLITE_BUSY: run again
        with psycopg.connect(pg_schema.dsn, autocommit=True) as victim:
            conn.execute("SELECT pg_terminate_backend(%s)", (victim.info.backend_pid,))
            with pytest.raises(psycopg.OperationalError) as shut:
                victim.execute("SELECT 1")  # 57P01, admin shutdown
            with pytest.raises(psycopg.OperationalError) as lost:
                victim.execute("SELECT 1")  # the connection is closed: no SQLSTATE
    assert shut.value.sqlstate == "57P01"
    assert lost.value.sqlstate is None
    assert storage_failure(shut.value)
    assert storage_failure(lost.value)
    raised_by_the_server = [
        psycopg.errors.DiskFull(),
        psycopg.errors.TooManyConnections(),
        psycopg.errors.SerializationFailure(),
        psycopg.errors.DeadlockDetected(),
        psycopg.errors.DataCorrupted(),
        psycopg.errors.CrashShutdown(),
        psycopg.errors.IoError(),
    ]
    assert all(storage_failure(exc) for exc in raised_by_the_server)
    assert not storage_failure(psycopg.errors.ProgramLimitExceeded())


def test_sqlite_storage_failures_are_unchanged() -> None:
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorcode = 13
    constraint = sqlite3.IntegrityError("UNIQUE constraint failed")
    constraint.sqlite_errorcode = 2067
    assert storage_failure(full)
    assert storage_failure(OSError("gone"))
    assert not storage_failure(constraint)
    assert not storage_failure(sqlite3.ProgrammingError("closed"))
