"""The wire shapes an llm cell speaks, by ``params.provider``."""

from __future__ import annotations

from cells.llm.dialects.anthropic import AnthropicMessages
from cells.llm.dialects.base import Dialect
from cells.llm.dialects.gemini import GeminiGenerate
from cells.llm.dialects.ollama import OllamaChat
from cells.llm.dialects.openai_chat import OpenAIChat
from cells.llm.dialects.openai_responses import OpenAIResponses

DIALECTS: dict[str, Dialect] = {
    "openai": OpenAIChat(),
    "openai-responses": OpenAIResponses(),
    "anthropic": AnthropicMessages(),
    "gemini": GeminiGenerate(),
    "ollama": OllamaChat(),
}


def dialect_for(provider: str) -> Dialect:
    return DIALECTS[provider]
