"""Where ``web_fetch`` may connect: the private-network deny (decisions.md #19).

``web_fetch`` runs inside the daemon, so no process sandbox covers it: whatever egress policy
it has, it enforces here. Three pieces:

* :func:`parse_ip_host` reads a URL host the way a browser does — ``127.1``, ``0x7f.1``,
  ``2130706433`` and ``0177.0.0.1`` are all 127.0.0.1 — so a disguised address is judged as
  the address it is, without ever reaching a resolver;
* :func:`deny_reason` classifies one address (IPv6 forms that carry an IPv4 address are judged
  by that address);
* :func:`screen` resolves a host (through a :data:`Resolver`, ``loop.getaddrinfo`` unless a
  test supplies its own), refuses it if **any** address is denied, and returns the addresses
  that passed. The caller connects to those addresses and no others, so a second resolution
  cannot swap in a different one (DNS rebinding).

Two tiers. By default everything that is not the open internet is refused. With
``allow_private_networks`` loopback, RFC 1918, CGNAT, ULA and site-local open up — the ranges a
local topology (a test server, a service on the same host) can legitimately live in. Link-local
stays shut in both: 169.254.169.254 is the cloud metadata endpoint, and nothing one means to
reach lives at a link-local address. Multicast, unspecified, reserved and broadcast stay shut
too: they are never a web server.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

Resolver = Callable[[str, int], Awaitable[Sequence[IpAddress]]]
"""``(host, port) -> addresses``; raises :class:`OSError` when the name does not resolve."""


class TargetBlockedError(Exception):
    """The target resolves into a denied range (``target_blocked``)."""


class UnresolvableHostError(Exception):
    """The host name did not resolve (``io_error``: a transport fact, not a policy)."""


@dataclass(frozen=True, slots=True)
class _Range:
    network: ipaddress.IPv4Network | ipaddress.IPv6Network
    reason: str
    private: bool
    """Opened by ``allow_private_networks``."""


def _v4(cidr: str, reason: str, *, private: bool = False) -> _Range:
    return _Range(ipaddress.IPv4Network(cidr), reason, private)


def _v6(cidr: str, reason: str, *, private: bool = False) -> _Range:
    return _Range(ipaddress.IPv6Network(cidr), reason, private)


# Every range that is not the open internet (IANA special-purpose registries), most specific
# first where they nest. The reasons are what a refusal says.
_V4_RANGES: tuple[_Range, ...] = (
    _v4("0.0.0.0/8", "unspecified / this-network 0.0.0.0/8"),
    _v4("10.0.0.0/8", "private RFC 1918 10.0.0.0/8", private=True),
    _v4("100.64.0.0/10", "shared address space (CGNAT) RFC 6598 100.64.0.0/10", private=True),
    _v4("127.0.0.0/8", "loopback 127.0.0.0/8", private=True),
    _v4("169.254.0.0/16", "link-local 169.254.0.0/16 (cloud metadata)"),
    _v4("172.16.0.0/12", "private RFC 1918 172.16.0.0/12", private=True),
    _v4("192.0.0.0/24", "IETF protocol assignments 192.0.0.0/24"),
    _v4("192.0.2.0/24", "documentation 192.0.2.0/24"),
    _v4("192.168.0.0/16", "private RFC 1918 192.168.0.0/16", private=True),
    _v4("198.18.0.0/15", "benchmarking 198.18.0.0/15"),
    _v4("198.51.100.0/24", "documentation 198.51.100.0/24"),
    _v4("203.0.113.0/24", "documentation 203.0.113.0/24"),
    _v4("224.0.0.0/4", "multicast 224.0.0.0/4"),
    _v4("255.255.255.255/32", "broadcast 255.255.255.255"),
    _v4("240.0.0.0/4", "reserved 240.0.0.0/4"),
)
_V6_RANGES: tuple[_Range, ...] = (
    _v6("::/128", "unspecified ::"),
    _v6("::1/128", "loopback ::1", private=True),
    _v6("64:ff9b:1::/48", "local-use NAT64 64:ff9b:1::/48"),
    _v6("100::/64", "discard-only 100::/64"),
    _v6("2001:db8::/32", "documentation 2001:db8::/32"),
    _v6("fc00::/7", "unique local fc00::/7", private=True),
    _v6("fe80::/10", "link-local fe80::/10"),
    _v6("fec0::/10", "site-local fec0::/10 (deprecated)", private=True),
    _v6("ff00::/8", "multicast ff00::/8"),
)
_V4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")


def _embedded_v4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries: v4-mapped ``::ffff:a.b.c.d``, the
    deprecated v4-compatible ``::a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16`` and
    Teredo (server and de-obfuscated client). Judging those is what keeps
    ``::ffff:127.0.0.1`` from walking past a deny that only knows ``127.0.0.1``."""
    if ip.ipv4_mapped is not None:
        return [ip.ipv4_mapped]
    low32 = ipaddress.IPv4Address(int(ip) & 0xFFFF_FFFF)
    if ip in _V4_COMPATIBLE and int(ip) > 1:  # :: and ::1 are themselves, not 0.0.0.x
        return [low32]
    if ip in _NAT64:
        return [low32]
    if ip.sixtofour is not None:
        return [ip.sixtofour]
    if ip.teredo is not None:
        return list(ip.teredo)
    return []


