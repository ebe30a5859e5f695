"""Whether a colony traces, and how: ``colony.json`` ``telemetry`` under the ``OTEL_*``
environment variables (docs/telemetry.md).

Tracing is on when ``telemetry`` is in ``colony.json`` (and not ``enabled: false``), or, with
no such block, when the environment asks for traces (``OTEL_TRACES_EXPORTER`` other than
``none``, or an OTLP endpoint). ``OTEL_SDK_DISABLED=true`` and ``enabled: false`` turn it
off whatever else is set. Every ``OTEL_*`` variable that is set wins over its key.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from colony.config.models import TelemetryConfig
from colony.errors import ColonyError

_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_PROTOCOLS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
_HEADERS = ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")
DEFAULT_SERVICE = "colony"
"""``service.name`` when neither ``colony.json`` nor the environment names one."""


class SettingsError(ColonyError, ValueError):
    """An ``OTEL_*`` variable the colony cannot follow (named, with the fix)."""

    code = "telemetry_settings"


@dataclass(frozen=True, slots=True)
class Settings:
    """What the tracing is built from, config and environment merged."""

    exporter: str
    """``otlp``, ``console``, or a name an embedding program registered."""
    protocol: str
    endpoint: str | None
    """Base URL from ``colony.json`` (None when the environment names one: the exporter
    reads it there, with its per-signal rules)."""
    headers: dict[str, str] = field(default_factory=dict)
    """From ``colony.json``; empty when the environment sets them."""
    service_name: str | None = None
    """From ``colony.json``, else ``colony``; None when the environment names the service
    (``OTEL_SERVICE_NAME``, or ``service.name`` in ``OTEL_RESOURCE_ATTRIBUTES``: the SDK reads
    them)."""
    ratio: float = 1.0
    follow_caller: bool = True
    """A trace joined from a ``traceparent`` is recorded iff the caller's was sampled."""


def resolve(
    config: TelemetryConfig | None, env: Mapping[str, str] | None = None
) -> Settings | None:
    """The tracing to set up, or None when tracing is off. Raises :class:`SettingsError`."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if config is not None and not config.enabled:
        return None
    exporters = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if config is None and not exporters and not any(env.get(name) for name in _ENDPOINTS):
        return None
    base = config or TelemetryConfig()
    names = [name.strip() for name in exporters.split(",") if name.strip()]
    if names == ["none"]:
        return None
    if len(names) > 1:
        raise SettingsError(
            f"OTEL_TRACES_EXPORTER={exporters}: the colony sends traces to one exporter; "
            "name one (otlp or console)"
        )
    exporter = names[0] if names else base.exporter
    protocol = next((env[n] for n in _PROTOCOLS if env.get(n)), base.protocol).strip().lower()
    if protocol not in ("http/protobuf", "grpc"):
        raise SettingsError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: the colony exports traces over "
            "http/protobuf or grpc; set one of those"
        )
    from_env = any(env.get(name) for name in _ENDPOINTS)
    ratio, follow = _sampler(env, base.sample_ratio)
    return Settings(
        exporter=exporter,
        protocol=protocol,
        endpoint=None if from_env else base.endpoint,
        headers={} if any(env.get(n) for n in _HEADERS) else dict(base.headers),
        service_name=None if _service_named(env) else base.service_name or DEFAULT_SERVICE,
        ratio=ratio,
        follow_caller=follow,
    )


def _service_named(env: Mapping[str, str]) -> bool:
    """Whether the environment names the service (the SDK then reads it there)."""
    if env.get("OTEL_SERVICE_NAME", "").strip():
        return True
    pairs = env.get("OTEL_RESOURCE_ATTRIBUTES", "").split(",")
    return any(pair.split("=", 1)[0].strip() == "service.name" for pair in pairs if "=" in pair)


def _sampler(env: Mapping[str, str], ratio: float) -> tuple[float, bool]:
    """``(ratio, follow the caller)`` from ``OTEL_TRACES_SAMPLER`` and its argument."""
    name = env.get("OTEL_TRACES_SAMPLER", "").strip().lower()
    if not name:
        return ratio, True
    follow = name.startswith("parentbased_")
    base = name.removeprefix("parentbased_")
    if base == "always_on":
        return 1.0, follow
    if base == "always_off":
        return 0.0, follow
    if base == "traceidratio":
        arg = env.get("OTEL_TRACES_SAMPLER_ARG", "1.0")
        try:
            value = float(arg)
        except ValueError:
            value = -1.0
        if not 0.0 <= value <= 1.0:
            raise SettingsError(
                f"OTEL_TRACES_SAMPLER_ARG={arg}: the ratio must be a number from 0 to 1"
            )
        return value, follow
    raise SettingsError(
        f"OTEL_TRACES_SAMPLER={name}: the colony knows always_on, always_off, traceidratio "
        "and their parentbased_ forms; set one of those"
    )
