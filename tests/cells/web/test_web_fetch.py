"""The web_fetch cell against loopback servers: replies, redirects, the streaming cap, TLS
with the checked address, errors and params. (The private-network deny: test_ssrf.py.)"""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import shutil
import ssl
import subprocess
import time
import tracemalloc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from cells.text import TRUNCATION_MARKER
from cells.web import WEB_FETCH
from cells.web.fetch import WebFetchCell
from colony.testing import ColonyHarness, spec_for
from tests.cells.web import (
    LocalServer,
    MapResolver,
    Reply,
    Request,
    call,
    closed_port,
    error_of,
    fixed,
    redirect,
    turn_of,
)
from tests.conftest import CONTRACT, TreeFactory, hive

OPEN = {"allow_private_networks": True}


@asynccontextmanager
async def fetch_cell(
    params: dict[str, Any] | None = None, **kw: Any
) -> AsyncIterator[WebFetchCell]:
    cell = WebFetchCell(spec_for("/fetch", {**OPEN, **(params or {})}), **kw)
    try:
        yield cell
    finally:
        await cell.close()


async def fetch(url: str, params: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    async with fetch_cell(params, **kw) as cell:
        return await cell.answer(call({"url": url}))


# -- through a colony -----------------------------------------------------------------------


def fetch_tree(**params: Any) -> dict[str, Any]:
    return {
        "main/config.json": hive(
            {"from": ".", "to": "./reader"}, {"from": "./reader", "to": "/sink"}
        ),
        "main/reader/config.json": {
            "cell": {"type": "web_fetch"},
            "params": params,
            "contract": CONTRACT,
        },
    }


async def test_a_page_comes_back_as_one_tool_result_on_the_call_id(make_tree: TreeFactory) -> None:
    page = Reply(200, [("Content-Type", "text/html; charset=utf-8")], "<p>grüß</p>".encode())
    async with LocalServer(fixed(page)) as server:
        tree = make_tree(fetch_tree(**OPEN))
        async with ColonyHarness(
            tree, capture=["/sink"], cell_types={"web_fetch": WEB_FETCH}
        ) as colony:
            await colony.send("/reader", call({"url": server.url("/page?x=1")}, "c-7"))
            await colony.settle()
            [reply] = colony.captured("/sink")
            assert await colony.dead_letters() == []
    hop = reply.headers.hop
    assert hop == {
        "operation": "web_fetch",
        "http_status": 200,
        "content_type": "text/html; charset=utf-8",
        "duration_ms": hop["duration_ms"],
        "bytes": len("<p>grüß</p>".encode()),
    }
    assert isinstance(hop["duration_ms"], int)
    assert reply.body == {
        "messages": [{"origin": "tool", "type": "tool_result", "text": "<p>grüß</p>", "id": "c-7"}]
    }
    [request] = server.requests
    assert (request.method, request.target) == ("GET", "/page?x=1")
    assert request.headers["host"] == f"127.0.0.1:{server.port}"
    assert request.headers["accept-encoding"] == "identity"


async def test_an_error_reaches_the_caller_through_the_colony(make_tree: TreeFactory) -> None:
    tree = make_tree(fetch_tree())
    async with ColonyHarness(
        tree, capture=["/sink"], cell_types={"web_fetch": WEB_FETCH}
    ) as colony:
        await colony.send("/reader", call({"url": "file:///etc/passwd"}, call_id=None))
        await colony.settle()
        [reply] = colony.captured("/sink")
        assert await colony.dead_letters() == []
    assert reply.headers.hop["error_code"] == "invalid_input"
    assert reply.headers.hop["operation"] == "web_fetch"
    assert reply.body["messages"][0]["id"] == ""  # no id on the call: an empty one, still UBF


def test_the_cell_type_checks_params_and_lifts_the_backstop_over_its_own_timeout() -> None:
    assert WEB_FETCH.check_params is not None
    assert WEB_FETCH.check_params({"max_bytes": 32768}, None) == []
    assert WEB_FETCH.default_max_concurrency == 32
    assert WEB_FETCH.backstop_floor_ms is not None
    assert WEB_FETCH.backstop_floor_ms({"external_timeout_ms": 90_000}) == 95_000


# -- replies ---------------------------------------------------------------------------------


async def test_a_non_2xx_status_is_an_ordinary_result() -> None:
    async with LocalServer(fixed(Reply(404, [("Content-Type", "text/plain")], b"nope"))) as server:
        reply = await fetch(server.url("/missing"))
    assert "finish_reason" not in reply["header"]
    assert reply["header"]["http_status"] == 404
    assert turn_of(reply)["text"] == "nope"


async def test_a_missing_content_type_is_an_empty_string() -> None:
    async with LocalServer(fixed(Reply(body=b"x"))) as server:
        reply = await fetch(server.url())
    assert reply["header"]["content_type"] == ""


async def test_invalid_utf8_is_replaced_and_bytes_counts_the_decoded_text() -> None:
    async with LocalServer(fixed(Reply(body=b"a\xffb\xe2\x82"))) as server:
        reply = await fetch(server.url())
    assert turn_of(reply)["text"] == "a\ufffdb\ufffd"
    assert reply["header"]["bytes"] == len("a\ufffdb\ufffd".encode())


async def test_a_gzip_body_sent_against_our_wishes_is_decoded() -> None:
    body = gzip.compress(b"hello " * 1000)
    async with LocalServer(
        fixed(Reply(headers=[("Content-Encoding", "gzip")], body=body))
    ) as server:
        reply = await fetch(server.url())
    assert turn_of(reply)["text"] == "hello " * 1000
    assert reply["header"]["bytes"] == 6000


async def test_a_gzip_bomb_is_inflated_only_to_the_cap() -> None:
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024), compresslevel=9)
    assert len(bomb) < 200_000
    async with LocalServer(
        fixed(Reply(headers=[("Content-Encoding", "gzip")], body=bomb))
    ) as server:
        tracemalloc.start()
        try:
            reply = await fetch(server.url(), {"max_bytes": 1000})
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert reply["header"]["truncated"] is True
    assert turn_of(reply)["text"].endswith(TRUNCATION_MARKER.format(total=reply["header"]["bytes"]))
    assert peak < 8 * 1024 * 1024


