"""What OpenTelemetry tracing costs a hand-off: the routing benchmark's colony with tracing off,
on with spans thrown away, and on exporting over OTLP/HTTP to a receiver on loopback.

The colony is bench/routing.py's (a root hive, a chain of hives with CEL doors, a capture cell
at the end: each message is six routing decisions and one handling, so one span), with the
journal and the message log on, as a daemon runs. The modes, interleaved in every repeat so the
machine's drift hits them alike:

* **off**: no ``telemetry`` block, no ``OTEL_*`` variable: nothing is hooked (the figure
  every other benchmark measures);
* **on, discarded**: spans are made and batched, and the exporter drops them: the cost on the
  event loop (colony/telemetry/spans.py) alone;
* **on, sampled out**: ``sample_ratio`` 0: what an unrecorded trace costs;
* **on, OTLP/HTTP**: spans encoded and sent to a receiver in another process (which reads and
  drops them): the whole cost, the SDK's encoding on its export thread included (it holds the
  GIL the event loop needs).

Beside them, the span maker alone, called on hand-offs built in memory (a handling, and a
handling with an LLM call: one span and two), with no colony around it.

The span queue is made large enough (``OTEL_BSP_MAX_QUEUE_SIZE``) that no span is dropped and
every one is paid for.

    python bench/telemetry.py [--messages N] [--repeats R] [--loop asyncio|uvloop|both]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from _loops import add_loop_argument, per_loop
from _table import record
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from routing import build_tree

from colony.effects import Delivery, Effects, Handled, LogRow
from colony.envelope import follow_up, source_message
from colony.observability import list_logger
from colony.telemetry import context
from colony.telemetry.setup import open_tracing, register_exporter
from colony.telemetry.spans import SpanMaker
from colony.testing import ColonyHarness

DEPTH = 4
RECEIVER = (
    "import sys\n"
    "from aiohttp import web\n"
    "async def traces(request):\n"
    "    await request.read()\n"
    "    return web.Response(body=b'', content_type='application/x-protobuf')\n"
    "app = web.Application(client_max_size=2**26)\n"
    "app.router.add_post('/v1/traces', traces)\n"
    "web.run_app(app, host='127.0.0.1', port=int(sys.argv[1]), print=None)\n"
)
"""The OTLP/HTTP receiver: takes every export and throws it away, in a process of its own."""


class Discard(SpanExporter):
    """Takes every batch and keeps nothing (counts the spans, to check none was lost)."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


class Keep(SpanExporter):
    """Keeps every span, to be encoded by hand."""

    def __init__(self, into: list[ReadableSpan]) -> None:
        self.into = into

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.into.extend(spans)
        return SpanExportResult.SUCCESS


def encoding(spans: list[ReadableSpan]) -> float:
    """Microseconds of CPU per span the OTLP exporter spends encoding a batch of 512 (the batch
    processor's default batch), what its export thread does before sending."""
    batch = spans[:512]
    cpu = time.process_time()
    for _ in range(5):
        encode_spans(batch).SerializePartialToString()
    return (time.process_time() - cpu) / (5 * len(batch)) * 1e6


MODES: dict[str, dict[str, str] | None] = {
    "off": None,
    "on, discarded": {"OTEL_TRACES_EXPORTER": "discard"},
    "on, sampled out": {"OTEL_TRACES_EXPORTER": "discard", "OTEL_TRACES_SAMPLER": "always_off"},
    "on, OTLP/HTTP": {"OTEL_TRACES_EXPORTER": "otlp"},
}
"""(label, the ``OTEL_*`` variables the mode sets; None: none at all)."""


async def per_message(tree: Path, messages: int, env: dict[str, str] | None) -> tuple[float, float]:
    """Microseconds of (wall time, this process's CPU time, every thread's) per message
    through the colony, its hand-offs settled and the last spans flushed."""
    for name in [n for n in os.environ if n.startswith("OTEL_")]:
        del os.environ[name]
    os.environ.update(env or {})
    if env is not None:
        os.environ["OTEL_BSP_MAX_QUEUE_SIZE"] = str(messages * 2)
    body = {"messages": [{"origin": "user", "type": "text", "text": "ping"}]}
    async with ColonyHarness(tree, capture=["/sink"], log_level="info") as colony:
        makers = [tap for tap in colony.colony.events.taps if isinstance(tap, SpanMaker)]
        assert bool(makers) == (env is not None)
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(messages):
            await colony.send("/", body, hop={"route": "fire"}, context={"iter": "0"})
        await colony.settle(timeout=600)
        for maker in makers:  # the export thread's work belongs to the figure
            await asyncio.to_thread(maker.flush)
        elapsed, used = time.perf_counter() - start, time.process_time() - cpu
        assert len(colony.captured("/sink")) == messages
    return elapsed / messages * 1e6, used / messages * 1e6


