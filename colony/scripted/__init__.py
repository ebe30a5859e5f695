"""Scripted LLM provider servers: real HTTP on 127.0.0.1 answering from a script.

One module per wire shape; :mod:`colony.scripted.core` holds the shared server and the OpenAI
chat-completions one.
"""

from colony.scripted.core import (
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

__all__ = [
    "Delay",
    "Raw",
    "ScriptItem",
    "ScriptedOpenAI",
    "ScriptedServer",
    "Status",
    "empty_reply",
    "error_status",
    "in_body_error",
    "text_reply",
    "tool_calls_reply",
]
