"""The private-network deny: address classification, host reading and screening (pure), and
the deny in action against loopback servers (web_fetch with the guard on)."""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from cells.web.fetch import WebFetchCell
from cells.web.ssrf import (
    TargetBlockedError,
    UnresolvableHostError,
    deny_reason,
    host_problem,
    parse_ip_host,
    screen,
    system_resolver,
)
from colony.testing import spec_for
from tests.cells.web import (
    LocalServer,
    MapResolver,
    Reply,
    call,
    error_of,
    fixed,
    ipv6_loopback,
    redirect,
    turn_of,
)

# -- classification -------------------------------------------------------------------------

DENIED_ALWAYS = [
    # link-local, the cloud metadata endpoint among them, never opens
    "169.254.169.254",
    "169.254.0.1",
    "169.254.255.255",
    "fe80::1",
    "fe80::a:b:c:d",
    "febf:ffff::1",
    "::ffff:169.254.169.254",
    "64:ff9b::a9fe:a9fe",
    "2002:a9fe:a9fe::1",
    # unspecified, multicast, reserved, broadcast and friends are never a web server
    "0.0.0.0",
    "0.1.2.3",
    "::",
    "::2",
    "224.0.0.1",
    "239.255.255.250",
    "ff02::1",
    "ff05::2",
    "240.0.0.1",
    "254.1.2.3",
    "255.255.255.255",
    "192.0.0.8",
    "192.0.2.1",
    "198.51.100.7",
    "203.0.113.9",
    "198.18.0.1",
    "198.19.255.255",
    "100::1",
    "2001:db8::1",
    "64:ff9b:1::1",
    "::ffff:0.0.0.0",
    "::ffff:224.0.0.1",
]
PRIVATE = [
    # closed by default, opened by allow_private_networks
    "127.0.0.1",
    "127.255.255.254",
    "127.1.2.3",
    "::1",
    "10.0.0.1",
    "10.255.255.255",
    "172.16.0.1",
    "172.31.255.255",
    "192.168.0.1",
    "192.168.255.255",
    "100.64.0.1",
    "100.127.255.255",
    "fc00::1",
    "fd12:3456:789a::1",
    "fec0::1",
    # IPv6 forms that carry a private IPv4 address
    "::ffff:127.0.0.1",
    "::ffff:10.1.2.3",
    "::127.0.0.1",
    "64:ff9b::7f00:1",
    "64:ff9b::c0a8:101",
    "2002:7f00:1::",
    "2002:c0a8:101::1",
    "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo, client 127.0.0.1 (obfuscated)
]
PUBLIC = [
    "1.1.1.1",
    "8.8.8.8",
    "93.184.216.34",
    "100.63.255.255",
    "100.128.0.0",
    "172.15.255.255",
    "172.32.0.0",
    "192.167.255.255",
    "192.169.0.0",
    "169.253.255.255",
    "169.255.0.0",
    "198.17.255.255",
    "198.20.0.0",
    "223.255.255.255",
    "11.0.0.1",
    "126.255.255.255",
    "128.0.0.1",
    "2001:4860:4860::8888",
    "2606:4700:4700::1111",
    "2a00:1450:4001:80b::200e",
    "::ffff:8.8.8.8",
    "64:ff9b::808:808",
    "2002:808:808::1",
]


@pytest.mark.parametrize("address", DENIED_ALWAYS)
def test_link_local_and_non_unicast_addresses_are_denied_in_both_tiers(address: str) -> None:
    ip = ipaddress.ip_address(address)
    assert deny_reason(ip) is not None
    assert deny_reason(ip, allow_private_networks=True) is not None


@pytest.mark.parametrize("address", PRIVATE)
def test_private_addresses_are_denied_unless_private_networks_are_allowed(address: str) -> None:
    ip = ipaddress.ip_address(address)
    assert deny_reason(ip) is not None
    assert deny_reason(ip, allow_private_networks=True) is None


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass_in_both_tiers(address: str) -> None:
    ip = ipaddress.ip_address(address)
    assert deny_reason(ip) is None
    assert deny_reason(ip, allow_private_networks=True) is None


