"""The web console (``/ui/``) in a real browser against a real daemon.

One daemon process per module (``meclaw --root DIR --api 127.0.0.1:0`` with a bearer token),
a tiny tree of code cells; headless Chromium from Debian's ``chromium`` package, driven by
Playwright. The tests assert what a person sees: the cells listed, a run appearing without a
reload, a trace's hops with their handling times, a dead letter replayed into a new run, every
cell drawn in the graph. Each page is also saved as a screenshot (``COLONY_ARTIFACTS``, else a
temporary folder).

Without ``/usr/bin/chromium`` or the ``playwright`` package the tests skip with a message
beginning "SKIPPED LOUDLY:", or fail when ``COLONY_REQUIRE_BROWSER=1`` (CI sets it).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tests.conftest import cell, hive, write_tree

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

MECLAW = str(Path(sys.executable).with_name("meclaw"))
CHROMIUM = Path("/usr/bin/chromium")
TOKEN = "console-test-token"
TOKEN_KEY = "colony.api-token"
"""Where the console keeps the token (sessionStorage), as static/api.js names it."""
SEEN = 10_000
"""Milliseconds a test waits for the page to show something."""

INTAKE = """
import json, sys, time
doc = json.load(sys.stdin)
time.sleep(0.05)
print(json.dumps({"messages": doc["body"]["messages"]}))
"""

TREE = {
    "main/config.json": hive(
        {"from": ".", "to": "./intake"},
        {"from": "./intake", "to": "./shelf", "condition": "!has(hop.skip)"},
    ),
    "main/intake/config.json": cell("code", {"runner": "python3", "script_inline": INTAKE}),
    "main/shelf/config.json": cell("code", {"runner": "python3", "script_inline": "print('[]')"}),
}
CELLS = {"/intake", "/shelf"}


def _needs_browser() -> None:
    """Skip loudly (or fail, when a browser is required) without Chromium or Playwright."""
    missing = []
    if not CHROMIUM.exists():
        missing.append(f"{CHROMIUM} (apt-get install chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the playwright package (pip install playwright)")
    if not missing:
        return
    message = "the web console's browser tests need " + " and ".join(missing)
    if os.environ.get("COLONY_REQUIRE_BROWSER") == "1":
        pytest.fail(f"COLONY_REQUIRE_BROWSER=1 but {message}", pytrace=False)
    pytest.skip(f"SKIPPED LOUDLY: {message}")


@dataclass
class ConsoleDaemon:
    url: str
    api: httpx.Client
    shots: Path

    def post(self, target: str, text: str, **fields: Any) -> str:
        """POST /messages; the new run's trace id."""
        body = {"messages": [{"origin": "user", "type": "text", "text": text}]}
        answer = self.api.post("/messages", json={"target": target, "body": body, **fields})
        assert answer.status_code == 202, answer.text
        return str(answer.json()["trace_id"])

    def until(self, check: Callable[[], Any], what: str, within: float = 10) -> Any:
        """The first truthy ``check()`` within ``within`` seconds, else the test fails."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            found = check()
            if found:
                return found
            time.sleep(0.05)
        raise AssertionError(f"never happened within {within}s: {what}")

    def trace(self, trace_id: str) -> dict[str, Any]:
        doc: dict[str, Any] = self.api.get("/colony/trace", params={"trace_id": trace_id}).json()
        return doc

    def run(self, trace_id: str) -> dict[str, Any] | None:
        runs = self.api.get("/colony/runs", params={"limit": 1000}).json()["runs"]
        return next((r for r in runs if r["trace_id"] == trace_id), None)

    def replayed_as(self, letter_id: int) -> str | None:
        """The message a dead letter was last replayed as (None: never replayed)."""
        doc = self.api.get(f"/colony/dead_letters/{letter_id}").json()["dead_letter"]
        return None if doc["replayed_as"] is None else str(doc["replayed_as"])

    def answered(self, trace_id: str) -> dict[str, Any]:
        run: dict[str, Any] = self.until(
            lambda: (r := self.run(trace_id)) and r["outcome"] != "in_flight" and r,
            f"run {trace_id} ended",
        )
        return run


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleDaemon]:
    root = write_tree(tmp_path_factory.mktemp("console-colony"), TREE)
    artifacts = os.environ.get("COLONY_ARTIFACTS")
    shots = Path(artifacts) / "console" if artifacts else tmp_path_factory.mktemp("console-shots")
    shots.mkdir(parents=True, exist_ok=True)
    log = root / "daemon.err"
    with (
        log.open("w") as err,
        subprocess.Popen(
            [MECLAW, "--root", str(root), "--api", "127.0.0.1:0", "--api-token-env", "CONSOLE_T"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env={**os.environ, "CONSOLE_T": TOKEN},
        ) as process,
    ):
        try:
            deadline = time.monotonic() + 30
            while not (found := re.search(r"HTTP API on (\S+)", log.read_text())):
                assert process.poll() is None, f"the daemon exited: {log.read_text()}"
                assert time.monotonic() < deadline, f"no API line: {log.read_text()}"
                time.sleep(0.05)
            url = found.group(1)
            headers = {"Authorization": f"Bearer {TOKEN}"}
            with httpx.Client(base_url=url, headers=headers, trust_env=False, timeout=10) as api:
                yield ConsoleDaemon(url, api, shots)
        finally:
            process.terminate()
            process.wait(timeout=20)


@pytest.fixture(scope="module")
def browser(daemon: ConsoleDaemon) -> Iterator[Browser]:
    _needs_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A tab that already holds the token (the token test opens its own, without)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(f"sessionStorage.setItem({json.dumps(TOKEN_KEY)}, {json.dumps(TOKEN)})")
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    yield tab
    context.close()
    assert errors == [], f"the page threw: {errors}"


def _shoot(page: Page, daemon: ConsoleDaemon, name: str) -> None:
    page.screenshot(path=daemon.shots / f"{name}.png", full_page=True)


def _visible_ids(page: Page, testid: str, attribute: str) -> set[str]:
    return {
        str(page.locator(f"[data-testid={testid}]").nth(i).get_attribute(attribute))
        for i in range(page.locator(f"[data-testid={testid}]").count())
    }


def test_the_console_files_are_served_without_the_token_and_the_data_is_not(
    daemon: ConsoleDaemon,
) -> None:
    with httpx.Client(base_url=daemon.url, trust_env=False, timeout=10) as anonymous:
        moved = anonymous.get("/ui")
        page = anonymous.get("/ui/")
        script = anonymous.get("/ui/app.js")
        data = anonymous.get("/colony/registry")
        nothing = anonymous.get("/ui/../colony/registry.js")
    assert moved.status_code in (301, 302, 307, 308)
    assert moved.headers["Location"] == "/ui/"
    assert page.status_code == 200
    assert page.headers["Content-Type"].startswith("text/html")
    assert "default-src 'none'" in page.headers["Content-Security-Policy"]
    assert script.headers["Content-Type"].startswith("text/javascript")
    assert data.status_code == 401
    assert nothing.status_code in (401, 404)


def test_the_overview_asks_for_the_token_then_lists_every_cell(
    daemon: ConsoleDaemon, browser: Browser
) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        tab = context.new_page()
        tab.goto(f"{daemon.url}/ui/")
        tab.get_by_test_id("token-dialog").wait_for(state="visible", timeout=SEEN)
        tab.get_by_test_id("token-input").fill("wrong-token")
        tab.get_by_test_id("token-submit").click()
        tab.get_by_test_id("token-problem").wait_for(state="visible", timeout=SEEN)
        tab.get_by_test_id("token-input").fill(TOKEN)
        tab.get_by_test_id("token-submit").click()
        tab.locator("[data-testid=cell-row]").first.wait_for(timeout=SEEN)
        registry = daemon.api.get("/colony/registry").json()["registry"]
        assert _visible_ids(tab, "cell-row", "data-path") == {r["path"] for r in registry} == CELLS
        row = tab.locator("[data-testid=cell-row][data-path='/intake']")
        assert row.get_by_test_id("cell-state").inner_text() == "awake"
        assert "code" in row.inner_text()
        assert tab.get_by_test_id("token-dialog").is_hidden()
        _shoot(tab, daemon, "overview")
    finally:
        context.close()


def test_the_overview_counts_decisions_live(daemon: ConsoleDaemon, page: Page) -> None:
    page.goto(f"{daemon.url}/ui/#/")
    page.wait_for_selector("[data-testid=live-status][data-state=live]", timeout=SEEN)
    shown = "() => document.querySelector('[data-testid=stat-decisions-value]').textContent"
    page.wait_for_function(f"/\\d/.test(({shown})())", timeout=SEEN)
    before = int(re.sub(r"\D", "", page.evaluate(shown)))
    assert before == daemon.api.get("/colony/stats").json()["stats"]["decisions"]
    daemon.answered(daemon.post("/", "count me"))
    after = daemon.api.get("/colony/stats").json()["stats"]["decisions"]
    assert after > before
    page.wait_for_function(
        f"n => Number(({shown})().replace(/\\D/g, '')) === n", arg=after, timeout=SEEN
    )


def test_a_new_run_appears_on_the_runs_page_without_a_reload(
    daemon: ConsoleDaemon, page: Page
) -> None:
    daemon.answered(daemon.post("/", "an earlier run"))
    page.goto(f"{daemon.url}/ui/#/runs")
    page.locator("[data-testid=run-row]").first.wait_for(timeout=SEEN)
    page.evaluate("window.sameDocument = true")
    trace_id = daemon.post("/", "a new run")
    row = page.locator(f"[data-testid=run-row][data-trace-id='{trace_id}']")
    row.wait_for(timeout=SEEN)
    assert page.evaluate("window.sameDocument") is True  # no reload happened
    page.wait_for_selector(
        f"[data-testid=run-row][data-trace-id='{trace_id}'][data-outcome=answered]", timeout=SEEN
    )
    assert row.locator("td").nth(2).inner_text() == "/"
    run = daemon.answered(trace_id)
    assert row.locator("td").nth(4).inner_text() == str(run["hops"])
    page.get_by_test_id("runs-filter-outcome").select_option("dead_lettered")
    page.wait_for_selector(f"[data-testid=run-row][data-trace-id='{trace_id}']", state="detached")
    _shoot(page, daemon, "runs")


def test_the_trace_view_shows_each_hop_with_its_handling_time(
    daemon: ConsoleDaemon, page: Page
) -> None:
    trace_id = daemon.post("/", "trace me")
    daemon.answered(trace_id)
    recorded = daemon.trace(trace_id)
    page.goto(f"{daemon.url}/ui/#/trace/{trace_id}")
    page.locator("[data-testid=handling-row]").first.wait_for(timeout=SEEN)
    hops = page.locator("[data-testid=hop]")
    assert hops.count() == len(recorded["trace"])
    assert [hops.nth(i).get_by_test_id("hop-to").inner_text() for i in range(hops.count())] == [
        r["to_path"] for r in recorded["trace"]
    ]
    bars = page.locator("[data-testid=handling-row]")
    assert {bars.nth(i).get_attribute("data-cell") for i in range(bars.count())} == CELLS
    intake = page.locator("[data-testid=handling-row][data-cell='/intake']")
    shown = intake.get_by_test_id("handling-duration").inner_text()
    [row] = [r for r in recorded["handling"] if r["cell"] == "/intake"]
    assert row["duration_ms"] >= 50  # the script sleeps 50 ms
    assert re.fullmatch(r"\d+ ms", shown), shown
    assert abs(int(shown.split()[0]) - row["duration_ms"]) <= 1
    hop = page.locator(f"[data-testid=hop][data-message-id='{row['message_id']}']")
    assert hop.get_by_test_id("hop-duration").inner_text() == shown
    hop.locator("summary").click()
    assert '"trace me"' in hop.get_by_test_id("hop-body").inner_text()
    # the transit from / to /intake names the edge that fired, its condition on hover
    transit = hops.filter(has=page.locator("[data-testid=hop-edge]")).first
    assert transit.get_by_test_id("hop-edge").inner_text().endswith("/intake")
    _shoot(page, daemon, "trace")


def test_replaying_a_dead_letter_from_the_page_starts_a_new_run(
    daemon: ConsoleDaemon, page: Page
) -> None:
    from playwright.sync_api import expect

    trace_id = daemon.post("/", "too little ttl", ttl=1)
    letter = daemon.until(
        lambda: [
            d
            for d in daemon.api.get("/colony/dead_letters").json()["dead_letters"]
            if d["trace_id"] == trace_id
        ],
        f"a dead letter in trace {trace_id}",
    )[0]
    assert letter["error_code"] == "ttl_expired"
    page.goto(f"{daemon.url}/ui/#/dead-letters")
    article = page.locator(f"[data-testid=dead-letter][data-id='{letter['id']}']")
    article.wait_for(timeout=SEEN)
    assert article.get_by_test_id("dl-code").inner_text() == letter["error_code"]
    article.get_by_test_id("dl-toggle").click()
    assert '"too little ttl"' in article.get_by_test_id("dl-body").inner_text()
    article.get_by_test_id("replay-button").click()
    link = article.get_by_test_id("replay-run-link")
    link.wait_for(timeout=SEEN)
    replayed_as = daemon.until(lambda: daemon.replayed_as(letter["id"]), "the letter replayed")
    article.get_by_test_id("dl-replayed").wait_for(timeout=SEEN)
    _shoot(page, daemon, "dead-letters")
    # the second replay asks first, then forces: the link then names the newer message
    questions: list[str] = []

    def accept(dialog: Any) -> None:
        questions.append(dialog.message)
        dialog.accept()

    page.once("dialog", accept)
    article.get_by_test_id("replay-button").click()
    again = daemon.until(
        lambda: (
            daemon.replayed_as(letter["id"]) not in (None, replayed_as)
            and daemon.replayed_as(letter["id"])
        ),
        "the letter replayed again",
    )
    expect(link).to_have_attribute("href", re.compile(f"m={again}"), timeout=SEEN)
    assert len(questions) == 1
    assert "replayed already" in questions[0]
    # the first replay's run: its message reached the cells this time
    page.goto(f"{daemon.url}/ui/#/trace/{trace_id}?m={replayed_as}")
    page.locator(f"[data-testid=hop][data-message-id='{replayed_as}']").wait_for(timeout=SEEN)
    page.wait_for_selector("[data-testid=handling-row][data-cell='/shelf']", timeout=SEEN)


def test_the_graph_draws_every_cell_and_hive(daemon: ConsoleDaemon, page: Page) -> None:
    graph = daemon.api.get("/colony/graph").json()["graph"]
    page.goto(f"{daemon.url}/ui/#/graph")
    page.locator("[data-testid=graph-node]").first.wait_for(timeout=SEEN)
    cells = {n["path"] for n in graph["nodes"] if n["cell_type"] != "hive"}
    hives = {n["path"] for n in graph["nodes"] if n["cell_type"] == "hive"}
    assert _visible_ids(page, "graph-node", "data-path") == cells == CELLS
    assert _visible_ids(page, "graph-hive", "data-path") == hives
    assert page.locator("[data-testid=graph-edge]").count() == len(graph["edges"])
    # a condition is shown on hover (the arrow's <title>), never as a label on the drawing
    conditional = page.locator("[data-testid=graph-edge][data-to='/shelf']")
    assert "when !has(hop.skip)" in str(conditional.locator("title").text_content())
    labels = page.locator("[data-testid=graph-svg] text").all_text_contents()
    assert labels
    assert not [label for label in labels if "has(" in label]
    _shoot(page, daemon, "graph")
