"""The wire shapes an llm cell speaks, by ``params.provider``."""

from __future__ import annotations

from cells.llm.dialects.base import Dialect
from cells.llm.dialects.openai_chat import OpenAIChat

DIALECTS: dict[str, Dialect] = {"openai": OpenAIChat()}


def dialect_for(provider: str) -> Dialect:
    return DIALECTS[provider]