def test_the_reason_names_the_range_and_the_embedding_address() -> None:
    assert deny_reason(ipaddress.ip_address("127.0.0.1")) == "loopback 127.0.0.0/8"
    assert (
        deny_reason(ipaddress.ip_address("169.254.169.254"), allow_private_networks=True)
        == "link-local 169.254.0.0/16 (cloud metadata)"
    )
    reason = deny_reason(ipaddress.ip_address("::ffff:10.0.0.1"))
    assert reason is not None
    assert reason.startswith("private RFC 1918 10.0.0.0/8, embedded in ::ffff:")


def test_a_scoped_link_local_address_is_judged_without_its_scope() -> None:
    ip = ipaddress.ip_address("fe80::1%eth0")
    assert deny_reason(ip, allow_private_networks=True) == "link-local fe80::/10"


# -- reading hosts --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("0x7F.0.0.1", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("127.0.0.1.", "127.0.0.1"),
        ("0", "0.0.0.0"),
        ("0x", "0.0.0.0"),
        ("169.254.43518", "169.254.169.254"),
        ("10.1", "10.0.0.1"),
        ("::1", "::1"),
        ("[::1]", "::1"),
        ("::ffff:127.0.0.1", "::ffff:7f00:1"),
    ],
)
def test_numeric_hosts_are_read_as_a_browser_reads_them(host: str, address: str) -> None:
    assert parse_ip_host(host) == ipaddress.ip_address(address)


@pytest.mark.parametrize(
    "host", ["example.com", "localhost", "a.b.c", "a.0x7g", "1.2.3.a", "xn--bcher-kva.de"]
)
def test_names_are_not_addresses(host: str) -> None:
    assert parse_ip_host(host) is None
    assert host_problem(host) is None


@pytest.mark.parametrize("host", ["1.2.3.256", "256.1", "08.1.1.1", "1.2.3.4.5", "foo.123", "1..2"])
def test_a_host_that_ends_in_a_number_but_is_no_address_is_refused(host: str) -> None:
    with pytest.raises(ValueError, match=r"IPv4"):
        parse_ip_host(host)
    assert host_problem(host) is not None


@pytest.mark.parametrize("host", ["", "a%20b", "a..b", "-_-.$"])
def test_a_malformed_host_name_is_refused(host: str) -> None:
    assert host_problem(host) is not None


# -- screening ------------------------------------------------------------------------------


async def test_a_literal_is_screened_without_any_resolver() -> None:
    resolver = MapResolver({})
    with pytest.raises(
        TargetBlockedError, match=r"^web_fetch refuses 127\.1 \(127\.0\.0\.1\): loopback"
    ):
        await screen("127.1", 80, allow_private_networks=False, resolver=resolver)
    assert await screen("127.1", 80, allow_private_networks=True, resolver=resolver) == [
        ipaddress.ip_address("127.0.0.1")
    ]
    assert resolver.lookups == []


async def test_one_denied_address_among_many_refuses_the_name() -> None:
    resolver = MapResolver({"mixed.test": ["127.0.0.1", "169.254.169.254"]})
    with pytest.raises(
        TargetBlockedError,
        match=r"^web_fetch refuses 'mixed\.test': it resolves to 169\.254\.169\.254 \(link-local",
    ):
        await screen("mixed.test", 80, allow_private_networks=True, resolver=resolver)


async def test_a_name_that_does_not_resolve_is_unresolvable_not_blocked() -> None:
    resolver = MapResolver({"empty.test": []})
    with pytest.raises(UnresolvableHostError, match=r"^dns lookup for 'nowhere\.test' failed: "):
        await screen("nowhere.test", 80, allow_private_networks=False, resolver=resolver)
    with pytest.raises(UnresolvableHostError, match=r"returned no address$"):
        await screen("empty.test", 80, allow_private_networks=False, resolver=resolver)


