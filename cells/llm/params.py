"""``params`` of an ``llm`` cell.

Unknown keys do not stop a boot (meclaw accepts them silently); ``--validate`` warns about each,
naming the closest known key, because a misspelt ``max_token`` silently keeps the default.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from cells import runtime_params
from colony.cell import ParamProblem, ignored_key

DEFAULT_BASE_URLS = {
    "openai": "https://api.openai.com/v1",
    "openai-responses": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com/v1",
    "gemini": "https://generativelanguage.googleapis.com/v1beta",
    "ollama": "http://127.0.0.1:11434",
}
"""Where each provider is reached when ``base_url`` is not set."""

Provider = Literal["openai", "openai-responses", "anthropic", "gemini", "ollama"]


class RedisParams(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    url: str = "redis://127.0.0.1:6379/0"


PG_DSN_VARIABLE = "LLM_TRANSCRIPT_PG_DSN"
"""The daemon's environment variable a ``postgres`` transcript store falls back to."""


class PostgresParams(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    dsn: str = ""
    """A libpq connection string or URL, usually ``"${COLONY_PG_DSN}"``; empty: see
    :func:`transcript_dsn`."""


class TranscriptParams(BaseModel):
    """Where loop turns keep their conversations."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    store: Literal["memory", "sqlite", "redis", "postgres"] = "memory"
    """``memory``: one process; ``sqlite``: the cell's cell.db (survives restarts);
    ``redis`` and ``postgres``: any number of replicas."""
    redis: RedisParams = Field(default_factory=RedisParams)
    postgres: PostgresParams = Field(default_factory=PostgresParams)


def transcript_dsn(
    params: TranscriptParams,
    cluster_dsn: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> str | None:
    """The DSN of a ``postgres`` transcript store: ``postgres.dsn`` when set, else the colony
    cluster's DSN (when the colony has one), else :data:`PG_DSN_VARIABLE` from the daemon's
    environment (not the ``.env`` file: write ``"dsn": "${VAR}"`` for that). None: no DSN."""
    env = os.environ if environ is None else environ
    return params.postgres.dsn or cluster_dsn or env.get(PG_DSN_VARIABLE) or None


class LlmParams(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, frozen=True)

    provider: Provider = "openai"
    """The wire: ``openai`` = chat completions on any OpenAI-compatible ``base_url``."""
    model: str
    api_key: str = ""
    """Empty: no Authorization header (local servers)."""
    base_url: str | None = None
    """The provider's API root (see :data:`DEFAULT_BASE_URLS`); each wire appends its path."""
    temperature: float | int = 0.7
    max_tokens: Annotated[int, Field(ge=1)] = 4096
    system_order: list[str] = Field(default_factory=list)
    """Top-level system slots first in the prompt, in this order; the rest alphabetically."""
    provider_extra: dict[str, Any] = Field(default_factory=dict)
    """Merged into the request body last, so it wins."""
    external_timeout_ms: Annotated[int, Field(ge=1)] = 110_000
    """Timeout of one HTTP attempt."""
    max_retries: Annotated[int, Field(ge=0, le=10)] = 2
    """Retries of a 429 or 5xx answer (or a dropped connection), with capped backoff."""
    attachment_timeout_ms: Annotated[int, Field(ge=1)] = 5000
    system_max_slots: Annotated[int, Field(ge=1)] = 256
    system_max_leaf_bytes: Annotated[int, Field(ge=1)] = 65_536
    system_writable: list[str] = Field(default_factory=list)
    """If not empty, system writes are limited to these path prefixes."""
    http_referer: str | None = None
    x_title: str | None = None
    reasoning_effort: str | None = None
    reasoning: dict[str, Any] | None = None
    auth: Literal["api_key"] = "api_key"
    auth_ref: str | None = None
    wire_dialect: Literal["chat_completions"] = "chat_completions"
    transcript: TranscriptParams = Field(default_factory=TranscriptParams)
    """The transcript store of loop turns (a message with a ``loop`` slot)."""

    @property
    def timeout(self) -> float:
        return self.external_timeout_ms / 1000

    @property
    def root(self) -> str:
        return self.base_url or DEFAULT_BASE_URLS[self.provider]


KNOWN = tuple(name for name in LlmParams.model_fields)

MUTABLE = frozenset(
    {
        "model",
        "temperature",
        "max_tokens",
        "system_order",
        "provider_extra",
        "external_timeout_ms",
        "max_retries",
        "http_referer",
        "x_title",
        "reasoning_effort",
        "reasoning",
    }
)
"""Keys a ``params`` body slot may change at runtime; the others are fixed at boot."""


def unknown_keys(params: LlmParams, folder: Path | None) -> list[ParamProblem]:
    return [ignored_key(key, KNOWN) for key in params.model_extra or {}]


def transcript_problems(params: LlmParams, cluster_dsn: str | None = None) -> list[ParamProblem]:
    """A ``postgres`` store with no DSN anywhere: refused before anything starts, not at the
    first loop turn (which would answer 503 until the daemon is restarted with one)."""
    transcript = params.transcript
    if transcript.store != "postgres" or transcript_dsn(transcript, cluster_dsn) is not None:
        return []
    return [
        ParamProblem(
            ("transcript", "postgres", "dsn"),
            "transcript_dsn_missing",
            "the postgres transcript store has no DSN: params.transcript.postgres.dsn is not "
            f"set and {PG_DSN_VARIABLE} is not in the environment",
            'set "transcript": {"store": "postgres", "postgres": {"dsn": "${COLONY_PG_DSN}"}} '
            f"(any variable), or export {PG_DSN_VARIABLE} for the daemon.",
        )
    ]


def overlay(params: LlmParams, update: dict[str, Any]) -> LlmParams:
    """``params`` with a runtime update applied (raises ValueError naming a refused key)."""
    problem = runtime_params.key_problem(update, mutable=sorted(MUTABLE))
    if problem is not None:
        raise ValueError(problem)
    merged = {**params.model_dump(), **(params.model_extra or {}), **update}
    return LlmParams.model_validate(merged)


def backstop_floor_ms(params: Any) -> int | None:
    """The longest one message can legitimately take (every attempt timing out, every backoff
    waited), so the colony's ``message_timeout`` backstop never cuts a call the cell would
    itself have ended with a typed ``timeout``."""
    try:
        parsed = LlmParams.model_validate(params)
    except ValueError:
        return None
    attempts = parsed.max_retries + 1
    return attempts * parsed.external_timeout_ms + int(BACKOFF_CAP_S * 1000) * attempts + 5_000


BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 8.0