def maker_alone(calls: int, llm: bool, keep: list[ReadableSpan] | None = None) -> float:
    """Microseconds of CPU per call of the span maker on an in-memory hand-off (the spans
    made go to ``keep`` when given, else they are discarded)."""
    if keep is not None:
        register_exporter("keep", lambda settings: Keep(keep))
    exporter = "keep" if keep is not None else "discard"
    tracing = open_tracing(None, list_logger([]), env={"OTEL_TRACES_EXPORTER": exporter})
    assert tracing is not None
    context.register(tracing.decide)
    try:
        handoffs = []
        for _ in range(calls):
            handled = source_message("/a", {})
            emitted = follow_up(
                handled,
                target="/b",
                context={},
                hop={"model": "m", "finish_reason": "stop"} if llm else {},
                body={"meta": {"provider": "openai"}},
                reply_to=None,
                ttl=60,
            )
            fx = Effects()
            fx.handled = Handled(
                handled.id,
                handled.trace_id,
                "/a",
                "llm" if llm else "code",
                1_700_000_000_000,
                5,
                "ok",
                None,
                "m" if llm else None,
                3 if llm else None,
                10 if llm else None,
                5 if llm else None,
            )
            fx.logs.append(LogRow(emitted, "/a", "/b", 60))
            fx.deliveries.append(Delivery("/b", emitted, "/a"))
            handoffs.append(fx)
        maker = tracing.spans
        cpu = time.process_time()
        for fx in handoffs:
            maker(fx)
        return (time.process_time() - cpu) / calls * 1e6
    finally:
        context.unregister(tracing.decide)
        tracing.processor.shutdown()


async def main(messages: int, repeats: int, loop: str) -> None:
    discard = Discard()
    register_exporter("discard", lambda settings: discard)
    port = 14000 + os.getpid() % 1000
    receiver = await asyncio.create_subprocess_exec(sys.executable, "-c", RECEIVER, str(port))
    MODES["on, OTLP/HTTP"] = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"}
    try:
        await asyncio.sleep(1.0)  # the receiver listens
        times: dict[str, list[float]] = {label: [] for label in MODES}
        cpus: dict[str, list[float]] = {label: [] for label in MODES}
        with tempfile.TemporaryDirectory() as tmp:
            tree = build_tree(Path(tmp) / "tree", DEPTH)
            for _ in range(repeats):
                for label, env in MODES.items():
                    wall, cpu = await per_message(tree, messages, env)
                    times[label].append(wall)
                    cpus[label].append(cpu)
    finally:
        receiver.kill()
        await receiver.wait()
        for name in [n for n in os.environ if n.startswith("OTEL_")]:
            del os.environ[name]
    kept = repeats * messages  # the discarded mode's spans, one per message
    assert discard.spans == kept, f"{discard.spans} spans reached the exporter, not {kept}"
    # the least of the repeats: a neighbour's load only ever adds to a run
    off = min(cpus["off"])
    print(f"{messages} messages x {DEPTH + 2} decisions and 1 handling (1 span), {repeats} repeats")
    print("CPU time of the colony's process a message, the least of the repeats (wall time")
    print("beside it; the CPU is the figure: on a shared machine the wall time moves with the")
    print("neighbours)")
    for label in MODES:
        cpu = min(cpus[label])
        wall = min(times[label])
        extra = f"{cpu / off:4.2f}x off, {cpu - off:+6.1f} µs"
        print(f"  {label:<16}: {cpu:7.1f} µs CPU  ({extra})   wall {wall:7.1f} µs")
        record(
            "telemetry",
            f"message CPU, tracing {label}",
            cpu,
            "µs",
            loop=loop,
            floor=off,
            floor_label="the same message, tracing off",
        )
    print("the span maker alone, on a hand-off built in memory (least of the repeats):")
    for llm, what in ((False, "a handling (1 span)"), (True, "an LLM call (2 spans)")):
        cpu = min(maker_alone(max(messages, 1000), llm) for _ in range(repeats))
        print(f"  {what:<22}: {cpu:6.1f} µs CPU a hand-off")
        record("telemetry", f"span maker, {what}", cpu, "µs", loop=loop)
    made: list[ReadableSpan] = []
    maker_alone(1000, True, made)
    cpu = min(encoding(made) for _ in range(repeats))
    print(f"the OTLP encoding of a span, on the export thread: {cpu:6.1f} µs CPU")
    record("telemetry", "OTLP encoding, a span", cpu, "µs", loop=loop)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    add_loop_argument(parser)
    args = parser.parse_args()
    raise SystemExit(per_loop(args.loop, lambda loop: main(args.messages, args.repeats, loop)))