async def test_the_system_resolver_reads_localhost_from_the_hosts_file() -> None:
    addresses = await system_resolver("localhost", 80)
    assert (
        ipaddress.ip_address("127.0.0.1") in addresses or ipaddress.ip_address("::1") in addresses
    )
    assert all(ip.is_loopback for ip in addresses)


# -- the deny in action: the guard on, loopback targets --------------------------------------


@asynccontextmanager
async def guarded(**params: Any) -> AsyncIterator[tuple[WebFetchCell, LocalServer]]:
    """A web_fetch cell with the guard on and a loopback server it must never reach."""
    cell = WebFetchCell(spec_for("/fetch", params), resolver=MapResolver({}))
    try:
        async with LocalServer(fixed(Reply(body=b"secret"))) as server:
            yield cell, server
    finally:
        await cell.close()


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "127.1",
        "127.0.1",
        "2130706433",
        "0x7f000001",
        "0x7f.1",
        "0177.1",
        "127.0.0.1.",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "[::ffff:7f00:1]",
        "[::127.0.0.1]",
        "[64:ff9b::7f00:1]",
        "[2002:7f00:1::]",
        "0.0.0.0",
        "0",
    ],
)
async def test_loopback_in_every_spelling_is_refused_before_any_connect(host: str) -> None:
    async with guarded() as (cell, server):
        reply = await cell.answer(call({"url": f"http://{host}:{server.port}/"}))
        code, text = error_of(reply)
        assert code == "target_blocked", text
        assert text.startswith("web_fetch refuses ")
        assert turn_of(reply)["id"] == "call-1"
        assert server.requests == []


async def test_a_dotted_quad_with_leading_zeros_is_refused_as_malformed() -> None:
    # httpx's parser rejects what a browser would read as octal (0177.0.0.1 = 127.0.0.1):
    # refused either way, and nothing is contacted.
    async with guarded() as (cell, server):
        code, text = error_of(await cell.answer(call({"url": f"http://0177.0.0.1:{server.port}/"})))
        assert code == "invalid_input"
        assert "is not a valid URL" in text
        assert server.requests == []


async def test_localhost_through_the_system_resolver_is_refused() -> None:
    cell = WebFetchCell(spec_for("/fetch", {}))  # the real resolver: /etc/hosts answers
    try:
        async with LocalServer(fixed(Reply(body=b"secret"))) as server:
            reply = await cell.answer(call({"url": f"http://localhost:{server.port}/"}))
            code, text = error_of(reply)
            assert code == "target_blocked"
            assert text.startswith("web_fetch refuses 'localhost': it resolves to ")
            assert "loopback" in text
            assert server.requests == []
    finally:
        await cell.close()


async def test_a_name_resolving_to_loopback_is_refused_by_its_address() -> None:
    cell = WebFetchCell(
        spec_for("/fetch", {}), resolver=MapResolver({"inside.test": ["127.0.0.1"]})
    )
    try:
        async with LocalServer(fixed(Reply(body=b"secret"))) as server:
            reply = await cell.answer(call({"url": f"http://inside.test:{server.port}/"}))
            assert error_of(reply) == (
                "target_blocked",
                "web_fetch refuses 'inside.test': it resolves to 127.0.0.1 (loopback 127.0.0.0/8)",
            )
            assert server.requests == []
    finally:
        await cell.close()


