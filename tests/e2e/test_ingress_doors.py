"""Every door into the colony holds a message to the one check of :mod:`colony.ingress`: the
HTTP API (``POST /messages``, over a real socket on 127.0.0.1), the stdio bridge (JSON frames)
and the test harness refuse the same TTL, context and hop with the same detail, each in its own
form, and give an absent TTL the colony's default.
"""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from colony.envelope import Envelope
from colony.ingress import IngressRefused, source_message_of
from colony.stdio import StdioBridge
from colony.testing import ColonyHarness
from tests.api_client import Api, served
from tests.conftest import TreeFactory, hive

USER = {"messages": [{"origin": "user", "type": "text", "text": "hi"}]}
DEFAULT_TTL = 9

# (field as the sender writes it, value); the API calls context ``headers``.
REFUSED: list[tuple[str, Any]] = [
    ("ttl", 0),
    ("ttl", -1),
    ("ttl", 2**32),
    ("ttl", True),
    ("ttl", 2.5),
    ("ttl", "3"),
    ("context", [1]),
    ("context", []),
    ("context", "x"),
    ("hop", 7),
    ("hop", False),
]


@pytest.fixture
async def api(make_tree: TreeFactory) -> AsyncIterator[Api]:
    tree = make_tree({"main/config.json": hive({"from": ".", "to": "/sink"})})
    harness = ColonyHarness(tree, capture=["/sink"], colony={"message_default_ttl": DEFAULT_TTL})
    async with harness as colony, served(colony) as api:
        yield api


def expected(api: Api, field: str, value: Any, **door: Any) -> IngressRefused:
    """What :mod:`colony.ingress` says about ``field: value`` (``door``: a door's options)."""
    with pytest.raises(IngressRefused) as caught:
        source_message_of("/", USER, api.colony.colony.config, **{field: value}, **door)
    return caught.value


def frame_errors(api: Api, frame: dict[str, Any]) -> tuple[Envelope | None, list[Any]]:
    out = io.StringIO()
    bridge = StdioBridge(api.colony.colony, json_mode=True, version="t", out=out)
    message = bridge.message_for(json.dumps({"v": 1, "type": "message", "body": USER, **frame}))
    return message, [json.loads(line) for line in out.getvalue().splitlines()]


@pytest.mark.parametrize(("field", "value"), REFUSED)
async def test_the_api_refuses_with_the_ingress_code_and_detail_as_a_422(
    api: Api, field: str, value: Any
) -> None:
    sent = "headers" if field == "context" else field
    response = await api.client.post("/messages", json={"target": "/", "body": USER, sent: value})
    refused = expected(api, field, value, context_key=sent)
    assert response.status_code == 422
    assert response.json() == {"error": refused.code, "detail": refused.detail}
    await api.nothing_entered()


@pytest.mark.parametrize(("field", "value"), REFUSED)
async def test_stdio_refuses_with_the_ingress_detail_as_an_invalid_frame_line(
    api: Api, field: str, value: Any
) -> None:
    message, lines = frame_errors(api, {field: value})
    assert message is None
    refused = expected(api, field, value)
    assert lines == [
        {"v": 1, "type": "error", "error_code": "invalid_frame", "detail": refused.detail}
    ]


@pytest.mark.parametrize(("field", "value"), [r for r in REFUSED if r != ("ttl", 0)])
async def test_the_harness_raises_the_ingress_refusal_and_sends_nothing(
    api: Api, field: str, value: Any
) -> None:
    with pytest.raises(IngressRefused) as caught:
        await api.colony.send("/", USER, **{field: value})
    refused = expected(api, field, value, allow_spent=True)  # its one allowance: ttl 0
    assert (caught.value.code, caught.value.detail) == (refused.code, refused.detail)
    await api.nothing_entered()


async def test_every_door_gives_an_absent_or_null_ttl_the_colony_default(api: Api) -> None:
    posted = await api.client.post("/messages", json={"target": "/", "body": USER, "ttl": None})
    assert posted.status_code == 202
    await api.colony.send("/", USER)
    for frame in ({}, {"ttl": None}):
        message, lines = frame_errors(api, frame)
        assert message is not None
        assert lines == []
        await api.colony.colony.send(message)
    await api.colony.settle()
    arrived = api.colony.captured("/sink")
    assert [m.ttl for m in arrived] == [DEFAULT_TTL - 2] * 4  # the root hive, then /sink


async def test_null_context_and_hop_are_empty_at_every_door(api: Api) -> None:
    doc = {"target": "/", "body": USER, "headers": None, "hop": None}
    assert (await api.client.post("/messages", json=doc)).status_code == 202
    await api.colony.send("/", USER, context=None, hop=None)
    message, _ = frame_errors(api, {"context": None, "hop": None})
    assert message is not None
    await api.colony.colony.send(message)
    await api.colony.settle()
    contexts = [m.headers.context for m in api.colony.captured("/sink")]
    assert contexts[:2] == [{}, {}]
    assert set(contexts[2]) == {"user_id", "chat_id", "turn_id"}  # stdio's own keys
