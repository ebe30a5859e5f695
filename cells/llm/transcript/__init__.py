"""Transcript stores for loop turns: one record per conversation, written by compare-and-set.

Four stores behind :class:`TranscriptStore`: ``memory`` (one process), ``sqlite`` (the cell's
``cell.db``; survives restarts, one host), ``redis`` (any number of replicas; one hash under
``transcript:{conversation}`` and a single-key Lua compare-and-set), ``postgres`` (any number of
replicas; one row of ``llm_transcript``, locked for the compare-and-set). The last two import
their driver on first use: each is an optional extra.
"""

from cells.llm.transcript.base import (
    Record,
    StoreUnavailableError,
    TranscriptStore,
    WriteOutcome,
)
from cells.llm.transcript.memory import MemoryStore
from cells.llm.transcript.sqlite import SqliteStore

__all__ = [
    "MemoryStore",
    "Record",
    "SqliteStore",
    "StoreUnavailableError",
    "TranscriptStore",
    "WriteOutcome",
]