async def test_allowing_private_networks_opens_loopback_but_never_link_local() -> None:
    resolver = MapResolver({"meta.test": ["169.254.169.254"]})
    cell = WebFetchCell(spec_for("/fetch", {"allow_private_networks": True}), resolver=resolver)
    try:
        async with LocalServer(fixed(Reply(body=b"open"))) as server:
            ok = await cell.answer(call({"url": server.url("/", host="127.1")}))
            assert turn_of(ok)["text"] == "open"
            for url in (
                "http://169.254.169.254/latest/meta-data/",
                "http://meta.test/",
                "http://[fe80::1]/",
            ):
                code, _text = error_of(await cell.answer(call({"url": url})))
                assert code == "target_blocked"
    finally:
        await cell.close()


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback here")
async def test_ipv6_loopback_is_reachable_only_with_private_networks_allowed() -> None:
    async with LocalServer(fixed(Reply(body=b"six")), host="::1") as server:
        for allow, expected in ((False, "target_blocked"), (True, None)):
            cell = WebFetchCell(spec_for("/fetch", {"allow_private_networks": allow}))
            try:
                reply = await cell.answer(call({"url": server.url("/")}))
            finally:
                await cell.close()
            if expected is None:
                assert turn_of(reply)["text"] == "six"
            else:
                assert error_of(reply)[0] == expected
        assert len(server.requests) == 1


async def test_every_redirect_hop_is_screened_again_after_resolution() -> None:
    """An allowed first hop redirects to a name; the name is resolved and checked again, and
    one bad address among its answers stops the chain before the second server is reached."""
    resolver = MapResolver({})
    cell = WebFetchCell(spec_for("/fetch", {"allow_private_networks": True}), resolver=resolver)
    try:
        async with (
            LocalServer(fixed(Reply(body=b"second"))) as second,
            LocalServer(fixed(redirect(second.url("/landing", host="second.test")))) as first,
        ):
            resolver.table = {"second.test": ["127.0.0.1"]}
            ok = await cell.answer(call({"url": first.url("/start")}))
            assert turn_of(ok)["text"] == "second"
            assert ok["header"]["redirects"] == 1
            assert resolver.lookups == ["second.test"]
            assert second.requests[0].headers["host"] == f"second.test:{second.port}"

            resolver.table = {"second.test": ["127.0.0.1", "169.254.169.254"]}
            code, text = error_of(await cell.answer(call({"url": first.url("/start")})))
            assert code == "target_blocked"
            assert "it resolves to 169.254.169.254" in text
            assert resolver.lookups == ["second.test", "second.test"]
            assert len(first.requests) == 2
            assert len(second.requests) == 1
    finally:
        await cell.close()


@pytest.mark.parametrize(
    "location",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:169.254.169.254]/",
        "http://[fe80::1]/",
        "http://0.0.0.0:{port}/",
        "http://meta.test:{port}/",
    ],
)
async def test_a_redirect_into_a_range_that_never_opens_is_refused_at_that_hop(
    location: str,
) -> None:
    resolver = MapResolver({"meta.test": ["169.254.169.254"]})
    cell = WebFetchCell(spec_for("/fetch", {"allow_private_networks": True}), resolver=resolver)
    try:
        async with LocalServer(fixed(Reply(body=b"never"))) as inner:
            target = location.format(port=inner.port)
            async with LocalServer(fixed(redirect(target))) as outer:
                code, text = error_of(await cell.answer(call({"url": outer.url("/")})))
                assert code == "target_blocked", text
                assert len(outer.requests) == 1
                assert inner.requests == []
    finally:
        await cell.close()


async def test_the_checked_address_is_the_one_connected_to_so_rebinding_cannot_swap_it() -> None:
    answers = [["127.0.0.1"], ["169.254.169.254"]]

    class Rebinding(MapResolver):
        async def __call__(self, host: str, port: int) -> list[Any]:
            self.table = {host: answers[min(len(self.lookups), 1)]}
            return await super().__call__(host, port)

    resolver = Rebinding({})
    cell = WebFetchCell(spec_for("/fetch", {"allow_private_networks": True}), resolver=resolver)
    try:
        async with LocalServer(fixed(Reply(body=b"pinned"))) as server:
            reply = await cell.answer(call({"url": server.url("/", host="rebind.test")}))
            assert turn_of(reply)["text"] == "pinned"
            assert resolver.lookups == ["rebind.test"]  # resolved once, by the cell
            assert server.requests[0].headers["host"] == f"rebind.test:{server.port}"
    finally:
        await cell.close()
