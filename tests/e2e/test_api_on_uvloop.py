"""The HTTP API on uvloop's event loop (the ``uvloop`` extra, which the daemon uses when it is
installed): its transports are no asyncio.Transport subclass, and an isinstance check in the
connection guard once refused every connection."""

from __future__ import annotations

import asyncio

import pytest

from colony.api import build_app, serve
from colony.testing import ColonyHarness
from tests.conftest import TreeFactory, hive


def test_the_api_answers_a_request_on_uvloop(make_tree: TreeFactory) -> None:
    uvloop = pytest.importorskip(
        "uvloop", reason="SKIPPED LOUDLY: uvloop is not installed (pip install -e '.[uvloop]')"
    )
    tree = make_tree({"main/config.json": hive()})

    async def ask() -> bytes:
        async with ColonyHarness(tree) as colony:
            runner = await serve(build_app(colony.colony), "127.0.0.1", 0)
            try:
                port = runner.addresses[0][1]
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(b"GET /health HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                answer = await asyncio.wait_for(reader.read(), 10)
                writer.close()
                return answer
            finally:
                await runner.cleanup()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as loop:
        answer = loop.run(ask())
    assert answer.split(b"\r\n", 1)[0] == b"HTTP/1.1 200 OK"
