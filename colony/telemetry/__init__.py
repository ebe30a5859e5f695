"""OpenTelemetry traces of the colony's traces (docs/telemetry.md).

:mod:`colony.telemetry.context` (ids derived from messages, ``traceparent`` in and out) is
light and imported by cells; :mod:`colony.telemetry.setup` and
:mod:`colony.telemetry.spans` import the OpenTelemetry SDK (the ``otel`` extra), only when
tracing is on.
"""
