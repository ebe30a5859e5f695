"""Starting and stopping a colony's OpenTelemetry tracing (docs/telemetry.md).

:func:`open_tracing` reads ``colony.json`` ``telemetry`` and the ``OTEL_*`` variables
(:mod:`colony.telemetry.settings`); when tracing is off it returns None and nothing is
registered anywhere, so a colony without telemetry pays nothing. When it is on it builds the
SDK's batch span processor in front of the exporter (the colony's own, never the
process-wide tracer provider), hangs a :class:`colony.telemetry.spans.SpanMaker` on the
colony's hand-off taps and the handling-begins hook, and :meth:`Tracing.close` flushes and
shuts it down at stop. The SDK is imported only here and only then: a daemon without the ``otel``
extra that is asked to trace says so once (log and stderr) and runs untraced.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import sys
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from colony.config.models import TelemetryConfig
from colony.observability import Logger
from colony.telemetry import context as ids
from colony.telemetry.settings import Settings, SettingsError, resolve

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor
    from opentelemetry.sdk.trace.export import SpanExporter

    from colony.colony import Colony
    from colony.telemetry.spans import SpanMaker

ExporterFactory = Callable[[Settings], "SpanExporter"]

_exporters: dict[str, ExporterFactory] = {}
"""Exporters an embedding program (or a test) added by name, for ``OTEL_TRACES_EXPORTER``."""

GRPC_PACKAGE = "opentelemetry-exporter-otlp-proto-grpc"
"""The OTLP/gRPC exporter: not in the ``otel`` extra (it pulls in grpcio)."""

SCOPE = "colony"
"""The instrumentation scope of every span the colony makes."""


def register_exporter(name: str, factory: ExporterFactory) -> None:
    """Make ``OTEL_TRACES_EXPORTER=<name>`` (or ``telemetry.exporter``) use ``factory``: how
    an embedding program sends the colony's spans somewhere of its own (the tests use the
    SDK's in-memory exporter this way)."""
    _exporters[name] = factory


def unregister_exporter(name: str) -> None:
    _exporters.pop(name, None)


class Tracing:
    """A colony's live tracing: the span pipeline, and the hooks it hung on the colony."""

    def __init__(
        self,
        processor: SpanProcessor,
        exporter: SpanExporter,
        spans: SpanMaker,
        settings: Settings,
        log: Logger,
        sdk_log: _SdkLog | None = None,
    ) -> None:
        self.processor = processor
        self.exporter = exporter
        self.spans = spans
        self.settings = settings
        self.log = log
        self._colony: Colony | None = None
        self._sdk_log = _SdkLog(log) if sdk_log is None else sdk_log
        bound = 2**56 if settings.ratio >= 1.0 else int(settings.ratio * 2**56)
        follow = settings.follow_caller

        def decide(trace_id: int, remote: ids.Remote | None) -> bool:
            if follow and remote is not None:
                return remote.sampled
            # the low 56 bits: random in a UUIDv7 and in a W3C trace id alike
            return (trace_id & 0xFFFFFFFFFFFFFF) < bound

        self.decide: ids.Decide = decide

    def attach(self, colony: Colony) -> None:
        """Hang the span maker on ``colony``'s hand-offs and handling starts, and take the
        SDK's own complaints (an export that failed) into the colony's log."""
        self._colony = colony
        ids.register(self.decide)
        colony.events.taps.append(self.spans)
        colony.events.began_hooks.append(ids.begin)
        self._sdk_log.hook()

    async def close(self) -> None:
        """Unhook, then flush what is batched and shut the exporter down, on a thread of its
        own (an export is a blocking HTTP request). A receiver that does not take the last
        spans within :data:`STOP_FLUSH_S` (down, or slow) does not hold the stop up: the
        exporter's retries are cut short and those spans are dropped, said in the log."""
        colony = self._colony
        if colony is not None:
            if self.spans in colony.events.taps:
                colony.events.taps.remove(self.spans)
            if ids.begin in colony.events.began_hooks:
                colony.events.began_hooks.remove(ids.begin)
        ids.unregister(self.decide)
        loop = asyncio.get_running_loop()
        stopped: asyncio.Future[None] = loop.create_future()

        def stop() -> None:
            try:
                self.processor.shutdown()
            finally:
                self._sdk_log.unhook()
                with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
                    loop.call_soon_threadsafe(_settle, stopped)

        # A daemon thread, not the loop's executor: an interpreter exiting never waits for it.
        threading.Thread(target=stop, name="colony-telemetry-stop", daemon=True).start()
        try:
            await asyncio.wait_for(asyncio.shield(stopped), STOP_FLUSH_S)
        except TimeoutError:
            self.log.warning(
                "telemetry_flush_cut",
                detail=f"the span receiver did not take the last spans within "
                f"{STOP_FLUSH_S:g} s; they were dropped",
            )
            self._sdk_log.quiet = True  # (the SDK's own account of the cut: said above)
            self.exporter.shutdown()  # ends the retries the export thread sleeps in