# -- the cap ---------------------------------------------------------------------------------


async def test_a_body_over_max_bytes_is_cut_visibly_on_a_character_boundary() -> None:
    body = ("é" * 10).encode()  # 20 bytes, 2 each
    async with LocalServer(fixed(Reply(body=body))) as server:
        reply = await fetch(server.url(), {"max_bytes": 7})
    assert turn_of(reply)["text"] == "ééé… [truncated, 20 bytes total]"
    assert reply["header"]["truncated"] is True
    assert reply["header"]["bytes"] == 20


async def test_a_body_of_exactly_max_bytes_is_whole() -> None:
    async with LocalServer(fixed(Reply(body=b"x" * 64))) as server:
        reply = await fetch(server.url(), {"max_bytes": 64})
    assert turn_of(reply)["text"] == "x" * 64
    assert "truncated" not in reply["header"]


def fifty_megabytes(chunk: bytes = b"a" * 65536) -> Any:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(50 * 1024 * 1024 // len(chunk)):
            yield chunk

    return chunks


async def test_a_50_mb_answer_is_cut_without_being_downloaded() -> None:
    total = 50 * 1024 * 1024
    reply_spec = Reply(
        headers=[("Content-Type", "text/plain")], stream=fifty_megabytes(), length=total
    )
    async with LocalServer(fixed(reply_spec)) as server, fetch_cell() as cell:
        tracemalloc.start()
        try:
            before, _ = tracemalloc.get_traced_memory()
            started = time.perf_counter()
            reply = await cell.answer(call({"url": server.url("/big")}))
            elapsed = time.perf_counter() - started
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        await asyncio.sleep(0.05)
        sent = server.sent
    text = turn_of(reply)["text"]
    assert reply["header"]["bytes"] == total  # the declared Content-Length
    assert reply["header"]["truncated"] is True
    assert text == "a" * 262144 + TRUNCATION_MARKER.format(total=total)
    assert peak - before < 8 * 1024 * 1024, f"peak grew by {(peak - before) / 1e6:.1f} MB"
    assert sent < total / 2, f"the server got {sent / 1e6:.1f} MB out"
    assert elapsed < 10


async def test_without_a_content_length_bytes_is_what_was_read() -> None:
    async with LocalServer(fixed(Reply(stream=fifty_megabytes()))) as server:
        reply = await fetch(server.url(), {"max_bytes": 1000})
    header = reply["header"]
    assert header["truncated"] is True
    assert 1000 < header["bytes"] < 1024 * 1024
    assert turn_of(reply)["text"] == "a" * 1000 + TRUNCATION_MARKER.format(total=header["bytes"])


# -- redirects -------------------------------------------------------------------------------


def routes(table: dict[str, Reply]) -> Any:
    def handler(request: Request) -> Reply:
        return table.get(request.target, Reply(404, body=b"no route"))

    return handler


async def test_redirects_are_followed_and_reported() -> None:
    async with LocalServer(fixed(Reply(body=b"other host"))) as other:
        table = {
            "/a": redirect("/b", 301),
            "/b": redirect("c?q=1", 307),
            "/c?q=1": redirect(other.url("/end", host="other.test")),
        }
        async with LocalServer(routes(table)) as server:
            resolver = MapResolver({"other.test": ["127.0.0.1"]})
            reply = await fetch(server.url("/a"), resolver=resolver)
    header = reply["header"]
    assert turn_of(reply)["text"] == "other host"
    assert header["redirects"] == 3
    assert header["final_url"] == f"http://other.test:{other.port}/end"
    assert [r.target for r in server.requests] == ["/a", "/b", "/c?q=1"]


async def test_a_redirect_chain_longer_than_max_redirects_stops() -> None:
    async with LocalServer(lambda request: redirect(request.target + "x")) as server:
        reply = await fetch(server.url("/"), {"max_redirects": 2})
        code, text = error_of(reply)
    assert code == "too_many_redirects"
    assert (
        text
        == f"web_fetch stopped at {server.url('/xx')}: the redirect chain exceeds max_redirects = 2"
    )
    assert len(server.requests) == 3


async def test_max_redirects_zero_follows_none_and_five_is_the_default() -> None:
    async with LocalServer(lambda request: redirect(request.target + "x")) as server:
        assert (
            error_of(await fetch(server.url("/"), {"max_redirects": 0}))[0] == "too_many_redirects"
        )
        assert len(server.requests) == 1
        assert error_of(await fetch(server.url("/")))[0] == "too_many_redirects"
        assert len(server.requests) == 1 + 6


async def test_a_3xx_without_location_is_a_document() -> None:
    async with LocalServer(fixed(Reply(300, body=b"choose"))) as server:
        reply = await fetch(server.url())
    assert reply["header"]["http_status"] == 300
    assert turn_of(reply)["text"] == "choose"
    assert "redirects" not in reply["header"]


@pytest.mark.parametrize(
    "location",
    ["ftp://127.0.0.1/file", "file:///etc/passwd", "javascript:alert(1)", "http://a%20b/"],
)
async def test_a_redirect_off_http_is_invalid(location: str) -> None:
    async with LocalServer(fixed(redirect(location))) as server:
        code, text = error_of(await fetch(server.url()))
    assert code == "invalid_redirect"
    assert text.startswith("web_fetch ")
    assert server.url() in text


# -- TLS: the request goes to the checked IP, the certificate is checked against the name ----


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server context, client context trusting it) for the name fetch.test."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=fetch.test",
            "-addext",
            "subjectAltName=DNS:fetch.test",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    client = ssl.create_default_context(cafile=str(cert))
    return server, client


