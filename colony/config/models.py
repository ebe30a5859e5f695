"""The shape of a colony tree's JSON files, as pydantic models.

Three kinds of file, all in meclaw's format:

* ``colony.json`` (optional): colony-wide defaults, :class:`ColonyConfig`;
* a cell's ``config.json``: a closed ``cell`` block, opaque ``params`` and a ``contract``,
  :class:`CellConfig`;
* a hive's ``config.json`` (``cell.type == "hive"``): ``params`` holds the graph,
  :class:`HiveConfig`.

Unknown keys are refused exactly where meclaw refuses them (``colony.json``, the ``cell``
block, hive ``params`` and everything under it, edges, modifiers) and tolerated where meclaw
tolerates them (a cell's top level, ``contract`` and its specs). Types are strict: ``"5"`` is
not an integer and ``1.0`` is not a count, as in meclaw's serde parsing.

Checks that need more than one file (contract presence by cell type, expressions, endpoints)
live in :mod:`colony.config.loader`, not here.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from colony.cluster import dsn as cluster_dsn
from colony.cluster.partition import TRACE_ID, PartitionPathError, context_keys
from colony.ingress import MAX_TTL, MIN_TTL

U32 = Annotated[int, Field(ge=0, le=2**32 - 1)]
U64 = Annotated[int, Field(ge=0, le=2**64 - 1)]
I64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]

# Closed blocks: an unknown key is a boot error.
_CLOSED = ConfigDict(
    extra="forbid", strict=True, frozen=True, populate_by_name=True, use_attribute_docstrings=True
)
# Open blocks: meclaw drops unknown keys here, so a tree using them must still load.
_OPEN = ConfigDict(
    extra="allow", strict=True, frozen=True, populate_by_name=True, use_attribute_docstrings=True
)

SCHEMA_VERSION = 1

INGRESS_CONTEXT_KEYS = ("chat_id", "locale", "session_id", "turn_id", "user_id")
"""The context keys an ingress cell may mint (meclaw's standard header convention)."""

CONSUMES_TYPES = ("array", "blob_uuid", "boolean", "number", "object", "string")
"""Type tokens a ``consumes`` spec can match; any other token never matches a value."""

EMITS_TYPES = ("array", "blob_uuid", "boolean", "integer", "null", "number", "object", "string")
"""Type tokens an ``emits`` spec compiles to (JSON Schema types plus ``blob_uuid``)."""

LOG_LEVELS = ("trace", "debug", "info", "warn", "warning", "error")


PARTITIONS_MAX = 4096
"""More partitions than any cluster has nodes times cores; each costs a lease row and a
claim, so the bound keeps a typo (``160000``) from turning into that many rows."""
LEASE_MS_MIN = 1_000
"""Below a second, a pause of the event loop or a slow commit would lose a partition."""
LEASE_MS_MAX = 3_600_000
"""An hour: past it, the partitions of a node that died stall longer than anyone waits."""


class ClusterConfig(BaseModel):
    """``colony.json`` ``cluster``: several daemons serve this colony through one PostgreSQL
    database (docs/cluster.md). Its strings are ``${VAR}``-substituted (the DSN holds a
    password); nothing here connects."""

    model_config = _CLOSED

    dsn: Annotated[str, Field(repr=False)]
    """libpq connection string of the shared database: ``postgresql://…`` or
    ``host=… dbname=…``. Checked for shape only, and never shown in a message or a repr (it
    holds a password)."""
    partitions: Annotated[int, Field(ge=1, le=PARTITIONS_MAX)] = 16
    """How many slices the conversations are hashed into; each is owned by one node at a
    time. Every node of a cluster must agree on it."""
    lease_ms: Annotated[int, Field(ge=LEASE_MS_MIN, le=LEASE_MS_MAX)] = 10_000
    """How long a node's claim on a partition lasts without renewal: what a dead node's
    conversations wait before another node takes them over."""
    partition_by: str = TRACE_ID
    """Where a message's conversation key is read at ingress: ``trace_id``, or
    ``context.<key>[.<key>…]`` (:mod:`colony.cluster.partition`)."""

    @field_validator("dsn")
    @classmethod
    def _libpq_dsn(cls, value: str) -> str:
        if not value.strip():
            raise PydanticCustomError(
                "cluster_dsn_empty", "cluster.dsn is empty; the cluster needs its database"
            )
        try:
            cluster_dsn.check(value)
        except cluster_dsn.DsnProblem as problem:
            raise PydanticCustomError(
                "cluster_dsn_invalid",
                "cluster.dsn is not a PostgreSQL connection string: {reason} (the value is "
                "not shown)",
                {"reason": problem.reason, "fix": problem.fix},
            ) from None
        return value

    @field_validator("partition_by")
    @classmethod
    def _readable_path(cls, value: str) -> str:
        try:
            context_keys(value)
        except PartitionPathError as problem:
            raise PydanticCustomError(
                "cluster_partition_by_invalid",
                "cluster.partition_by is not a path the cluster can read: {reason}",
                {"reason": str(problem)},
            ) from None
        return value


class RetentionConfig(BaseModel):
    """``colony.json`` ``retention``: how long the record is kept (docs/retention.md). The
    defaults keep a busy colony's record under a known size; 0 keeps that part forever."""

    model_config = _CLOSED

    message_log_days: U32 = 14
    """Message-log, handling and fired-edge rows older than this many days are pruned."""
    message_log_max_mb: U32 = 512
    """Past this size (MB: headers, bodies and about 500 bytes a row for its ids, indexes and
    handling row) the oldest message-log rows are pruned first."""
    dead_letters_days: U32 = 90
    """Dead letters older than this many days are pruned (a replayed one's row included)."""
    log_file_max_mb: U32 = 64
    """``log.jsonl`` past this size is rotated to ``log.jsonl.1`` (0: never rotated)."""
    log_file_keep: U32 = 5
    """Rotated log files kept (``log.jsonl.1`` .. ``.N``); the oldest beyond is deleted."""


class TelemetryConfig(BaseModel):
    """``colony.json`` ``telemetry``: OpenTelemetry export (docs/telemetry.md). The standard
    ``OTEL_*`` environment variables, when set, take precedence over these keys."""

    model_config = _CLOSED

    enabled: bool = True
    """False turns tracing off even when ``OTEL_*`` variables are set."""
    exporter: Literal["otlp", "console"] = "otlp"
    """Where spans go: ``otlp`` (an OTLP receiver) or ``console`` (stderr, for a look).
    ``OTEL_TRACES_EXPORTER`` wins."""
    protocol: Literal["http/protobuf", "grpc"] = "http/protobuf"
    """The OTLP wire (``grpc`` needs opentelemetry-exporter-otlp-proto-grpc).
    ``OTEL_EXPORTER_OTLP_PROTOCOL`` wins."""
    endpoint: str | None = None
    """The OTLP receiver's base URL (``/v1/traces`` is added for http/protobuf), e.g.
    ``http://127.0.0.1:4318``; None: the SDK's default. ``OTEL_EXPORTER_OTLP_ENDPOINT`` wins."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Headers sent with every export (an API key: write ``${VAR}``).
    ``OTEL_EXPORTER_OTLP_HEADERS`` wins."""
    service_name: str | None = None
    """The ``service.name`` resource attribute; None: ``colony``. ``OTEL_SERVICE_NAME`` (or
    a ``service.name`` in ``OTEL_RESOURCE_ATTRIBUTES``) wins."""
    sample_ratio: Annotated[float, Field(ge=0.0, le=1.0)] = 1.0
    """The share of colony traces recorded (decided on the trace id, so a trace is whole or
    absent); a trace joined from a ``traceparent`` follows the caller's sampled flag.
    ``OTEL_TRACES_SAMPLER``/``OTEL_TRACES_SAMPLER_ARG`` win."""


class ColonyConfig(BaseModel):
    """``colony.json``: every key optional, every unknown key refused."""

    model_config = _CLOSED

    schema_version: U32 = SCHEMA_VERSION
    """Format version of this file; only 1 exists."""
    mailbox_default_capacity: Annotated[int, Field(ge=1, le=2**32 - 1)] = 1000
    """Capacity of a cell mailbox whose cell does not set ``mailbox_size``."""
    message_timeout_default_ms: U64 = 60_000
    """Backstop for one message in a cell; 0 turns it off."""
    idle_timeout_default_ms: U64 = 60_000
    """How long an idle stateful cell stays awake."""
    message_default_ttl: Annotated[int, Field(ge=MIN_TTL, le=MAX_TTL)] = 64
    """Routing budget of a new message, and what ``restore_ttl`` restores to."""
    ttl_notice: bool = False
    """Tell a dying message's ``reply_to`` that it died of TTL exhaustion."""
    restart_max_retries: U32 = 5
    """Restarts a crashing cell gets before it is marked failed."""
    blob_inline_max_bytes: U64 = 65_536
    """Bodies at or above this size are offloaded to the blob store."""
    blob_max_recursion_depth: U32 = 64
    """Deepest blob pointer chain resolved at delivery."""
    strict_validation: bool = False
    """Check every emission against its cell's ``contract.emits``."""
    log_default_level: str = "info"
    """Log level when ``--log-level`` is not given."""
    watchdog_threshold: Annotated[int, Field(ge=1, le=2**32 - 1)] = 5
    """Silent supervisor periods before the watchdog trips."""
    watchdog_period_ms: Annotated[int, Field(ge=1, le=2**64 - 1)] = 100
    """Length of one supervisor period."""
    watchdog_on_trip: Literal["exit", "log-only"] = "exit"
    """What a tripped watchdog does."""
    watchdog_stall_ms: U64 = 120_000
    """A cell that takes nothing from a non-empty mailbox this long is reported (0: never);
    twice the default message backstop, so one slow message alone is no stall."""
    delivery: Literal["at_least_once", "at_most_once"] = "at_least_once"
    """``at_least_once``: every mailbox is journalled in ``colony.db`` and what was in flight
    at a crash is redelivered at boot; ``at_most_once``: mailboxes live in memory only, as in
    meclaw."""
    mailbox_max_bytes: U64 = 64 * 2**20
    """Bytes (as JSON) one mailbox holds before its senders wait, as when it is full; a
    mailbox always takes one message however large. 0 turns the bound off."""
    queued_max_bytes: U64 = 256 * 2**20
    """Bytes (as JSON) all mailboxes together hold before ingress is refused with 429 and
    ``Retry-After``. 0 turns the bound off."""
    api_inflight_max_bytes: Annotated[int, Field(ge=1, le=2**62)] = 64 * 2**20
    """Request bodies the HTTP API holds at once; past it a request is answered 429 with
    ``Retry-After``."""
    api_max_connections: Annotated[int, Field(ge=1, le=2**20)] | None = None
    """Open HTTP connections at once; more are answered 503 and closed. Default: a quarter
    of the process's file-descriptor limit, between 16 and 1024."""
    api_header_timeout_ms: Annotated[int, Field(ge=1, le=2**32 - 1)] = 10_000
    """A request's head must arrive within this (also the keep-alive idle limit)."""
    api_body_timeout_ms: Annotated[int, Field(ge=1, le=2**32 - 1)] = 30_000
    """A request's body must arrive within this (408 otherwise)."""
    cluster: ClusterConfig | None = None
    """Several daemons share this colony through PostgreSQL; absent: one daemon, SQLite."""
    retention: RetentionConfig = Field(default_factory=RetentionConfig)
    """How long the message log and the dead letters are kept."""
    telemetry: TelemetryConfig | None = None
    """OpenTelemetry export; absent: only when ``OTEL_*`` variables ask for it."""

    @model_validator(mode="after")
    def _cluster_journals(self) -> ColonyConfig:
        if self.cluster is not None and self.delivery != "at_least_once":
            raise PydanticCustomError(
                "cluster_needs_journal",
                "a cluster needs delivery at_least_once: a conversation moves between nodes "
                "through the journal, which at_most_once does not keep (remove delivery or "
                "the cluster block)",
            )
        return self

    @field_validator("schema_version")
    @classmethod
    def _only_version_one(cls, value: int) -> int:
        if value != SCHEMA_VERSION:
            raise PydanticCustomError(
                "schema_version_unsupported",
                "schema_version {found} is not supported; this daemon reads schema_version 1",
                {"found": value},
            )
        return value

    @field_validator("log_default_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        if value.lower() not in LOG_LEVELS:
            raise PydanticCustomError(
                "invalid_log_level",
                "log level '{level}' is not one of trace, debug, info, warn, error",
                {"level": value},
            )
        return value


class Provenance(BaseModel):
    """Where an instantiated cell came from (written by template instantiation)."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    template: Annotated[str, Field(strict=True)]
    template_version: Annotated[str | None, Field(strict=True)] = None
    template_chain: list[tuple[str, str | None]] | None = None
    instantiated_at: Annotated[int, Field(strict=True)]


class Surface(BaseModel):
    """``cell.surface``: the cell may be served over HTTP."""

    model_config = _CLOSED

    title: str = ""
    assets: str | None = None
    """One plain folder name under the cell's own folder."""
    boot_hint: str = ""

    @field_validator("assets")
    @classmethod
    def _plain_segment(cls, value: str | None) -> str | None:
        if value is not None and (
            value in ("", ".", "..") or "/" in value or "\\" in value or "\0" in value
        ):
            raise PydanticCustomError(
                "invalid_assets_dir",
                "assets must be one plain folder name inside the cell folder, got '{value}'",
                {"value": value},
            )
        return value


class CellBlock(BaseModel):
    """The ``cell`` block: how the colony runs this node. Its key list is closed."""

    model_config = _CLOSED

    type: str
    """Cell type, e.g. ``llm``, ``code``, ``store``; ``hive`` marks a scope."""
    id: str | None = None
    """Stable cell id, written once at instantiation."""
    template: str | None = None
    """Template-time only: a live tree must not carry it (the loader refuses it)."""
    restart_limit: U32 | None = None
    timeout: I64 = 0
    """0 = idle model, >0 = one-shot, -1 = persistent (stateful cells)."""
    idle_timeout_ms: U64 | None = None
    message_timeout: I64 | None = None
    mailbox_size: Annotated[int, Field(ge=0, le=2**32 - 1)] | None = None
    provenance: Provenance | None = None
    surface: Surface | None = None

    @field_validator("mailbox_size")
    @classmethod
    def _mailbox_not_zero(cls, value: int | None) -> int | None:
        if value == 0:
            raise PydanticCustomError(
                "mailbox_size_zero",
                "mailbox_size is 0; a mailbox must hold at least one message",
            )
        return value


class SettingSpec(BaseModel):
    """One declared setting of a cell (documentation for builders)."""

    model_config = _OPEN

    type: str
    secret: bool = False
    default: Any = None
    description: str | None = None


class ConsumeSpec(BaseModel):
    """One key a cell reads from incoming messages."""

    model_config = _OPEN

    type: str
    required: bool = True


class EmitSpec(BaseModel):
    """One key a cell writes into its emissions."""

    model_config = _OPEN

    type: str
    values: list[str] | None = None
    required: bool = True
    description: str | None = None

    @field_validator("type")
    @classmethod
    def _known_type(cls, value: str) -> str:
        if value not in EMITS_TYPES:
            raise PydanticCustomError(
                "invalid_emits_type",
                "emits type '{token}' is not a type token; use one of {choices}",
                {"token": value, "choices": ", ".join(EMITS_TYPES)},
            )
        return value


class Consumes(BaseModel):
    """What a cell reads: body slots, context keys, hop keys, and facts about its place."""

    model_config = _OPEN

    body: dict[str, ConsumeSpec] = Field(default_factory=dict)
    context: dict[str, ConsumeSpec] = Field(default_factory=dict)
    hop: dict[str, ConsumeSpec] = Field(default_factory=dict)
    topology: dict[str, ConsumeSpec] = Field(default_factory=dict)


class Emits(BaseModel):
    """What a cell writes: body slots and hop keys."""

    model_config = _OPEN

    body: dict[str, EmitSpec] = Field(default_factory=dict)
    hop: dict[str, EmitSpec] = Field(default_factory=dict)


class Ingress(BaseModel):
    """The cell is an entry point that mints these context keys."""

    model_config = _OPEN

    context: list[str] = Field(default_factory=list)

    @field_validator("context")
    @classmethod
    def _standard_keys_only(cls, value: list[str]) -> list[str]:
        extra = sorted(set(value) - set(INGRESS_CONTEXT_KEYS))
        if extra:
            raise PydanticCustomError(
                "invalid_ingress_key",
                "ingress may only mint {allowed}; {extra} must reach context through an "
                "edge's set_context instead",
                {"allowed": ", ".join(INGRESS_CONTEXT_KEYS), "extra": ", ".join(extra)},
            )
        return value


class Contract(BaseModel):
    """A cell's ``contract``. ``version``, ``settings`` and ``consumes`` are required for
    every non-hive cell; the loader checks that, since a hive's contract is ignored."""

    model_config = _OPEN

    version: str | None = None
    settings: dict[str, SettingSpec] | None = None
    consumes: Consumes | None = None
    emits: Emits = Field(default_factory=Emits)
    multi_send_capable: bool = False
    """A ``code`` cell may print an array of more than one emission."""
    ingress: Ingress = Field(default_factory=Ingress)
    write_surface: Literal["open", "internal"] = "open"
    transfer: Literal["all", "none"] = "all"


class Modifier(BaseModel):
    """What an edge does to the headers of the message it takes."""

    model_config = _CLOSED

    set_context: dict[str, str] = Field(default_factory=dict)
    """key → CEL expression, evaluated against the incoming headers."""
    delete_context: list[str] = Field(default_factory=list)
    set_hop: dict[str, str] = Field(default_factory=dict)
    delete_hop: list[str] = Field(default_factory=list)
    restore_ttl: bool = False
    """Reset the TTL to ``message_default_ttl`` (never lower it); needs a ``condition``."""


class EdgeSpec(BaseModel):
    """One edge of a hive's graph; endpoints resolve against the hive's own path."""

    model_config = _CLOSED

    from_: str = Field(alias="from")
    to: str
    condition: str | None = None
    """CEL over ``context`` and ``hop``; absent = always."""
    modifier: Modifier | None = None


class Graph(BaseModel):
    model_config = _CLOSED

    edges: list[EdgeSpec] = Field(default_factory=list)


class Lane(BaseModel):
    """A lane a hive accepts or emits (mutation-time check only)."""

    model_config = _CLOSED

    route: str
    context: list[str] = Field(default_factory=list)
    because: str


class HiveContract(BaseModel):
    model_config = _CLOSED

    accepts: list[Lane] = Field(default_factory=list)
    emits: list[Lane] = Field(default_factory=list)


class RequiredDrain(BaseModel):
    """Either a port drain (``port``, ``hop``, ``because``) or a lane drain (``accepts``,
    ``emits``, ``because``)."""

    model_config = _CLOSED

    port: str | None = None
    hop: dict[str, str] | None = None
    accepts: str | None = None
    emits: str | None = None
    because: str

    @model_validator(mode="after")
    def _one_form(self) -> RequiredDrain:
        port_form = self.port is not None and self.hop is not None
        lane_form = self.accepts is not None and self.emits is not None
        mixed = (self.port is not None or self.hop is not None) and (
            self.accepts is not None or self.emits is not None
        )
        if mixed or not (port_form or lane_form):
            raise PydanticCustomError(
                "invalid_drain",
                "a required drain is either {{port, hop, because}} or {{accepts, emits, because}}",
            )
        return self


class HiveParams(BaseModel):
    """A hive's ``params``: only these four keys exist."""

    model_config = _CLOSED

    graph: Graph = Field(default_factory=Graph)
    ports: list[str] | None = None
    required_drains: list[RequiredDrain] | None = None
    contract: HiveContract | None = None


class CellConfig(BaseModel):
    """A non-hive cell's ``config.json``. Extra top-level keys (``description``…) are kept."""

    model_config = _OPEN

    cell: CellBlock
    params: Any = None
    """Handed to the cell unchanged (after ``${VAR}`` substitution)."""
    contract: Contract = Field(default_factory=Contract)


class HiveConfig(BaseModel):
    """A hive's ``config.json``. A top-level ``contract`` is ignored, as in meclaw."""

    model_config = _OPEN

    cell: CellBlock
    params: HiveParams = Field(default_factory=HiveParams)

    @field_validator("params", mode="before")
    @classmethod
    def _null_params_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value