STOP_FLUSH_S = 3.0
"""How long a stopping colony waits for its last spans to be taken."""


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _SdkLog(logging.Handler):
    """The OpenTelemetry SDK's log records (``logging``), as colony log lines
    (``telemetry_sdk``), instead of Python's last-resort print to the terminal."""

    def __init__(self, log: Logger) -> None:
        super().__init__(logging.WARNING)
        self._log = log
        self._logger = logging.getLogger("opentelemetry")
        self._propagate = self._logger.propagate
        self.quiet = False

    def hook(self) -> None:
        self._logger.addHandler(self)
        self._logger.propagate = False

    def unhook(self) -> None:
        self._logger.removeHandler(self)
        self._logger.propagate = self._propagate

    def emit(self, record: logging.LogRecord) -> None:
        if self.quiet:
            return
        level = "error" if record.levelno >= logging.ERROR else "warning"
        with contextlib.suppress(Exception):  # a log line must never break an export
            detail = record.getMessage()
            if record.exc_info and record.exc_info[1] is not None:  # one line, no traceback
                detail = f"{detail}: {record.exc_info[1]}"
            getattr(self._log, level)("telemetry_sdk", logger=record.name, detail=detail)


def open_tracing(
    config: TelemetryConfig | None,
    log: Logger,
    *,
    say: Callable[[str], None] | None = None,
    env: Mapping[str, str] | None = None,
) -> Tracing | None:
    """The colony's tracing, or None when it is off or cannot start: a warning in the log,
    and through ``say`` (the daemon's stderr, when its log does not echo there), never a
    refusal to boot: telemetry is not what the colony is for."""

    def warn(event: str, detail: str) -> None:
        log.warning(event, detail=detail)
        if say is not None:
            say(detail)

    try:
        settings = resolve(config, env)
    except SettingsError as exc:
        warn("telemetry_off", str(exc))
        return None
    if settings is None:
        return None
    sdk_log = _SdkLog(log)
    sdk_log.hook()  # what the SDK says of bad OTEL_* values while building: log lines
    try:
        processor, exporter, spans = _pipeline(settings)
    except ImportError as exc:
        sdk_log.unhook()
        missing = exc.name or "the OpenTelemetry SDK"
        if settings.protocol == "grpc" and "grpc" in missing:  # not in the otel extra
            how = (
                f"install {GRPC_PACKAGE} (pip install {GRPC_PACKAGE}), or export over http/protobuf"
            )
        else:
            how = "install the otel extra (pip install 'colony-daemon[otel]')"
        warn(
            "telemetry_unavailable",
            f"tracing was asked for but {missing} is not installed; {how}; the colony runs "
            "untraced",
        )
        return None
    except _Unknown as exc:
        sdk_log.unhook()
        warn("telemetry_off", str(exc))
        return None
    except ValueError as exc:  # an OTEL_* value the SDK refuses (OTEL_BSP_SCHEDULE_DELAY=-5)
        sdk_log.unhook()
        warn(
            "telemetry_off",
            f"the OpenTelemetry SDK refused its settings: {exc}; the colony runs untraced",
        )
        return None
    log.info(
        "telemetry_on",
        exporter=settings.exporter,
        protocol=settings.protocol if settings.exporter == "otlp" else None,
        ratio=settings.ratio,
    )
    return Tracing(processor, exporter, spans, settings, log, sdk_log)


class _Unknown(Exception):
    """An exporter name nobody registered."""


def _pipeline(settings: Settings) -> tuple[SpanProcessor, SpanExporter, SpanMaker]:
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    from colony.telemetry.spans import SpanMaker

    exporter = _exporter(settings)
    extra: dict[str, Any] = {}
    if settings.service_name is not None:
        extra[SERVICE_NAME] = settings.service_name
    # Resource.create reads OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME itself; the batch
    # processor its OTEL_BSP_* variables.
    resource = Resource.create(extra)
    processor = BatchSpanProcessor(exporter)
    return processor, exporter, SpanMaker(processor, resource, InstrumentationScope(SCOPE))


def _exporter(settings: Settings) -> SpanExporter:
    name = settings.exporter
    if name in _exporters:
        return _exporters[name](settings)
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        # stderr: stdout may be the stdio bridge's channel, or the log's (--log -)
        return ConsoleSpanExporter(out=sys.stderr)
    if name != "otlp":
        known = ", ".join(sorted({"otlp", "console", *_exporters}))
        raise _Unknown(
            f"OTEL_TRACES_EXPORTER={name}: the colony knows {known}; the colony runs untraced"
        )
    headers = settings.headers or None
    if settings.protocol == "grpc":  # another package, not in the otel extra
        grpc = importlib.import_module("opentelemetry.exporter.otlp.proto.grpc.trace_exporter")
        exporter: SpanExporter = grpc.OTLPSpanExporter(endpoint=settings.endpoint, headers=headers)
        return exporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    endpoint = settings.endpoint
    if endpoint is not None:
        endpoint = endpoint.rstrip("/") + "/v1/traces"
    return OTLPSpanExporter(endpoint=endpoint, headers=headers)
