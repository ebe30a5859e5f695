"""The fixture MCP server (``fixtures/mcp/server.py``) as the tests start it, and the trees
that put an mcp cell in front of it."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from colony.envelope import Envelope, JsonObject
from colony.testing import ColonyHarness
from tests.conftest import CONTRACT, hive

SERVER = Path(__file__).resolve().parents[3] / "fixtures" / "mcp" / "server.py"
STDIO = {"transport": "stdio", "command": sys.executable, "args": [str(SERVER), "stdio"]}
OFFER = "has(hop.mcp_tool) && hop.mcp_tool == '__list_tools__'"
"""The edge condition that takes an mcp cell's tool listing to an llm cell (docs/cells/mcp.md)."""
NOT_OFFER = "!has(hop.mcp_tool) || hop.mcp_tool != '__list_tools__'"
"""Its complement: every other reply of the mcp cell."""


async def published(server: Path, *build_args: str) -> list[dict[str, Any]]:
    """The tools of the fixture server at ``server`` as it lists them on the wire, in name
    order (its ``build(*build_args)`` run in-process with the SDK: the tests compare against
    the server's own schema, not a copy)."""
    spec = importlib.util.spec_from_file_location(f"colony_test_{server.stem}", server)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tools = await module.build(*build_args).list_tools()
    wire = [t.model_dump(by_alias=True, exclude_none=True) for t in tools]
    return sorted(wire, key=lambda t: t["name"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class HttpServer:
    """The fixture server over Streamable HTTP on 127.0.0.1 (stopped and started again at
    will, on the same port)."""

    def __init__(self, *flags: str) -> None:
        self.port = free_port()
        self.flags = flags
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER), "http", "--port", str(self.port), *self.flags],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port)):
                return
            time.sleep(0.05)
        raise RuntimeError(f"the fixture MCP server did not listen on {self.port}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None


@contextlib.contextmanager
def http_server(*flags: str) -> Iterator[HttpServer]:
    server = HttpServer(*flags)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def mcp_tree(params: JsonObject, *, cell: JsonObject | None = None) -> dict[str, Any]:
    return {
        "main/config.json": hive({"from": "./mcp", "to": "/sink"}),
        "main/mcp/config.json": {
            "cell": cell or {"type": "mcp", "timeout": -1},
            "params": params,
            "contract": CONTRACT,
        },
    }


def call(name: str, arguments: Any = None, call_id: str = "call-1") -> JsonObject:
    text: JsonObject = {"name": name}
    if arguments is not None:
        text["arguments"] = arguments
    return {
        "messages": [
            {"origin": "assistant", "type": "tool_call", "text": json.dumps(text), "id": call_id}
        ]
    }


def replies(colony: ColonyHarness) -> list[Envelope]:
    """What the cell answered (to messages sent to it), in order."""
    return [m for m in colony.captured("/sink") if m.parent_message_id is not None]


def offers(colony: ColonyHarness) -> list[Envelope]:
    """The listings the cell emitted of its own accord (``offer_tools``)."""
    return [m for m in colony.captured("/sink") if m.parent_message_id is None]


async def until(condition: Callable[[], object], seconds: float = 15) -> None:
    """Return once ``condition()`` holds (what it watches has no event to await)."""
    async with asyncio.timeout(seconds):
        while not condition():  # noqa: ASYNC110 (captures, log lines and restarts have no event)
            await asyncio.sleep(0.02)


async def wait_for(colony: ColonyHarness, count: int) -> list[Envelope]:
    """The cell's replies once there are ``count`` of them."""
    await until(lambda: len(replies(colony)) >= count)
    return replies(colony)


def result(message: Envelope) -> tuple[JsonObject, str, str]:
    """``(hop, text, id)`` of a tool_result reply."""
    (turn,) = message.body["messages"]
    assert (turn["origin"], turn["type"]) == ("tool", "tool_result")
    return dict(message.headers.hop), turn["text"], turn["id"]
