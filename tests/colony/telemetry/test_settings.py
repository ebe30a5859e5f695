"""When a colony traces and how: ``colony.json`` ``telemetry`` under the ``OTEL_*`` variables,
and the ids a colony trace gets in OpenTelemetry."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest

from colony.config.models import ColonyConfig, TelemetryConfig
from colony.observability import list_logger
from colony.telemetry import context
from colony.telemetry.settings import Settings, SettingsError, resolve
from colony.telemetry.setup import open_tracing


def _telemetry(**keys: Any) -> TelemetryConfig:
    return ColonyConfig.model_validate({"telemetry": keys}).telemetry or TelemetryConfig()


def test_without_a_telemetry_block_or_otel_variables_nothing_traces() -> None:
    assert resolve(None, {}) is None
    assert resolve(None, {"OTEL_SERVICE_NAME": "x"}) is None  # naming a service asks for nothing


@pytest.mark.parametrize(
    "env",
    [
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
        {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"},
        {"OTEL_TRACES_EXPORTER": "console"},
    ],
)
def test_an_otlp_endpoint_or_a_traces_exporter_in_the_environment_turns_tracing_on(
    env: dict[str, str],
) -> None:
    settings = resolve(None, env)
    assert settings is not None
    assert settings.endpoint is None  # the exporter reads the variable itself


def test_otel_variables_win_over_colony_json() -> None:
    config = _telemetry(
        exporter="otlp",
        endpoint="http://127.0.0.1:1",
        headers={"k": "v"},
        service_name="mine",
        sample_ratio=0.5,
    )
    env = {
        "OTEL_TRACES_EXPORTER": "console",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:2",
        "OTEL_EXPORTER_OTLP_HEADERS": "a=b",
        "OTEL_SERVICE_NAME": "theirs",
        "OTEL_TRACES_SAMPLER": "traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0.25",
    }
    assert resolve(config, env) == Settings(
        exporter="console",
        protocol="http/protobuf",
        endpoint=None,
        headers={},
        service_name=None,
        ratio=0.25,
        follow_caller=False,
    )
    assert resolve(config, {}) == Settings(
        exporter="otlp",
        protocol="http/protobuf",
        endpoint="http://127.0.0.1:1",
        headers={"k": "v"},
        service_name="mine",
        ratio=0.5,
        follow_caller=True,
    )


@pytest.mark.parametrize(
    ("config", "env"),
    [
        (TelemetryConfig(enabled=False), {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}),
        (TelemetryConfig(), {"OTEL_SDK_DISABLED": "true"}),
        (TelemetryConfig(), {"OTEL_TRACES_EXPORTER": "none"}),
    ],
)
def test_enabled_false_sdk_disabled_or_exporter_none_turn_tracing_off(
    config: TelemetryConfig, env: dict[str, str]
) -> None:
    assert resolve(config, env) is None


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"OTEL_TRACES_EXPORTER": "otlp,console"}, "OTEL_TRACES_EXPORTER"),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_PROTOCOL"),
        ({"OTEL_TRACES_SAMPLER": "jaeger_remote"}, "OTEL_TRACES_SAMPLER"),
        (
            {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"},
            "OTEL_TRACES_SAMPLER_ARG",
        ),
    ],
)
def test_an_otel_variable_the_colony_cannot_follow_is_named_and_tracing_stays_off(
    env: dict[str, str], named: str
) -> None:
    with pytest.raises(SettingsError, match=named):
        resolve(TelemetryConfig(), env)
    records: list[dict[str, Any]] = []
    said: list[str] = []
    assert open_tracing(TelemetryConfig(), list_logger(records), say=said.append, env=env) is None
    assert [r["event"] for r in records] == ["telemetry_off"]
    assert len(said) == 1
    assert named in said[0]


def test_an_exporter_nobody_registered_is_named_with_the_known_ones() -> None:
    records: list[dict[str, Any]] = []
    env = {"OTEL_TRACES_EXPORTER": "zipkin"}
    assert open_tracing(None, list_logger(records), env=env) is None
    [record] = records
    assert record["event"] == "telemetry_off"
    assert "console, otlp" in record["detail"]


def test_a_colony_trace_id_that_is_a_uuid_is_its_otel_trace_id() -> None:
    trace = "01a2498c-55d3-75fa-b8d3-0942cd4ff081"
    assert context.trace_id_of(trace) == uuid.UUID(trace).int
    other = context.trace_id_of("not-a-uuid")  # an id a client chose: hashed, still stable
    assert other == context.trace_id_of("not-a-uuid") != 0


def test_a_span_id_is_derived_from_the_message_id_and_the_part() -> None:
    ids = {context.span_id_of("m1"), context.span_id_of("m1", "/llm"), context.span_id_of("m2")}
    assert len(ids) == 3
    assert context.span_id_of("m1") == context.span_id_of("m1")
    assert all(0 < i < 2**64 for i in ids)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", (True,)),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", (False,)),
        ("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", (True,)),
        ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", None),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", None),
        ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", None),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", None),
        ("garbage", None),
        ("", None),
    ],
)
def test_a_traceparent_is_read_by_the_w3c_rules(header: str, expected: tuple[bool] | None) -> None:
    remote = context.parse_traceparent(header)
    if expected is None:
        assert remote is None
    else:
        assert remote is not None
        assert (remote.trace_id, remote.span_id) == (
            0x4BF92F3577B34DA6A3CE929D0E0E4736,
            0xF067AA0BA902B7,
        )
        assert (remote.sampled,) == expected


def test_with_telemetry_off_a_traceparent_is_neither_kept_nor_sent() -> None:
    assert not context.active()
    context.join("t-off", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    assert context.remote_of("t-off") is None
    assert context.outgoing_traceparent() is None


def test_a_telemetry_block_refuses_unknown_keys_and_a_ratio_outside_0_to_1() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        ColonyConfig.model_validate({"telemetry": {"sampling": 1}})
    with pytest.raises(ValidationError):
        ColonyConfig.model_validate({"telemetry": {"sample_ratio": 1.5}})
    assert _telemetry(sample_ratio=0).sample_ratio == 0


async def test_a_sample_ratio_keeps_that_share_of_colony_traces_each_whole(
    spans: object,
) -> None:
    from colony.ids import uuid7

    tracing = open_tracing(_telemetry(sample_ratio=0.25), list_logger([]))
    assert tracing is not None
    try:
        traces = [context.trace_id_of(uuid7()) for _ in range(4000)]
        kept = [t for t in traces if tracing.decide(t, None)]
        assert 800 < len(kept) < 1200
        assert all(tracing.decide(t, None) for t in kept)  # the same answer for every span
        caller = context.Remote(traces[0], 1, sampled=True)
        assert all(tracing.decide(t, caller) for t in traces[:50])  # the caller decided
    finally:
        await tracing.close()


def test_only_a_canonical_uuid_or_32_lowercase_hex_digits_is_taken_as_the_trace_id() -> None:
    canonical = "01a2498c-55d3-75fa-b8d3-0942cd4ff081"
    assert context.derived_trace_id(canonical.replace("-", "")) == uuid.UUID(canonical).int
    # other spellings of the same digits are other colony traces: hashed, not merged
    for other in (
        canonical.upper(),
        "01a2498c55d3-75fa-b8d3-0942-cd4ff081",  # the dashes elsewhere
        "01a2498c_55d3_75fa_b8d3_0942cd4ff081",  # int() would take the underscores
    ):
        assert context.derived_trace_id(other) != uuid.UUID(canonical).int
        assert context.derived_trace_id(other) == context.derived_trace_id(other)


CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
OTHER = "00-11111111111111111111111111111111-2222222222222222-01"


def _tracing_on() -> context.Decide:
    def decide(trace_id: int, remote: context.Remote | None) -> bool:
        return True

    context.register(decide)
    return decide


def test_a_second_traceparent_for_a_joined_trace_is_ignored() -> None:
    decide = _tracing_on()
    try:
        assert context.join("t", CALLER)
        assert not context.join("t", OTHER)
        remote = context.remote_of("t")
        assert remote is not None
        assert remote.trace_id == 0x4BF92F3577B34DA6A3CE929D0E0E4736
        context.unjoin("t")  # a refused request's link is undone
        assert context.remote_of("t") is None
    finally:
        context.unregister(decide)


def test_the_least_recently_used_caller_link_is_evicted_not_the_first_joined(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(context, "REMOTE_LIMIT", 2)
    decide = _tracing_on()
    try:
        context.join("a", CALLER)
        context.join("b", CALLER)
        context.trace_id_of("a")  # trace a is still running: its spans use the link
        context.join("c", CALLER)
        assert context.remote_of("a") is not None
        assert context.remote_of("b") is None
        assert context.remote_of("c") is not None
    finally:
        context.unregister(decide)


async def _service_name(config: TelemetryConfig | None) -> object:
    tracing = open_tracing(config, list_logger([]))
    assert tracing is not None
    try:
        return tracing.spans._resource.attributes["service.name"]
    finally:
        await tracing.close()


async def test_the_service_name_is_colony_json_s_else_the_environment_s_else_colony(
    spans: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert await _service_name(None) == "colony"
    assert await _service_name(_telemetry(service_name="bot")) == "bot"
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod,service.name=x")
    assert await _service_name(None) == "x"
    assert await _service_name(_telemetry()) == "x"  # a block without a name: not "colony"
    assert await _service_name(_telemetry(service_name="bot")) == "x"  # the variable wins
    monkeypatch.setenv("OTEL_SERVICE_NAME", "y")
    assert await _service_name(_telemetry(service_name="bot")) == "y"


def test_grpc_asked_for_without_its_exporter_names_that_package_not_the_otel_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.grpc.trace_exporter", None)
    records: list[dict[str, Any]] = []
    said: list[str] = []
    env = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    assert open_tracing(None, list_logger(records), say=said.append, env=env) is None
    [record] = records
    assert record["event"] == "telemetry_unavailable"
    assert "pip install opentelemetry-exporter-otlp-proto-grpc" in said[0]
    assert "otel extra" not in said[0]


async def test_otel_values_the_sdk_refuses_end_as_log_lines_not_tracebacks(
    spans: object, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    records: list[dict[str, Any]] = []
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "many")  # the SDK logs it, and goes on
    tracing = open_tracing(None, list_logger(records))
    assert tracing is not None
    await tracing.close()
    sdk = [r for r in records if r["event"] == "telemetry_sdk"]
    assert sdk
    assert "many" in sdk[0]["detail"]
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "-5")  # the SDK raises
    records.clear()
    assert open_tracing(None, list_logger(records)) is None
    assert [r["event"] for r in records if r["event"] != "telemetry_sdk"] == ["telemetry_off"]
    assert "Traceback" not in capfd.readouterr().err


def test_the_suite_runs_without_the_developers_otel_variables() -> None:
    # tests/conftest.py takes them out for the session; a test sets what it wants itself
    assert [name for name in os.environ if name.startswith("OTEL_")] == []
