"""The SDK's in-memory exporter, made the colony's exporter for one test
(``OTEL_TRACES_EXPORTER=memory``, registered as an embedding program would)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from colony.telemetry.setup import register_exporter, unregister_exporter

OTEL_VARIABLES = (
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
)


@pytest.fixture
def no_otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the machine's environment says about OpenTelemetry, not in this test."""
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch, no_otel_env: None) -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    register_exporter("memory", lambda settings: exporter)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "memory")
    try:
        yield exporter
    finally:
        unregister_exporter("memory")
