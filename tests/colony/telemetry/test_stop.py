"""A stopping colony does not wait on a span receiver that does not answer."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from colony.telemetry import setup
from colony.testing import ColonyHarness
from tests.conftest import TreeFactory, cell, hive


class StuckExporter(SpanExporter):
    """An export that hangs (a receiver that never answers) until the exporter is shut down."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.exports = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.exports += 1
        self.released.wait(30)
        return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        self.released.set()


async def test_a_receiver_that_does_not_take_the_last_spans_is_cut_off_at_stop(
    make_tree: TreeFactory, monkeypatch: pytest.MonkeyPatch, no_otel_env: None
) -> None:
    stuck = StuckExporter()
    setup.register_exporter("stuck", lambda settings: stuck)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "stuck")
    monkeypatch.setattr(setup, "STOP_FLUSH_S", 0.3)
    root = make_tree(
        {
            "main/config.json": hive({"from": ".", "to": "./echo"}),
            "main/echo/config.json": cell("code", {"script_inline": "print('{}')"}),
        }
    )
    records: list[dict[str, Any]] = []
    try:
        async with ColonyHarness(root) as colony:
            await colony.send("/", {"messages": []})
            await colony.settle()
            records = colony.records
            began = time.monotonic()
        took = time.monotonic() - began
    finally:
        setup.unregister_exporter("stuck")
    assert stuck.exports == 1
    assert took < 5  # not the 30 s the export would hang
    assert stuck.released.is_set()
    assert [r["event"] for r in records if r["event"].startswith("telemetry_flush")] == [
        "telemetry_flush_cut"
    ]
