"""Scripted LLM provider servers: real HTTP on 127.0.0.1 answering from a script.

One module per wire shape; :mod:`scripted.core` holds the shared server and the OpenAI
chat-completions one. Each server refuses, like the real API, a request that breaks its
tool-call sequencing rules, without consuming a script item.

Test fakes, not kernel code: a package of its own that imports nothing from ``colony``;
:mod:`colony.testing` re-exports every name.
"""

from scripted.anthropic import (
    ScriptedAnthropic,
    anthropic_empty,
    anthropic_error,
    anthropic_in_body_error,
    anthropic_max_tokens,
    anthropic_refusal,
    anthropic_text,
    anthropic_tool_use,
)
from scripted.core import (
    Delay,
    Raw,
    ScriptedOpenAI,
    ScriptedServer,
    ScriptItem,
    Status,
    empty_reply,
    error_status,
    in_body_error,
    text_reply,
    tool_calls_reply,
)
from scripted.gemini import (
    ScriptedGemini,
    gemini_blocked,
    gemini_calls,
    gemini_empty,
    gemini_max_tokens,
    gemini_safety,
    gemini_text,
)
from scripted.ollama import (
    ScriptedOllama,
    ollama_calls,
    ollama_empty,
    ollama_error,
    ollama_length,
    ollama_text,
)
from scripted.responses import (
    ScriptedResponses,
    responses_calls,
    responses_empty,
    responses_failed,
    responses_incomplete,
    responses_refusal,
    responses_text,
)
from scripted.search import ScriptedSearch
from scripted.telegram import (
    TELEGRAM_MAX_MESSAGE,
    ScriptedTelegram,
    telegram_error,
    telegram_update,
)

__all__ = [
    "TELEGRAM_MAX_MESSAGE",
    "Delay",
    "Raw",
    "ScriptItem",
    "ScriptedAnthropic",
    "ScriptedGemini",
    "ScriptedOllama",
    "ScriptedOpenAI",
    "ScriptedResponses",
    "ScriptedSearch",
    "ScriptedServer",
    "ScriptedTelegram",
    "Status",
    "anthropic_empty",
    "anthropic_error",
    "anthropic_in_body_error",
    "anthropic_max_tokens",
    "anthropic_refusal",
    "anthropic_text",
    "anthropic_tool_use",
    "empty_reply",
    "error_status",
    "gemini_blocked",
    "gemini_calls",
    "gemini_empty",
    "gemini_max_tokens",
    "gemini_safety",
    "gemini_text",
    "in_body_error",
    "ollama_calls",
    "ollama_empty",
    "ollama_error",
    "ollama_length",
    "ollama_text",
    "responses_calls",
    "responses_empty",
    "responses_failed",
    "responses_incomplete",
    "responses_refusal",
    "responses_text",
    "telegram_error",
    "telegram_update",
    "text_reply",
    "tool_calls_reply",
]
