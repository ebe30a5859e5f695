"""Issue 10 item 6: ``web_fetch``'s SSRF rules hold through redirects and DNS answers that
change, with the guard in its default tier (no private networks).

Names are answered by a stub resolver only. The one public-looking answer, ``PUBLIC``, is
never dialled: the cell's transport is wrapped so that a request for ``PUBLIC`` goes to a
server on 127.0.0.1 instead, and a request for any other address fails the test. So the
guard judges ``PUBLIC`` as the open internet while every connection stays on loopback.
"""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import httpx
import pytest

from cells.web.fetch import WebFetchCell
from cells.web.ssrf import IpAddress, deny_reason
from colony.testing import spec_for
from tests.cells.web import (
    LocalServer,
    MapResolver,
    Reply,
    call,
    error_of,
    fixed,
    redirect,
    turn_of,
)

PUBLIC = "93.184.215.14"
"""Judged public by the guard; never connected to (see the module docstring)."""


class LoopbackOnly(httpx.AsyncBaseTransport):
    """Sends a request for ``PUBLIC`` to 127.0.0.1 and refuses every other address."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport(
            trust_env=False, limits=httpx.Limits(max_keepalive_connections=0)
        )
        self.dialled: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        self.dialled.append(host)
        if host != PUBLIC:
            raise AssertionError(f"the guard let a connection to {host} through")
        rerouted = httpx.Request(
            request.method,
            request.url.copy_with(host="127.0.0.1"),
            headers=request.headers,
            extensions=request.extensions,
        )
        return await self.inner.handle_async_request(rerouted)

    async def aclose(self) -> None:
        await self.inner.aclose()


class Changing(MapResolver):
    """Answers each lookup of a name with the next of its answers (the last one repeats)."""

    def __init__(self, answers: dict[str, Sequence[Sequence[str]]]) -> None:
        super().__init__({})
        self.answers = answers

    async def __call__(self, host: str, port: int) -> list[IpAddress]:
        seen = self.lookups.count(host)
        options = self.answers.get(host, [])
        if options:
            self.table = {host: options[min(seen, len(options) - 1)]}
        return await super().__call__(host, port)


@asynccontextmanager
async def guarded_cell(resolver: MapResolver) -> AsyncIterator[tuple[WebFetchCell, LoopbackOnly]]:
    cell = WebFetchCell(spec_for("/fetch", {}), resolver=resolver)  # the default tier
    await cell.transport.aclose()
    transport = LoopbackOnly()
    cell.transport = transport  # type: ignore[assignment]
    try:
        yield cell, transport
    finally:
        await cell.close()


def test_the_stub_public_address_is_judged_public_and_loopback_is_not() -> None:
    assert deny_reason(ipaddress.ip_address(PUBLIC)) is None
    assert deny_reason(ipaddress.ip_address("127.0.0.1")) is not None


async def test_the_harness_reaches_an_allowed_name_through_loopback_only() -> None:
    resolver = MapResolver({"public.test": [PUBLIC]})
    async with (
        guarded_cell(resolver) as (cell, transport),
        LocalServer(fixed(Reply(body=b"hello"))) as server,
    ):
        reply = await cell.answer(call({"url": f"http://public.test:{server.port}/"}))
        assert turn_of(reply)["text"] == "hello"
        assert transport.dialled == [PUBLIC]
        assert server.requests[0].headers["host"] == f"public.test:{server.port}"


async def test_a_name_the_stub_resolves_to_loopback_is_refused() -> None:
    resolver = MapResolver({"inside.test": ["127.0.0.1"], "mixed.test": [PUBLIC, "127.0.0.1"]})
    async with guarded_cell(resolver) as (cell, transport), LocalServer(fixed(Reply())) as server:
        for name in ("inside.test", "mixed.test"):
            code, text = error_of(await cell.answer(call({"url": server.url("/", host=name)})))
            assert code == "target_blocked"
            assert "127.0.0.1" in text
        assert transport.dialled == []
        assert server.requests == []


@pytest.mark.parametrize(
    "location",
    [
        "http://127.0.0.1:{port}/",
        "http://[::1]:{port}/",
        "http://[::ffff:127.0.0.1]:{port}/",
        "http://0x7f.1:{port}/",
        "http://10.0.0.1:{port}/",
        "http://192.168.1.1:{port}/",
        "http://169.254.169.254/latest/meta-data/",
        "http://inside.test:{port}/",
        "http://private.test:{port}/",
    ],
)
async def test_a_redirect_from_an_allowed_origin_to_a_private_target_is_refused(
    location: str,
) -> None:
    resolver = MapResolver(
        {"public.test": [PUBLIC], "inside.test": ["127.0.0.1"], "private.test": ["10.1.2.3"]}
    )
    async with (
        guarded_cell(resolver) as (cell, transport),
        LocalServer(fixed(Reply(body=b"never"))) as inner,
        LocalServer(fixed(redirect(location.format(port=inner.port)))) as outer,
    ):
        code, text = error_of(await cell.answer(call({"url": outer.url("/", host="public.test")})))
        assert code == "target_blocked", text
        assert transport.dialled == [PUBLIC]  # the origin only
        assert len(outer.requests) == 1
        assert inner.requests == []


async def test_a_rebinding_name_is_pinned_to_the_checked_address() -> None:
    """The stub answers public at the check and loopback afterwards: the cell resolves once
    and connects to the address it checked, never to a second answer."""
    resolver = Changing({"rebind.test": [[PUBLIC], ["127.0.0.1"]]})
    async with (
        guarded_cell(resolver) as (cell, transport),
        LocalServer(fixed(Reply(body=b"pinned"))) as server,
    ):
        reply = await cell.answer(call({"url": server.url("/", host="rebind.test")}))
        assert turn_of(reply)["text"] == "pinned"
        assert resolver.lookups == ["rebind.test"]
        assert transport.dialled == [PUBLIC]
        # The next fetch resolves anew and sees the new, loopback answer: refused.
        code, text = error_of(await cell.answer(call({"url": server.url("/", host="rebind.test")})))
        assert code == "target_blocked"
        assert "it resolves to 127.0.0.1" in text
        assert transport.dialled == [PUBLIC]
        assert len(server.requests) == 1


async def test_a_redirect_back_to_a_name_whose_answer_changed_is_refused() -> None:
    """Within one redirect chain every hop is resolved and screened again: a name that was
    public at the first hop and loopback at the second is refused at the second."""
    resolver = Changing({"flip.test": [[PUBLIC], ["127.0.0.1"]]})
    server = LocalServer(lambda request: redirect(f"http://flip.test:{server.port}/again"))
    async with guarded_cell(resolver) as (cell, transport), server:
        reply = await cell.answer(call({"url": server.url("/", host="flip.test")}))
        code, text = error_of(reply)
        assert code == "target_blocked", text
        assert "it resolves to 127.0.0.1" in text
        assert resolver.lookups == ["flip.test", "flip.test"]
        assert transport.dialled == [PUBLIC]
        assert len(server.requests) == 1
