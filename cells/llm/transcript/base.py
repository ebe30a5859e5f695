"""The transcript record and the store interface every backend implements."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, Protocol


class WriteOutcome(StrEnum):
    WRITTEN = "written"
    STALE = "stale"
    """The stored turn is not the expected one (a stale turn or a lost race): 409."""
    GONE = "gone"
    """Expected an existing record and found none (expired or deleted): 404."""


class StoreUnavailableError(Exception):
    """The store cannot be reached (503); the message names the store."""


@dataclass(slots=True)
class Record:
    """One conversation: everything needed to replay it to its provider."""

    v: int = 1
    provider: str = ""
    model: str = ""
    """Pinned at turn 1: a later turn asking for another model is refused."""
    turn: int = 0
    """Model turns recorded so far; the compare-and-set field."""
    state: str = "open"
    """``open`` | ``done`` | ``refusal`` | ``cap`` (anything but open has ended)."""
    pending: list[str] = field(default_factory=list)
    """The call ids the next turn must answer, in call order."""
    system: str = ""
    """The system prompt pinned at turn 1."""
    tools_digest: str = ""
    """A digest of the tools pinned at turn 1."""
    turns: list[Any] = field(default_factory=list)
    """The conversation as UBF turns (user turn, each model turn, each round of results)."""
    native: dict[str, Any] = field(default_factory=dict)
    """Provider blocks UBF cannot hold, keyed by the call ids of their turn (joined by ',')."""
    created: int = 0
    updated: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> Record:
        data = json.loads(text)
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


class TranscriptStore(Protocol):
    name: str

    async def read(self, conversation: str) -> Record | None:
        """The record, or None when it does not exist or has expired. Reads never extend
        the expiry."""
        ...

    async def write(
        self, conversation: str, expected_turn: int, record: Record | None, expire_s: int
    ) -> WriteOutcome:
        """Replace the record only if its stored turn is ``expected_turn`` (0: it must not
        exist); ``record=None`` or ``expire_s == 0`` deletes it. Every write sets the expiry."""
        ...

    async def close(self) -> None: ...