def deny_reason(ip: IpAddress, *, allow_private_networks: bool = False) -> str | None:
    """Why ``ip`` may not be contacted under this policy, or None when it may."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id is not None:
            ip = ipaddress.IPv6Address(int(ip))  # fe80::1%eth0 is judged as fe80::1
        for embedded in _embedded_v4(ip):
            reason = deny_reason(embedded, allow_private_networks=allow_private_networks)
            if reason is not None:
                return f"{reason}, embedded in {ip}"
        ranges = _V6_RANGES
    else:
        ranges = _V4_RANGES
    for entry in ranges:
        if ip in entry.network:
            if allow_private_networks and entry.private:
                return None
            return entry.reason
    return None


# -- reading a host -------------------------------------------------------------------------

_HOST_NAME = re.compile(r"^[a-z0-9_-]+(\.[a-z0-9_-]+)*\.?$")


def _ends_in_number(labels: list[str]) -> bool:
    last = labels[-1]
    if last.isdigit() and last.isascii():
        return True
    return last[:2] in ("0x", "0X") and all(c in "0123456789abcdefABCDEF" for c in last[2:])


def _ipv4_part(part: str) -> int:
    if part[:2] in ("0x", "0X"):
        return int(part[2:] or "0", 16)
    if len(part) > 1 and part.startswith("0"):
        return int(part[1:], 8)
    return int(part, 10)


def parse_ip_host(host: str) -> IpAddress | None:
    """The address a URL host spells, or None when it is a name.

    IPv4 follows the WHATWG URL standard: one to four dot-separated parts, each decimal,
    octal (leading ``0``) or hex (``0x``); the last part fills the remaining bytes. A host that
    ends in a number but is no valid address raises :class:`ValueError` (a browser refuses it
    too), so such a string never reaches a resolver. IPv6 literals come without brackets (as
    ``httpx.URL.host`` gives them) or with them.
    """
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if ":" in host:
        return ipaddress.IPv6Address(host)
    labels = host.split(".")
    if len(labels) > 1 and labels[-1] == "":
        labels.pop()
    if not labels or not labels[-1] or not _ends_in_number(labels):
        return None
    if len(labels) > 4 or any(not label for label in labels):
        raise ValueError(f"{host!r} ends in a number but is not an IPv4 address")
    try:
        numbers = [_ipv4_part(label) for label in labels]
    except ValueError:
        raise ValueError(f"{host!r} ends in a number but is not an IPv4 address") from None
    if any(n > 255 for n in numbers[:-1]) or numbers[-1] >= 256 ** (5 - len(numbers)):
        raise ValueError(f"{host!r} is out of the IPv4 range")
    value = numbers[-1]
    for index, number in enumerate(numbers[:-1]):
        value += number << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


def host_problem(host: str) -> str | None:
    """Why ``host`` (ASCII, as ``httpx.URL.raw_host`` decodes) cannot be fetched, or None."""
    if not host:
        return "it names no host"
    try:
        if parse_ip_host(host) is not None:
            return None
    except ValueError as exc:
        return str(exc)
    if not _HOST_NAME.match(host.lower()):
        return f"{host!r} is not a valid host name"
    return None


# -- resolving and screening ----------------------------------------------------------------


async def system_resolver(host: str, port: int) -> list[IpAddress]:
    """The system resolver (``loop.getaddrinfo``, run off the event loop), deduplicated in
    the order the resolver prefers."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    seen: dict[IpAddress, None] = {}
    for _family, _type, _proto, _name, sockaddr in infos:
        seen.setdefault(ipaddress.ip_address(str(sockaddr[0])), None)
    return list(seen)


async def screen(
    host: str, port: int, *, allow_private_networks: bool, resolver: Resolver
) -> list[IpAddress]:
    """The addresses of ``host`` that may be contacted, all of them checked.

    Deny-if-any, not deny-if-all: a name mixing a public and a private address is the shape a
    rebinding attacker hands out, and there is no honest reason to pick the public one.
    Raises :class:`TargetBlockedError` or :class:`UnresolvableHostError`.
    """
    literal = parse_ip_host(host)
    if literal is not None:
        reason = deny_reason(literal, allow_private_networks=allow_private_networks)
        if reason is not None:
            shown = host if host.strip("[]") == str(literal) else f"{host} ({literal})"
            raise TargetBlockedError(f"web_fetch refuses {shown}: {reason}")
        return [literal]
    try:
        addresses = list(await resolver(host, port))
    except (OSError, UnicodeError) as exc:
        raise UnresolvableHostError(f"dns lookup for {host!r} failed: {exc}") from None
    if not addresses:
        raise UnresolvableHostError(f"dns lookup for {host!r} returned no address")
    for ip in addresses:
        reason = deny_reason(ip, allow_private_networks=allow_private_networks)
        if reason is not None:
            raise TargetBlockedError(f"web_fetch refuses {host!r}: it resolves to {ip} ({reason})")
    return addresses
