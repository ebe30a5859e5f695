"""A client cannot hold the HTTP API: heads and bodies are due in time, connections are capped,
and failed ``accept()`` calls are logged at a bounded rate. Real sockets on 127.0.0.1 trickle
the bytes, as a slowloris client does."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator

import pytest

from colony.api import build_app, serve
from colony.httpguard import ServerLimits
from colony.testing import ColonyHarness
from tests.conftest import TreeFactory, hive

LIMITS = ServerLimits(header_timeout_s=0.3, body_timeout_s=0.3, max_connections=3)


@pytest.fixture
async def port(make_tree: TreeFactory) -> AsyncIterator[int]:
    """A server that needs a token (as on a non-loopback bind): the limits hold before it."""
    async with ColonyHarness(make_tree({"main/config.json": hive()})) as colony:
        app = build_app(colony.colony, token="s3cret", limits=LIMITS)
        runner = await serve(app, "127.0.0.1", 0)
        try:
            yield runner.addresses[0][1]
        finally:
            await runner.cleanup()


async def closed_by_server(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, trickle: bytes
) -> tuple[bytes, float]:
    """Trickle ``trickle`` a byte every 50 ms until the server closes; what it answered and
    after how long."""
    started = time.monotonic()
    answer = b""
    async with asyncio.timeout(10):
        for byte in trickle:
            if reader.at_eof():
                break
            try:
                writer.write(bytes([byte]))
                await writer.drain()
            except ConnectionError:
                break
            try:
                answer += await asyncio.wait_for(reader.read(4096), 0.05)
            except TimeoutError:
                continue
        answer += await reader.read()
    return answer, time.monotonic() - started


async def test_a_head_trickled_byte_by_byte_is_cut_off_also_before_the_token_check(
    port: int,
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = b"GET /colony/registry HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 400
    answer, took = await closed_by_server(reader, writer, head)
    assert answer == b""  # closed without an answer, well before the head was complete
    assert took < 5
    writer.close()


async def test_a_body_trickled_byte_by_byte_is_answered_408_and_cut_off(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\n"
        b"Content-Type: application/json\r\nContent-Length: 500\r\n\r\n"
    )
    answer, took = await closed_by_server(reader, writer, b"{" + b" " * 499)
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert b'"body_timeout"' in answer
    assert took < 5
    writer.close()


async def test_an_idle_keep_alive_connection_is_closed_after_the_head_timeout(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")  # /health needs no token
    async with asyncio.timeout(10):
        first = await reader.readuntil(b'"io_liveness": null}')
        rest = await reader.read()  # the server closes the idle connection
    assert first.startswith(b"HTTP/1.1 200")
    assert rest == b""
    writer.close()


async def test_connections_past_the_cap_are_answered_503_with_retry_after(port: int) -> None:
    held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(LIMITS.max_connections)]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    async with asyncio.timeout(10):
        answer = await reader.read()
    assert answer.startswith(b"HTTP/1.1 503")
    assert b"Retry-After: 1" in answer
    assert b'"too_many_connections"' in answer
    writer.close()
    for _, w in held:
        w.close()
        await w.wait_closed()
    async with asyncio.timeout(10):  # the slots come back as the held connections close
        while True:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = await reader.read()
            writer.close()
            if answer.startswith(b"HTTP/1.1 200"):
                break


SERVER = textwrap.dedent(
    """
    import asyncio, resource, sys
    from pathlib import Path
    from colony.api import build_app, serve
    from colony.httpguard import ServerLimits
    from colony.testing import ColonyHarness

    async def main():
        async with ColonyHarness(Path(sys.argv[1])) as colony:
            limits = ServerLimits(max_connections=10_000)  # past the fd limit on purpose
            runner = await serve(build_app(colony.colony, limits=limits), "127.0.0.1", 0)
            resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
            print(runner.addresses[0][1], flush=True)
            await asyncio.sleep(1.5)  # the life of the server while the test connects
            await runner.cleanup()

    asyncio.run(main())
    """
)


def test_at_the_fd_limit_stderr_does_not_flood(make_tree: TreeFactory) -> None:
    tree = make_tree({"main/config.json": hive()})
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(tree)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    held = []
    for _ in range(150):  # well past what 64 descriptors hold
        try:
            held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        except OSError:
            break
    _, err = proc.communicate(timeout=30)
    for sock in held:
        sock.close()
    lines = err.decode(errors="replace").splitlines()
    assert len(lines) < 10, "\n".join(lines[:40])


async def test_colony_json_sets_the_api_bounds(make_tree: TreeFactory) -> None:
    tree = make_tree(
        {
            "colony.json": {"api_header_timeout_ms": 300, "api_max_connections": 1},
            "main/config.json": hive(),
        }
    )
    async with ColonyHarness(tree) as colony:
        runner = await serve(build_app(colony.colony), "127.0.0.1", 0)
        try:
            port = runner.addresses[0][1]
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            second_reader, second = await asyncio.open_connection("127.0.0.1", port)
            async with asyncio.timeout(10):
                refused = await second_reader.read()  # one connection at most
                answer, took = await closed_by_server(reader, writer, b"GET / HTTP/1.1\r\n" * 40)
            assert refused.startswith(b"HTTP/1.1 503")
            assert answer == b""
            assert took < 5  # the head timeout of 0.3 s, not the default 10 s
            writer.close()
            second.close()
        finally:
            await runner.cleanup()
