"""A real daemon (``meclaw --root``, direct mode, a subprocess) exports its spans over
OTLP/HTTP to a receiver on 127.0.0.1 that decodes them with opentelemetry-proto; without the
SDK installed it says so once and runs untraced."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.conftest import TreeFactory, cell, hive

ANSWER = """
import json, sys
doc = json.load(sys.stdin)
text = doc["body"]["messages"][-1]["text"]
print(json.dumps({"header": {"done": True}, "messages": [{"origin": "assistant", "type": "text", "text": "pong: " + text}]}))
"""

BLOCK_OTEL = """
import importlib.abc, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Block())
from colony.cli import main
sys.argv = ["meclaw", *sys.argv[1:]]
main()
"""


@dataclass
class Receiver:
    """An OTLP/HTTP trace receiver: every export request, decoded, with its headers."""

    url: str = ""
    requests: list[ExportTraceServiceRequest] = field(default_factory=list)
    headers: list[Mapping[str, str]] = field(default_factory=list)

    def spans(self) -> list[tuple[dict[str, Any], Any]]:
        """(resource attributes, span) of every span received."""
        out = []
        for request in self.requests:
            for rs in request.resource_spans:
                resource = {a.key: _value(a.value) for a in rs.resource.attributes}
                for scoped in rs.scope_spans:
                    out += [(resource, span) for span in scoped.spans]
        return out


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


@asynccontextmanager
async def receiver() -> AsyncIterator[Receiver]:
    got = Receiver()

    async def traces(request: web.Request) -> web.Response:
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        got.requests.append(message)
        got.headers.append(dict(request.headers))
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    app = web.Application()
    app.router.add_post("/v1/traces", traces)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    got.url = f"http://127.0.0.1:{port}"
    try:
        yield got
    finally:
        await runner.cleanup()


def echo_tree(make_tree: TreeFactory, colony: Mapping[str, Any] | None = None) -> Path:
    files: dict[str, Any] = {
        "main/config.json": hive(
            {"from": ".", "to": "./answer", "condition": "!has(hop.done)"},
            {"from": "./answer", "to": "."},
        ),
        "main/answer/config.json": cell("code", {"script_inline": ANSWER}),
    }
    if colony is not None:
        files["colony.json"] = colony
    return make_tree(files)


async def run_daemon(
    root: Path, stdin: str, env: Mapping[str, str], *, argv: tuple[str, ...] | None = None
) -> tuple[int, str, str]:
    """Run ``meclaw --root root`` in direct mode until the end of ``stdin``."""
    import os

    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    program = argv or (str(Path(sys.executable).with_name("meclaw")),)
    process = await asyncio.create_subprocess_exec(
        *program,
        "--root",
        str(root),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**base, **env},
    )
    out, err = await asyncio.wait_for(process.communicate(stdin.encode()), timeout=60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_the_daemon_exports_its_spans_over_otlp_http_to_the_endpoint_in_the_environment(
    make_tree: TreeFactory,
) -> None:
    async with receiver() as otlp:
        code, out, err = await run_daemon(
            echo_tree(make_tree),
            "ping\n",
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url,
                "OTEL_SERVICE_NAME": "colony-e2e",
                "OTEL_BSP_SCHEDULE_DELAY": "50",
            },
        )
        assert code == 0, err
        assert out.splitlines() == ["pong: ping"]
        received = otlp.spans()
    assert [span.name for _, span in received] == ["handle /answer"]
    resource, span = received[0]
    assert resource["service.name"] == "colony-e2e"
    attributes = {a.key: _value(a.value) for a in span.attributes}
    assert attributes["colony.cell.path"] == "/answer"
    assert attributes["colony.cell.type"] == "code"
    assert attributes["colony.outcome"] == "ok"
    # the OTel trace id is the colony trace id's 32 hex digits
    assert span.trace_id.hex() == attributes["colony.trace.id"].replace("-", "")
    assert span.parent_span_id == b""  # a stdin line starts the trace: a root


async def test_colony_json_telemetry_names_the_endpoint_headers_and_service(
    make_tree: TreeFactory,
) -> None:
    async with receiver() as otlp:
        telemetry = {
            "telemetry": {
                "endpoint": otlp.url,
                "headers": {"x-otlp-key": "k-123"},
                "service_name": "research-bot",
            }
        }
        code, out, err = await run_daemon(echo_tree(make_tree, telemetry), "ping\n", {})
        assert code == 0, err
        assert out.splitlines() == ["pong: ping"]
        received = otlp.spans()
        assert {h.get("x-otlp-key") for h in otlp.headers} == {"k-123"}
    assert [span.name for _, span in received] == ["handle /answer"]
    assert received[0][0]["service.name"] == "research-bot"


async def test_without_the_sdk_a_daemon_asked_to_trace_warns_once_and_runs_untraced(
    make_tree: TreeFactory,
) -> None:
    root = echo_tree(make_tree)
    async with receiver() as otlp:
        code, out, err = await run_daemon(
            root,
            "ping\n",
            {"OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url},
            argv=(sys.executable, "-c", BLOCK_OTEL),
        )
        assert code == 0, err
        assert out.splitlines() == ["pong: ping"]
        assert otlp.requests == []
    said = [line for line in err.splitlines() if "otel extra" in line]
    assert len(said) == 1, err
    assert "is not installed" in said[0]
    logged = [json.loads(line) for line in (root / "log.jsonl").read_text().splitlines()]
    [warning] = [r for r in logged if r["event"] == "telemetry_unavailable"]
    assert warning["level"] == "warning"
    assert "opentelemetry" in warning["detail"]


async def test_a_headless_daemon_without_the_sdk_says_so_once_on_stderr(
    make_tree: TreeFactory,
) -> None:
    import os
    import signal

    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        BLOCK_OTEL,
        "--root",
        str(echo_tree(make_tree)),
        "--daemon",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={**base, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"},
    )
    assert process.stderr is not None
    said: list[str] = []
    async with asyncio.timeout(60):
        while not any("colony running" in line for line in said):
            line = (await process.stderr.readline()).decode()
            assert line, f"the daemon ended: {said}"
            said.append(line)
        process.send_signal(signal.SIGTERM)
        said += (await process.stderr.read()).decode().splitlines()
        assert await process.wait() == 0
    warned = [line for line in said if "otel extra" in line]
    assert len(warned) == 1, said
    assert warned[0].startswith("meclaw: warning: tracing was asked for")
