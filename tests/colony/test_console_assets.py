"""The web console's files (``colony/console/static``): complete, local, shipped and served.

No browser here (tests/e2e/test_console.py drives one): what the page names exists, nothing is
loaded from another host, the wheel's package-data glob holds every file, and ``add_routes``
answers each with its type while naming no file outside the table.
"""

from __future__ import annotations

import re
import tomllib
from fnmatch import fnmatch
from pathlib import Path

import httpx
from aiohttp import web

from colony.console import add_routes, is_console_path

STATIC = Path(__file__).resolve().parents[2] / "colony" / "console" / "static"
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
NAMESPACES = ("http://www.w3.org/2000/svg",)
"""URLs that name an XML namespace; nothing is fetched from them."""


def test_every_file_the_page_names_is_in_the_static_folder() -> None:
    html = (STATIC / "index.html").read_text(encoding="utf-8")
    named = set(re.findall(r'(?:src|href)="([^"#]+)"', html))
    for script in STATIC.glob("*.js"):
        named |= set(re.findall(r'from "\./([^"]+)"', script.read_text(encoding="utf-8")))
    assert {"app.js", "style.css", "overview.js", "graph.js"} <= named
    assert sorted(n for n in named if not (STATIC / n).is_file()) == []


def test_the_console_loads_nothing_from_another_host() -> None:
    found = {
        path.name: urls
        for path in STATIC.iterdir()
        if (
            urls := set(re.findall(r"(?:https?:)?//[\w.-]+\.[a-z]{2,}[^\s\"')]*", path.read_text()))
            - set(NAMESPACES)
        )
    }
    assert found == {}


def test_the_wheel_ships_every_static_file() -> None:
    globs = tomllib.loads(PYPROJECT.read_text())["tool"]["setuptools"]["package-data"]
    files = [p.relative_to(STATIC.parent).as_posix() for p in STATIC.rglob("*") if p.is_file()]
    assert len(files) >= 5
    assert [f for f in files if not any(fnmatch(f, g) for g in globs["colony.console"])] == []


def test_console_paths_are_only_those_under_ui() -> None:
    assert [is_console_path(p) for p in ("/ui", "/ui/", "/ui/app.js")] == [True] * 3
    assert [is_console_path(p) for p in ("/uix", "/colony/ui", "/")] == [False] * 3


async def test_each_file_is_served_under_ui_with_its_type() -> None:
    app = web.Application()
    add_routes(app)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", trust_env=False) as c:
            moved = await c.get("/ui")
            page = await c.get("/ui/")
            script = await c.get("/ui/live.js")
            style = await c.get("/ui/style.css")
            icon = await c.get("/ui/favicon.svg")
            missing = await c.get("/ui/nothing.js")
            escaped = await c.get("/ui/%2e%2e%2fapi.py")
    finally:
        await runner.cleanup()
    assert (moved.status_code, moved.headers["Location"]) == (308, "/ui/")
    assert page.text == (STATIC / "index.html").read_text(encoding="utf-8")
    assert page.headers["Content-Type"] == "text/html; charset=utf-8"
    assert script.headers["Content-Type"] == "text/javascript; charset=utf-8"
    assert style.headers["Content-Type"] == "text/css; charset=utf-8"
    assert icon.headers["Content-Type"].startswith("image/svg+xml")
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]
    assert (missing.status_code, escaped.status_code) == (404, 404)
