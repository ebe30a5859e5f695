"""schemathesis against ``/openapi.json``: the document is exactly as strict as the server.

The document is generated from the models the handlers validate with, so schemathesis' checks
hold: no 5xx, every status and content type documented, data the schema allows is accepted and
data it forbids refused, ``405`` names the allowed methods in ``Allow``. Examples are bounded so
the whole run takes a few seconds. The server runs on its own thread (schemathesis calls it
synchronously); every request goes to 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.specs.openapi import checks as openapi_checks

from cells.llm.chat_endpoint import ChatRoute
from colony.api import build_app, serve
from colony.openapi import document
from colony.testing import ColonyHarness, ScriptedAnthropic, anthropic_text
from tests.conftest import cell, hive, write_tree

DOCUMENT = document(extra=ChatRoute.openapi)
schema = schemathesis.openapi.from_dict(DOCUMENT)


class Server:
    """The API of a small colony, served on a thread with its own event loop."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ready = threading.Event()
        self.url = ""
        self.failure: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="api-under-test", daemon=True)

    def __enter__(self) -> Server:
        self._thread.start()
        if not self.ready.wait(60) or self.failure is not None:
            raise RuntimeError(f"the API did not start: {self.failure!r}")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(60)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:
            self.failure = exc
            self.ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with ScriptedAnthropic([anthropic_text("ok")] * 1000) as model:
            tree = write_tree(
                self.root,
                {
                    "main/config.json": hive({"from": ".", "to": "./echo"}),
                    "main/echo/config.json": cell(
                        "code", {"script_inline": "import sys; sys.stdin.read(); print('[]')"}
                    ),
                    "main/brain/config.json": cell(
                        "llm",
                        {"provider": "anthropic", "model": "claude-x", "base_url": model.url},
                    ),
                },
            )
            async with ColonyHarness(tree) as colony:
                chat = ChatRoute()
                app = build_app(colony.colony, extra_routes={("POST", "/llm/chat"): chat})
                runner = await serve(app, "127.0.0.1", 0)
                self.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
                self.ready.set()
                await self._stop.wait()
                await runner.cleanup()
                await chat.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with Server(tmp_path_factory.mktemp("openapi")) as running:
        yield running


# /llm/chat: fields that tie together (tools before conversation, turn and results together)
# are rules OpenAPI 3.0 cannot state, so schema-valid data may still be a 400 there.
CROSS_FIELD = {"/llm/chat"}


OPERATIONS = [
    (path, method)
    for path, item in DOCUMENT["paths"].items()
    for method in item
    if method in {"get", "post", "put", "patch", "delete"}
    and path != "/colony/events"  # an answer that never ends: tests/e2e/test_events_stream.py
]
"""Every operation but the event stream, one test each with its own id (schemathesis' own
parametrize gives them all one node id, which pytest-xdist cannot schedule apart)."""


@pytest.mark.parametrize(("path", "method"), OPERATIONS, ids=[f"{m} {p}" for p, m in OPERATIONS])
@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
@given(data=st.data())
def test_the_api_keeps_every_promise_of_its_openapi_document(
    path: str, method: str, data: st.DataObject, server: Server
) -> None:
    case: Any = data.draw(schema[path][method].as_strategy(), label="case")
    excluded = []
    if case.path in CROSS_FIELD:
        excluded.append(openapi_checks.positive_data_acceptance)
    case.call_and_validate(base_url=server.url, excluded_checks=excluded)


def test_the_served_document_is_the_generated_one(server: Server) -> None:
    served = httpx.get(f"{server.url}/openapi.json", trust_env=False).json()
    assert served == httpx.Response(200, json=DOCUMENT).json()


def test_a_405_names_the_allowed_methods_in_allow(server: Server) -> None:
    response = httpx.put(f"{server.url}/colony/dead_letters", trust_env=False)
    assert response.status_code == 405
    assert set(response.headers["Allow"].replace(" ", "").split(",")) == {"DELETE", "GET", "HEAD"}
    assert response.json()["error"] == "method_not_allowed"


def test_the_document_refuses_an_empty_target_and_a_bare_object_body() -> None:
    body = DOCUMENT["paths"]["/messages"]["post"]["requestBody"]["content"]["application/json"]
    properties = body["schema"]["properties"]
    assert properties["target"]["minLength"] == 1
    assert "anyOf" in properties["body"]  # UBF: one of system, messages, attachments
    chat = DOCUMENT["paths"]["/llm/chat"]["post"]["requestBody"]["content"]["application/json"]
    assert chat["schema"]["additionalProperties"] is False