async def test_https_connects_to_the_checked_address_with_the_name_as_sni_and_host(
    certificate: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    server_tls, client_tls = certificate
    resolver = MapResolver({"fetch.test": ["127.0.0.1"]})
    async with LocalServer(fixed(Reply(body=b"secure")), tls=server_tls) as server:
        reply = await fetch(
            server.url("/s", host="fetch.test"), resolver=resolver, verify=client_tls
        )
        assert turn_of(reply)["text"] == "secure", reply
        [request] = server.requests
        assert request.sni == "fetch.test"
        assert request.headers["host"] == f"fetch.test:{server.port}"
        # The certificate names fetch.test only: asking for the bare IP fails verification.
        code, _text = error_of(await fetch(server.url("/s"), verify=client_tls))
        assert code == "io_error"


async def test_an_https_to_http_downgrade_is_refused(
    certificate: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    server_tls, client_tls = certificate
    resolver = MapResolver({"fetch.test": ["127.0.0.1"]})
    async with LocalServer(fixed(Reply(body=b"plain"))) as plain:
        target = plain.url("/", host="fetch.test")
        async with LocalServer(fixed(redirect(target)), tls=server_tls) as secure:
            reply = await fetch(
                secure.url("/", host="fetch.test"), resolver=resolver, verify=client_tls
            )
    code, text = error_of(reply)
    assert code == "invalid_redirect"
    assert text.endswith("https must not be downgraded to http")
    assert plain.requests == []


async def test_an_http_to_https_upgrade_is_followed(
    certificate: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    server_tls, client_tls = certificate
    resolver = MapResolver({"fetch.test": ["127.0.0.1"]})
    async with LocalServer(fixed(Reply(body=b"upgraded")), tls=server_tls) as secure:
        to_secure = redirect(secure.url("/", host="fetch.test"))
        async with LocalServer(fixed(to_secure)) as plain:
            reply = await fetch(plain.url("/"), resolver=resolver, verify=client_tls)
    assert turn_of(reply)["text"] == "upgraded"
    assert reply["header"]["final_url"] == f"https://fetch.test:{secure.port}/"


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "text"),
    [
        ({}, "args.url missing or not a string"),
        ({"url": 7}, "args.url missing or not a string"),
        ({"url": ""}, "args.url is empty"),
        (
            {"url": "file:///etc/passwd"},
            'args.url "file:///etc/passwd" uses scheme "file"; web_fetch speaks http and https only',
        ),
        (
            {"url": "ftp://example.com/"},
            'args.url "ftp://example.com/" uses scheme "ftp"; web_fetch speaks http and https only',
        ),
        (
            {"url": "not a url"},
            'args.url "not a url" is not a valid URL: relative URL without a base',
        ),
        (
            {"url": "http:///nohost"},
            'args.url "http:///nohost" is not a valid URL: it names no host',
        ),
        (
            {"url": "http://a b/"},
            "args.url \"http://a b/\" is not a valid URL: 'a%20b' is not a valid host name",
        ),
        ({"url": "http://1.2.3.256/"}, None),
        ({"url": "http://[::1/"}, None),
    ],
)
async def test_a_url_that_cannot_be_fetched_is_invalid_input(
    args: dict[str, Any], text: str | None
) -> None:
    resolver = MapResolver({})
    async with fetch_cell(resolver=resolver) as cell:
        reply = await cell.answer(call(args))
    code, got = error_of(reply)
    assert code == "invalid_input"
    if text is not None:
        assert got == text
    assert turn_of(reply)["id"] == "call-1"
    assert resolver.lookups == []


@pytest.mark.parametrize(
    ("body", "text", "call_id"),
    [
        ({}, "body.messages[] missing or not an array", ""),
        (
            {"messages": [{"origin": "user", "type": "text", "text": "hi"}]},
            "no tool_call turn in messages[]",
            "",
        ),
        (
            {"messages": [call({"url": "x"})["messages"][0]] * 2},
            "expected exactly one tool_call turn, found 2",
            "",
        ),
        (
            {"messages": [{"origin": "assistant", "type": "tool_call", "id": "k"}]},
            "tool_call.text missing or not a string",
            "k",
        ),
        (
            {"messages": [{"origin": "assistant", "type": "tool_call", "id": "k", "text": "[1]"}]},
            "tool_call.text JSON must be an object",
            "k",
        ),
    ],
)
async def test_a_malformed_call_is_invalid_input_on_its_id_once_its_turn_is_found(
    body: Any, text: str, call_id: str
) -> None:
    async with fetch_cell() as cell:
        reply = await cell.answer(body)
    assert error_of(reply) == ("invalid_input", text)
    assert turn_of(reply)["id"] == call_id
    assert reply["header"]["operation"] == "web_fetch"


async def test_a_refused_connection_is_an_io_error() -> None:
    url = f"http://127.0.0.1:{closed_port()}/"
    code, text = error_of(await fetch(url))
    assert code == "io_error"
    assert text.startswith(f"web_fetch could not fetch {url}: ")


async def test_an_unresolvable_name_is_an_io_error() -> None:
    reply = await fetch("http://nowhere.test/", resolver=MapResolver({}))
    code, text = error_of(reply)
    assert code == "io_error"
    assert text.startswith("dns lookup for 'nowhere.test' failed: ")


async def test_a_refused_address_falls_back_to_the_next_checked_one() -> None:
    resolver = MapResolver({"two.test": []})
    async with LocalServer(fixed(Reply(body=b"second address"))) as server:
        # 127.0.0.2 is loopback but nothing listens there on this port.
        resolver.table = {"two.test": ["127.0.0.2", "127.0.0.1"]}
        reply = await fetch(server.url("/", host="two.test"), resolver=resolver)
    assert turn_of(reply)["text"] == "second address"


async def test_a_server_that_never_answers_times_out() -> None:
    async with LocalServer(fixed(Reply(hang=True))) as server:
        started = time.perf_counter()
        reply = await fetch(server.url(), {"external_timeout_ms": 300})
        elapsed = time.perf_counter() - started
    assert error_of(reply) == ("timeout", "web_fetch timed out after 300ms")
    assert turn_of(reply)["id"] == "call-1"
    assert 0.25 < elapsed < 5


async def test_the_timeout_covers_the_whole_redirect_chain() -> None:
    async def slow(request: Request) -> Reply:
        await asyncio.sleep(0.15)
        return redirect(request.target + "x")

    async with LocalServer(slow) as server:
        reply = await fetch(server.url("/"), {"external_timeout_ms": 400, "max_redirects": 50})
    assert error_of(reply)[0] == "timeout"


async def test_concurrent_fetches_share_one_cell() -> None:
    async def slow(request: Request) -> Reply:
        await asyncio.sleep(0.2)
        return Reply(body=request.target.encode())

    async with LocalServer(slow) as server, fetch_cell() as cell:
        started = time.perf_counter()
        replies = await asyncio.gather(
            *(cell.answer(call({"url": server.url(f"/{i}")})) for i in range(8))
        )
        elapsed = time.perf_counter() - started
    assert [turn_of(r)["text"] for r in replies] == [f"/{i}" for i in range(8)]
    assert elapsed < 1.5


# -- params ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "key"),
    [
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"external_timeout_ms": 0}, "external_timeout_ms"),
        ({"max_bytes": 0}, "max_bytes"),
        ({"max_redirects": -1}, "max_redirects"),
        ({"allow_private_networks": "yes"}, "allow_private_networks"),
        ({"allow_private_networks": 1}, "allow_private_networks"),
        ({"max_bytes": "1000"}, "max_bytes"),
        ({"follow_redirects": True}, "follow_redirects"),
    ],
)
def test_bad_params_are_reported_by_validate(params: dict[str, Any], key: str) -> None:
    assert WEB_FETCH.check_params is not None
    [problem] = WEB_FETCH.check_params(params, None)
    assert problem.path == (key,)


def test_the_defaults() -> None:
    from cells.web.fetch import WebFetchParams

    assert WebFetchParams().model_dump() == {
        "external_timeout_ms": 30_000,
        "max_concurrency": 32,
        "max_bytes": 262_144,
        "allow_private_networks": False,
        "max_redirects": 5,
    }


async def test_a_resolver_can_be_injected_through_the_cell_type(make_tree: TreeFactory) -> None:
    resolver = MapResolver({"named.test": ["127.0.0.1"]})
    custom = dataclasses.replace(
        WEB_FETCH, factory=lambda spec: WebFetchCell(spec, resolver=resolver)
    )
    async with LocalServer(fixed(Reply(body=b"named"))) as server:
        tree = make_tree(fetch_tree(**OPEN))
        async with ColonyHarness(
            tree, capture=["/sink"], cell_types={"web_fetch": custom}
        ) as colony:
            await colony.send("/reader", call({"url": server.url("/", host="named.test")}))
            await colony.settle()
            [reply] = colony.captured("/sink")
    assert reply.body["messages"][0]["text"] == "named"
    assert resolver.lookups == ["named.test"]
