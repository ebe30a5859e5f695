"""The web console at ``/ui/``: a page of static files that reads the daemon's own API.

Nothing here holds data. The page (``static/``) calls ``/colony/*`` and ``/colony/events``
from the browser with the same bearer token as any client, so the assets themselves are
served without one (``is_console_path``): a browser cannot attach a header to a page it
navigates to. The files are read once, when the routes are added, and answered from memory;
a fixed table of names means no request path ever reaches the file system.
"""

from __future__ import annotations

from importlib import resources

from aiohttp import web

PREFIX = "/ui"
_TYPES = {
    ".html": "text/html",
    ".js": "text/javascript",
    ".css": "text/css",
    ".svg": "image/svg+xml",
}
_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""Only this daemon's own files and API: no CDN, no inline script, no framing."""


def is_console_path(path: str) -> bool:
    """Whether ``path`` is one of the console's static files (served without the token)."""
    return path == PREFIX or path.startswith(PREFIX + "/")


def _assets() -> dict[str, tuple[bytes, str]]:
    """Every file of ``static/`` by name, with its content type."""
    found: dict[str, tuple[bytes, str]] = {}
    for entry in resources.files(__name__).joinpath("static").iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1]
        if entry.is_file() and suffix in _TYPES:
            found[entry.name] = (entry.read_bytes(), _TYPES[suffix])
    return found


def add_routes(app: web.Application) -> None:
    """``GET /ui`` (to ``/ui/``), ``GET /ui/`` (the page) and ``GET /ui/<file>``."""
    assets = _assets()

    def answer(name: str) -> web.Response:
        body, kind = assets[name]
        response = web.Response(body=body, content_type=kind, charset="utf-8")
        response.headers["Cache-Control"] = "no-cache"
        response.headers["Content-Security-Policy"] = _POLICY
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        return response

    async def to_page(request: web.Request) -> web.Response:
        return web.Response(status=308, headers={"Location": PREFIX + "/"})

    async def page(request: web.Request) -> web.Response:
        return answer("index.html")

    async def asset(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in assets:
            raise web.HTTPNotFound()
        return answer(name)

    app.router.add_get(PREFIX, to_page)
    app.router.add_get(PREFIX + "/", page)
    app.router.add_get(PREFIX + "/{name}", asset)
