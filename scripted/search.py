"""A scripted search engine and web site on loopback, for the ``web_search``/``web_fetch`` cells.

Tests and the offline demo point a ``web_search`` cell's ``endpoint`` at :attr:`ScriptedSearch.
search_url` and let a ``web_fetch`` cell (with ``allow_private_networks: true``) read the
result pages, so both cells run their real HTTP code while no byte leaves 127.0.0.0/8::

    async with ScriptedSearch() as search:          # fixtures/search-corpus.json
        search.search_url                             # http://127.0.0.1:PORT/search
        search.add_page("/big.html", "x" * 200_000)  # any extra page, served as given
        search.queries                                # every q= received, in order
        search.fetched                                # every page path served, in order

``GET /search?q=...`` answers ``{"results": [{"title", "url", "snippet"}, ...]}``: the corpus
documents sharing at least one word with the query, best first (most distinct query words
found, then most found in the title, then corpus order), at most :attr:`max_results`. Every
``url`` is absolute, on this server; ``GET`` of its path serves the document as a small HTML
page (title and body). Anything else is a 404.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from aiohttp import web

__all__ = ["DEFAULT_CORPUS", "ScriptedSearch", "load_corpus", "words"]

DEFAULT_CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "search-corpus.json"
"""The corpus shipped with the project (eight short documents)."""

_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "do",
        "does",
        "for",
        "from",
        "how",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "their",
        "them",
        "they",
        "this",
        "to",
        "was",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "with",
    ]
)


def words(text: str) -> set[str]:
    """The lower-cased words of ``text`` (letters and digits), stop words left out."""
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _STOPWORDS}


def load_corpus(path: str | Path = DEFAULT_CORPUS) -> list[dict[str, str]]:
    """The ``documents`` of a corpus file: ``{"title", "url" (a path), "snippet", "body"}``."""
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    documents: list[dict[str, str]] = doc["documents"] if isinstance(doc, dict) else doc
    for n, entry in enumerate(documents):
        missing = {"title", "url", "snippet", "body"} - entry.keys()
        if missing:
            raise ValueError(f"{path}: document {n} lacks {', '.join(sorted(missing))}")
        if not entry["url"].startswith("/"):
            raise ValueError(f"{path}: document {n}'s url must be a path starting with '/'")
    return documents


def _page(title: str, body: str) -> str:
    from html import escape

    return (
        '<!doctype html>\n<html><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title></head>\n"
        f"<body><h1>{escape(title)}</h1>\n<p>{escape(body)}</p></body></html>\n"
    )


class ScriptedSearch:
    """A search endpoint over a small corpus plus the corpus's pages, on 127.0.0.1."""

    def __init__(
        self,
        corpus: str | Path | Sequence[Mapping[str, str]] = DEFAULT_CORPUS,
        *,
        max_results: int = 10,
        host: str = "127.0.0.1",
    ) -> None:
        import ipaddress

        if not ipaddress.ip_address(host).is_loopback:
            raise ValueError(f"scripted servers bind loopback addresses only, not {host!r}")
        if isinstance(corpus, str | Path):
            self.documents = load_corpus(corpus)
        else:
            self.documents = [dict(d) for d in corpus]
        self.max_results = max_results
        self._host = host
        self._pages: dict[str, tuple[str, str]] = {
            d["url"]: (_page(d["title"], d["body"]), "text/html; charset=utf-8")
            for d in self.documents
        }
        self._runner: web.AppRunner | None = None
        self._port = 0
        self.queries: list[str] = []
        """Every ``q`` the search endpoint received, in order."""
        self.fetched: list[str] = []
        """Every page path served (200), in order."""

    # -- lifecycle -----------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        app = web.Application()
        app.router.add_get("/search", self._search)
        app.router.add_get("/{tail:.*}", self._serve_page)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, 0)
        await site.start()
        server = site._server  # aiohttp keeps the listening server here
        assert server is not None
        sockets = getattr(server, "sockets", None) or []
        self._port = int(sockets[0].getsockname()[1])
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    # -- addresses -----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The server's root, ``http://127.0.0.1:PORT``."""
        if self._runner is None:
            raise RuntimeError("the scripted search server is not running (use 'async with')")
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self._port}"

    @property
    def search_url(self) -> str:
        """The ``endpoint`` to give a ``web_search`` cell."""
        return f"{self.url}/search"

    def page_url(self, path: str) -> str:
        """The absolute URL of a page path (a corpus ``url`` or one given to :meth:`add_page`)."""
        return f"{self.url}{path}"

    # -- content -------------------------------------------------------------------------------

    def add_page(
        self, path: str, text: str, content_type: str = "text/plain; charset=utf-8"
    ) -> str:
        """Serve ``text`` at ``path`` (not searchable); returns its absolute URL."""
        if not path.startswith("/"):
            raise ValueError("a page path starts with '/'")
        self._pages[path] = (text, content_type)
        return self.page_url(path) if self._runner is not None else path

    def rank(self, query: str) -> list[dict[str, str]]:
        """The documents matching ``query``, best first, as ``{title, url, snippet}``."""
        wanted = words(query)
        scored = []
        for position, d in enumerate(self.documents):
            found = wanted & words(f"{d['title']} {d['snippet']} {d['body']}")
            if found:
                in_title = len(wanted & words(d["title"]))
                scored.append((-len(found), -in_title, position, d))
        scored.sort(key=lambda s: s[:3])
        return [
            {"title": d["title"], "url": self.page_url(d["url"]), "snippet": d["snippet"]}
            for *_, d in scored[: self.max_results]
        ]

    # -- handlers ------------------------------------------------------------------------------

    async def _search(self, request: web.Request) -> web.Response:
        query = request.query.get("q", "")
        self.queries.append(query)
        body: dict[str, Any] = {"results": self.rank(query)}
        return web.json_response(body)

    async def _serve_page(self, request: web.Request) -> web.Response:
        page = self._pages.get(request.path)
        if page is None:
            return web.Response(status=404, text=f"no page at {request.path}\n")
        self.fetched.append(request.path)
        text, content_type = page
        return web.Response(body=text.encode("utf-8"), headers={"Content-Type": content_type})
