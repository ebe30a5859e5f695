"""A COMMIT whose answer was lost, asked after by the transaction's id.

A connection may fail while committing (its session ended by a node taking over, a network
cut) after the server carried the COMMIT out. Work redone then is applied twice: the writer
would journal every delivery twice, a claim would leave rows marked as this node's that it
never delivers. So a transaction that must know reads its id in its first round trip
(:func:`with_xid`), and after a failed COMMIT asks a new session whether it committed
(:func:`landed`; :func:`landed_on` from the event loop).
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


def landed(session: Callable[[], Any], xid: int, patience_s: float) -> bool:
    """Whether the transaction ``xid``, whose COMMIT got no answer, committed; asked on
    ``session()`` (a psycopg connection other than the one that failed). While the old session
    may still be finishing it (``in progress``) it is asked again, for ``patience_s``. False
    when the server cannot tell now: the caller does the work again, as it would have."""
    deadline = time.monotonic() + patience_s
    while True:
        try:
            row = session().execute(STATUS, (xid,)).fetchone()
        except Exception:
            return False
        status = None if row is None else row[0]
        if status != "in progress" or time.monotonic() >= deadline:
            return status == "committed"
        time.sleep(0.05)


async def landed_on(dsn: str, xid: int, patience_s: float) -> bool:
    """:func:`landed`, asked on a session of its own opened on ``dsn``, off the event loop."""

    def ask() -> bool:
        try:
            conn = psycopg.connect(dsn, autocommit=True, connect_timeout=5)
        except Exception:
            return False
        with conn:
            return landed(lambda: conn, xid, patience_s)

    return await asyncio.to_thread(ask)
