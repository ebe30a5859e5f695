"""cells.cellfile: how every cell opens its cell.db, bounds a query and keeps its params overlay."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from cells.cellfile import (
    BUSY_TIMEOUT_MS,
    ParamsOverlay,
    QueryTimeoutError,
    bounded,
    cell_db_path,
    connect,
    open_cell_db,
)

RUNAWAY = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
"""A query that never ends on its own."""
FINITE = (
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200000) "
    "SELECT count(*) FROM n"
)


def pragma(conn: sqlite3.Connection, name: str) -> object:
    return conn.execute(f"PRAGMA {name}").fetchone()[0]


# -- opening ---------------------------------------------------------------------------------


def test_a_cells_file_is_cell_db_in_its_folder_and_in_memory_without_one(tmp_path: Path) -> None:
    assert cell_db_path(tmp_path) == str(tmp_path / "cell.db")
    assert cell_db_path(None) == ":memory:"


def test_a_cell_file_opens_in_wal_with_normal_sync_and_a_five_second_busy_wait(
    tmp_path: Path,
) -> None:
    conn, _ = open_cell_db(tmp_path)
    try:
        assert pragma(conn, "journal_mode") == "wal"
        assert pragma(conn, "synchronous") == 1  # NORMAL
        assert pragma(conn, "busy_timeout") == BUSY_TIMEOUT_MS == 5000
        assert conn.isolation_level is None  # autocommit: the cell writes BEGIN itself
    finally:
        conn.close()


def test_a_file_is_fresh_only_when_this_open_created_it(tmp_path: Path) -> None:
    first, fresh = open_cell_db(tmp_path)
    first.close()
    assert fresh
    again, fresh = open_cell_db(tmp_path)
    again.close()
    assert not fresh
    memory, fresh = open_cell_db(None)
    memory.close()
    assert fresh


def test_the_busy_wait_and_the_sync_level_can_be_chosen(tmp_path: Path) -> None:
    conn = connect(tmp_path / "other.db", busy_timeout_ms=250, synchronous="FULL")
    try:
        assert pragma(conn, "busy_timeout") == 250
        assert pragma(conn, "synchronous") == 2  # FULL
    finally:
        conn.close()


def test_a_second_connection_waits_out_the_busy_timeout_then_reports_the_lock(
    tmp_path: Path,
) -> None:
    holder, _ = open_cell_db(tmp_path)
    waiter, _ = open_cell_db(tmp_path, busy_timeout_ms=200)
    try:
        holder.execute("CREATE TABLE t (x)")
        holder.execute("BEGIN IMMEDIATE")
        started = time.monotonic()
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            waiter.execute("INSERT INTO t VALUES (1)")
        assert time.monotonic() - started >= 0.15
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        waiter.close()


def _writer_on_a_rollback_journal(file: Path) -> sqlite3.Connection:
    """A connection holding a write lock on ``file``, still in rollback-journal mode: how a
    file looks to one cluster member while another, opening it first, switches it to WAL.
    SQLite refuses the switch to the second at once, without waiting its busy timeout."""
    holder = sqlite3.connect(file, isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    return holder


def test_opening_a_file_another_process_is_switching_waits_for_wal_instead_of_failing(
    tmp_path: Path,
) -> None:
    file = tmp_path / "cell.db"
    holder = _writer_on_a_rollback_journal(file)
    release = threading.Timer(0.3, lambda: holder.execute("ROLLBACK"))
    release.start()
    started = time.monotonic()
    try:
        conn, fresh = open_cell_db(tmp_path)
    finally:
        release.join()
        holder.close()
    try:
        assert time.monotonic() - started >= 0.25  # it waited for the lock to go
        assert not fresh
        assert pragma(conn, "journal_mode") == "wal"
    finally:
        conn.close()


def test_a_switch_to_wal_held_off_past_the_busy_timeout_reports_the_lock(tmp_path: Path) -> None:
    file = tmp_path / "cell.db"
    holder = _writer_on_a_rollback_journal(file)
    started = time.monotonic()
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            connect(file, busy_timeout_ms=200)
        assert time.monotonic() - started >= 0.15
    finally:
        holder.execute("ROLLBACK")
        holder.close()


# -- a bounded query -------------------------------------------------------------------------


def test_a_query_past_its_timeout_is_interrupted_as_query_timeout() -> None:
    conn, _ = open_cell_db(None)
    started = time.monotonic()
    with pytest.raises(QueryTimeoutError, match="query_timeout_ms"), bounded(conn, 50):
        conn.execute(RUNAWAY).fetchone()
    assert time.monotonic() - started < 5


def test_the_bound_ends_with_its_block() -> None:
    conn, _ = open_cell_db(None)
    with pytest.raises(QueryTimeoutError), bounded(conn, 20):
        conn.execute(RUNAWAY).fetchone()
    time.sleep(0.05)  # past the old deadline: a handler left behind would interrupt now
    assert conn.execute(FINITE).fetchone() == (200000,)


def test_no_timeout_leaves_a_query_unbounded() -> None:
    conn, _ = open_cell_db(None)
    for unbounded in (None, 0):
        with bounded(conn, unbounded):
            assert conn.execute(FINITE).fetchone() == (200000,)


def test_an_interrupted_write_rolls_its_transaction_back() -> None:
    conn, _ = open_cell_db(None)
    conn.execute("CREATE TABLE t (x)")
    conn.execute("BEGIN")
    conn.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(QueryTimeoutError), bounded(conn, 20):
        conn.execute(f"INSERT INTO t {RUNAWAY}")
    assert not conn.in_transaction
    assert conn.execute("SELECT count(*) FROM t").fetchone() == (0,)


def test_other_sql_errors_pass_through_a_bound() -> None:
    conn, _ = open_cell_db(None)
    with pytest.raises(sqlite3.OperationalError, match="no such table"), bounded(conn, 1000):
        conn.execute("SELECT * FROM missing")


# -- the params overlay ------------------------------------------------------------------------


def test_the_overlay_is_empty_until_an_update_is_saved() -> None:
    conn, _ = open_cell_db(None)
    assert ParamsOverlay(conn, "cell_params").read() == {}


def test_the_last_write_of_a_key_wins_and_other_keys_stay(tmp_path: Path) -> None:
    conn, _ = open_cell_db(tmp_path)
    overlay = ParamsOverlay(conn, "cell_params")
    overlay.save({"a": 1, "b": {"deep": [1, "two"]}})
    overlay.save({"a": None})
    assert overlay.read() == {"a": None, "b": {"deep": [1, "two"]}}


def test_the_overlay_survives_a_reopen_of_the_file(tmp_path: Path) -> None:
    conn, _ = open_cell_db(tmp_path)
    ParamsOverlay(conn, "cell_params").save({"query_timeout_ms": 250})
    conn.close()
    again, fresh = open_cell_db(tmp_path)
    assert not fresh
    assert ParamsOverlay(again, "cell_params").read() == {"query_timeout_ms": 250}


def test_an_update_is_saved_whole_or_not_at_all() -> None:
    conn, _ = open_cell_db(None)
    overlay = ParamsOverlay(conn, "cell_params")
    with pytest.raises(TypeError):
        overlay.save({"a": 1, "b": object()})
    assert overlay.read() == {}
    assert not conn.in_transaction


def test_any_string_survives_the_overlay_even_one_utf8_cannot_hold() -> None:
    conn, _ = open_cell_db(None)
    overlay = ParamsOverlay(conn, "cell_params")
    overlay.save({"name": "grüß \ud800"})
    assert overlay.read() == {"name": "grüß \ud800"}


def test_each_cell_keeps_its_overlay_in_its_own_table() -> None:
    conn, _ = open_cell_db(None)
    ParamsOverlay(conn, "store_params").save({"a": 1})
    assert ParamsOverlay(conn, "timer_params").read() == {}
    assert conn.execute("SELECT key FROM store_params").fetchall() == [("a",)]
