"""The ``web_fetch`` cell: GET one URL, the body as one tool result.

Every hop — the URL the call names and every redirect after it — goes through the same three
steps:

1. **screen**: the host is resolved here (``loop.getaddrinfo``, or the resolver a test
   passes) and every address it resolves to is checked against the private-network deny
   (:mod:`cells.web.ssrf`); one denied address refuses the hop (``target_blocked``);
2. **connect to the checked address**: the request goes to the IP itself, with the ``Host``
   header set to the URL's host and, for https, the TLS server name (SNI, and the name the
   certificate is verified against) set to it too. Nothing resolves the name a second time,
   so DNS rebinding cannot swap the address between the check and the connect. When an
   address refuses the connection the next checked one is tried;
3. **redirects by hand**: a 3xx with ``Location`` is followed (up to ``max_redirects``) unless
   it leaves http(s) or drops https for http (``invalid_redirect``); a 3xx without one is a
   document.

Requests go through a bare httpx transport: connections are never reused (a pooled TLS
connection to an IP must not serve a second host name), no cookies are kept, no credentials
from the URL are sent, and proxy environment variables are ignored. The body is streamed:
reading stops a few bytes past ``max_bytes``, so a 50 MB answer costs ``max_bytes`` plus one
network chunk of memory.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from cells.redact import Redactor
from cells.text import cut_visibly, utf8_len
from cells.toolcall import (
    ToolCallError,
    elapsed_ms,
    parse_tool_call,
    string_arg,
    tool_error,
    tool_result,
)
from cells.web.common import human_duration, lossy_utf8, lossy_utf8_prefix, read_capped
from cells.web.ssrf import (
    IpAddress,
    Resolver,
    TargetBlockedError,
    UnresolvableHostError,
    host_problem,
    parse_ip_host,
    screen,
    system_resolver,
)
from colony.cell import CellSpec, Emission
from colony.envelope import Envelope, JsonObject

DEFAULT_PORTS = {"http": 80, "https": 443}
USER_AGENT = "colony-web-fetch/1"
_INFLATED = frozenset({"gzip", "x-gzip", "deflate"})
_INFLATE_STEP = 64 * 1024
"""Most bytes one decompression step may produce (a small gzip can inflate enormously)."""


_REDACTOR = Redactor()
"""web_fetch holds no secret of its own: its error texts lose secret shapes only."""


class WebFetchParams(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)

    external_timeout_ms: Annotated[int, Field(ge=1)] = 30_000
    """Wall clock for the whole fetch: every resolution, hop and the body (``timeout``)."""
    max_concurrency: Annotated[int, Field(ge=1)] = 32
    max_bytes: Annotated[int, Field(ge=1)] = 256 * 1024
    """The body is read to just past this many bytes and the text cut visibly there."""
    allow_private_networks: bool = False
    """Open loopback, RFC 1918, CGNAT, ULA and site-local (never link-local)."""
    max_redirects: Annotated[int, Field(ge=0)] = 5
    """Redirects followed before ``too_many_redirects``; 0 follows none."""


@dataclass(frozen=True, slots=True)
class Fetched:
    """The final response of a fetch, its body already read (and possibly cut)."""

    status: int
    content_type: str
    text: str
    """The body as lossy UTF-8, cut visibly past ``max_bytes``."""
    bytes: int
    truncated: bool
    redirects: int
    final_url: str


def _quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def url_problem(url: httpx.URL) -> str | None:
    """Why ``url`` cannot be fetched, or None: it must be absolute http(s) with a valid host."""
    if not url.scheme:
        return "relative URL without a base"
    if url.scheme not in DEFAULT_PORTS:
        return f"scheme {_quoted(url.scheme)} is not http or https"
    return host_problem(url.raw_host.decode("ascii"))


def parse_url(raw: str) -> httpx.URL:
    """The ``url`` argument, parsed (``invalid_input`` when it cannot be fetched)."""
    try:
        url = httpx.URL(raw)
    except (httpx.InvalidURL, ValueError) as exc:
        raise ToolCallError(
            "invalid_input", f"args.url {_quoted(raw)} is not a valid URL: {exc}"
        ) from None
    if url.scheme and url.scheme not in DEFAULT_PORTS:
        raise ToolCallError(
            "invalid_input",
            f"args.url {_quoted(raw)} uses scheme {_quoted(url.scheme)}; "
            "web_fetch speaks http and https only",
        )
    problem = url_problem(url)
    if problem is not None:
        raise ToolCallError(
            "invalid_input", f"args.url {_quoted(raw)} is not a valid URL: {problem}"
        )
    return url


def next_hop(current: httpx.URL, location: str) -> httpx.URL:
    """Where a ``Location`` leads from ``current`` (``invalid_redirect`` when refused)."""
    try:
        target = current.join(location)
    except (httpx.InvalidURL, ValueError) as exc:
        raise ToolCallError(
            "invalid_redirect",
            f"web_fetch cannot follow the redirect from {current} to {_quoted(location)}: {exc}",
        ) from None
    if target.scheme not in DEFAULT_PORTS:
        raise ToolCallError(
            "invalid_redirect",
            f"web_fetch refuses the redirect from {current} to {target}: "
            f"scheme {_quoted(target.scheme)} is not http or https",
        )
    # An https→http hop the caller never saw would put the rest of the chain in the clear,
    # where whoever sits on the path picks the response. The upgrade direction is fine.
    if current.scheme == "https" and target.scheme == "http":
        raise ToolCallError(
            "invalid_redirect",
            f"web_fetch refuses the redirect from {current} to {target}: "
            "https must not be downgraded to http",
        )
    problem = url_problem(target)
    if problem is not None:
        raise ToolCallError(
            "invalid_redirect",
            f"web_fetch cannot follow the redirect from {current} to {target}: {problem}",
        )
    return target


def _host_header(url: httpx.URL) -> str:
    host = url.raw_host.decode("ascii")
    if ":" in host:
        host = f"[{host}]"
    return host if url.port is None else f"{host}:{url.port}"


async def _inflate(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """gzip/deflate bodies decoded in bounded steps, so the reader's cap also bounds what a
    compressed body inflates to."""
    decoder = zlib.decompressobj(zlib.MAX_WBITS | 32)  # a gzip or zlib header
    try:
        async for chunk in chunks:
            data = chunk
            while data and not decoder.eof:
                yield decoder.decompress(data, _INFLATE_STEP)
                data = decoder.unconsumed_tail
            if decoder.eof:
                break
        yield decoder.flush()
    finally:
        close = getattr(chunks, "aclose", None)
        if close is not None:
            await close()


class WebFetchCell:
    def __init__(
        self,
        spec: CellSpec,
        *,
        resolver: Resolver | None = None,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        """``resolver`` and ``verify`` are for tests: a resolver mapping test host names to
        loopback, and a context trusting a test certificate."""
        self.params = WebFetchParams.model_validate({} if spec.params is None else spec.params)
        self.path = spec.path
        self.log = spec.log
        self.resolver: Resolver = resolver or system_resolver
        # A bare transport, not a client: no cookie jar, no redirect machinery of its own,
        # no proxy from the environment, and no connection kept for a second request.
        self.transport = httpx.AsyncHTTPTransport(
            verify=verify,
            trust_env=False,
            limits=httpx.Limits(max_keepalive_connections=0),
        )

    async def close(self) -> None:
        await self.transport.aclose()

    async def handle(self, message: Envelope) -> list[Emission]:
        return [Emission(await self.answer(message.body), message.reply_to or self.path)]

    async def answer(self, body: Any) -> JsonObject:
        """The reply to one message body."""
        started = time.perf_counter()
        try:
            call = parse_tool_call(body)
        except ToolCallError as failure:
            return self._error(failure.code, failure.text, failure.call_id, started)
        call_id = call.id
        try:
            url = parse_url(string_arg(call.args, "url"))
            async with asyncio.timeout(self.params.external_timeout_ms / 1000):
                fetched = await self.fetch(url)
        except ToolCallError as failure:
            return self._error(failure.code, failure.text, call_id, started)
        except TimeoutError:
            text = f"web_fetch timed out after {human_duration(self.params.external_timeout_ms)}"
            return self._error("timeout", text, call_id, started)
        header: JsonObject = {
            "operation": "web_fetch",
            "http_status": fetched.status,
            "content_type": fetched.content_type,
            "duration_ms": elapsed_ms(started),
            "bytes": fetched.bytes,
        }
        if fetched.truncated:
            header["truncated"] = True
        if fetched.redirects:
            header["redirects"] = fetched.redirects
            header["final_url"] = fetched.final_url
        if self.log is not None:
            self.log.debug(
                "web_fetch_ok",
                cell=self.path,
                http_status=fetched.status,
                bytes=fetched.bytes,
                redirects=fetched.redirects,
            )
        return tool_result(fetched.text, call_id, header)

    def _error(self, code: str, text: str, call_id: str | None, started: float) -> JsonObject:
        if self.log is not None:
            self.log.info("web_fetch_error", cell=self.path, error_code=code)
        header: JsonObject = {"operation": "web_fetch", "duration_ms": elapsed_ms(started)}
        # An error quotes URLs and library messages: a password or a key in them stays out.
        return tool_error(code, _REDACTOR.text(text), call_id, header)

    # -- the fetch ----------------------------------------------------------------------------

    async def fetch(self, url: httpx.URL) -> Fetched:
        """GET ``url``, screening and following redirects hop by hop; raises
        :class:`ToolCallError`. The caller bounds it in time."""
        current = url
        redirects = 0
        while True:
            response = await self._request(current)
            try:
                location = (
                    response.headers.get("location") if 300 <= response.status_code < 400 else None
                )
                if location is None:
                    return await self._read(response, redirects, current)
                if redirects >= self.params.max_redirects:
                    raise ToolCallError(
                        "too_many_redirects",
                        f"web_fetch stopped at {current}: the redirect chain exceeds "
                        f"max_redirects = {self.params.max_redirects}",
                    )
                current = next_hop(current, location)
                redirects += 1
            finally:
                await response.aclose()

    async def _request(self, url: httpx.URL) -> httpx.Response:
        """Send the GET for one hop to a checked address; the body is still unread."""
        host = url.raw_host.decode("ascii")
        port = url.port or DEFAULT_PORTS[url.scheme]
        try:
            addresses = await screen(
                host,
                port,
                allow_private_networks=self.params.allow_private_networks,
                resolver=self.resolver,
            )
        except TargetBlockedError as exc:
            raise ToolCallError("target_blocked", str(exc)) from None
        except UnresolvableHostError as exc:
            raise ToolCallError("io_error", str(exc)) from None
        headers = {
            "Host": _host_header(url),
            "Accept": "*/*",
            "Accept-Encoding": "identity",
            "User-Agent": USER_AGENT,
        }
        named = parse_ip_host(host) is None
        extensions = {"sni_hostname": host} if url.scheme == "https" and named else {}
        failure: Exception | None = None
        for address in addresses:
            request = httpx.Request(
                "GET", _dial(url, address), headers=headers, extensions=extensions
            )
            try:
                response = await self.transport.handle_async_request(request)
            except httpx.ConnectError as exc:
                failure = exc  # this address refused: try the next checked one
                continue
            except (httpx.HTTPError, OSError) as exc:
                failure = exc
                break
            response.request = request
            return response
        detail = (str(failure) or type(failure).__name__) if failure else "no address"
        raise ToolCallError("io_error", f"web_fetch could not fetch {url}: {detail}")

    async def _read(self, response: httpx.Response, redirects: int, url: httpx.URL) -> Fetched:
        """Read the body of the final response up to just past ``max_bytes``."""
        max_bytes = self.params.max_bytes
        encoding = response.headers.get("content-encoding", "").strip().lower()
        inflating = encoding in _INFLATED
        chunks = response.aiter_raw()
        if inflating:
            chunks = _inflate(chunks)
        # Three bytes past the cap: the incremental decoder may hold back an unfinished
        # character of up to three bytes, and the text must still exceed the cap to be cut.
        try:
            data, complete = await read_capped(chunks, max_bytes + 3)
        except (httpx.HTTPError, OSError, zlib.error) as exc:
            detail = str(exc) or type(exc).__name__
            raise ToolCallError("io_error", f"web_fetch could not read {url}: {detail}") from None
        if complete:
            text = lossy_utf8(data)
            total = utf8_len(text)
            shown, truncated = cut_visibly(text, max_bytes)
        else:
            total = len(data)
            declared = response.headers.get("content-length", "")
            if not inflating and declared.isdigit():
                total = max(total, int(declared))
            shown, truncated = cut_visibly(lossy_utf8_prefix(data), max_bytes, total=total)
        return Fetched(
            status=response.status_code,
            content_type=response.headers.get("content-type", ""),
            text=shown,
            bytes=total,
            truncated=truncated,
            redirects=redirects,
            final_url=str(url),
        )


def _dial(url: httpx.URL, address: IpAddress) -> httpx.URL:
    return url.copy_with(host=str(address))
