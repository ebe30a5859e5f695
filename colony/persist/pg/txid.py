"""A COMMIT whose answer was lost, asked after by the transaction's id.

A connection may fail while committing (its session ended by a node taking over, a network
cut) after the server carried the COMMIT out. Work redone then is applied twice: the writer
would journal every delivery twice, a claim would leave rows marked as this node's that it
never delivers. So a transaction that must know reads its id in its first round trip
(:func:`with_xid`), and after a failed COMMIT asks a new session whether it committed
(:func:`landed`, :func:`outcome`; :func:`outcome_on` from the event loop).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import psycopg

STATUS = "SELECT txid_status(%s)"


def with_xid(select: str) -> str:
    """``select`` with the transaction's id as a first column, ``xid``: one round trip. When
    ``select`` finds nothing there is still one row, its other columns NULL."""
    return (
        "SELECT x.xid, s.* FROM (SELECT txid_current() AS xid) x "
        f"LEFT JOIN LATERAL ({select}) s ON TRUE"
    )


def outcome(session: Callable[[], Any], xid: int, patience_s: float) -> str | None:
    """What became of the transaction ``xid``, whose COMMIT got no answer: ``"committed"`` or
    ``"aborted"``, asked on ``session()`` (a psycopg connection other than the one that
    failed); None when the server cannot tell now (no answer, or still ``in progress`` after
    ``patience_s``: the old session may be finishing it)."""
    deadline = time.monotonic() + patience_s
    while True:
        try:
            row = session().execute(STATUS, (xid,)).fetchone()
        except Exception:
            return None
        status = None if row is None else row[0]
        if status in ("committed", "aborted"):
            return str(status)
        if status != "in progress" or time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


def landed(session: Callable[[], Any], xid: int, patience_s: float) -> bool:
    """Whether :func:`outcome` says committed. False also when the server cannot tell now: the
    caller does the work again, as it would have."""
    return outcome(session, xid, patience_s) == "committed"


async def outcome_on(dsn: str, xid: int, patience_s: float) -> str | None:
    """:func:`outcome`, asked on a session of its own opened on ``dsn``, off the event loop
    (None as well when no session opens)."""

    def ask() -> str | None:
        try:
            conn = psycopg.connect(dsn, autocommit=True, connect_timeout=5)
        except Exception:
            return None
        with conn:
            return outcome(lambda: conn, xid, patience_s)

    return await asyncio.to_thread(ask)


async def status_now(conn: psycopg.AsyncConnection[Any], xid: int) -> str | None:
    """``txid_status(xid)`` asked once: ``"committed"``, ``"aborted"``, ``"in progress"``, or
    None when the transaction is too old for the server to remember."""
    cur = await conn.execute(STATUS, (xid,))
    row = await cur.fetchone()
    return None if row is None or row[0] is None else str(row[0])
