"""What the ``mcp`` cell reads and writes on the colony's side: the call it is sent, the
``tool_result`` it answers with, and the ``system.tools`` listing an llm cell takes in.

Everything here is pure; the transports (:mod:`cells.mcp.links`) hand results over in the MCP
wire form (``{"content": [...], "structuredContent": ..., "isError": ...}``), whichever of them
talked to the server.
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple
from urllib.parse import urlsplit, urlunsplit

from cells.procgroup import signal_name
from cells.text import dumps_sorted
from cells.toolcall import ToolCallError, parse_tool_call, result_turn
from colony.envelope import JsonObject
from colony.jsonwire import JsonRefused, loads

__all__ = [
    "LIST_TOOLS",
    "Listing",
    "McpCall",
    "describe_exit",
    "listing",
    "parse_call",
    "provider_key",
    "redacted",
    "reply",
    "result_text",
    "shown_url",
]

LIST_TOOLS = "__list_tools__"
"""meclaw's reserved tool name: answered from the discovery cache with the listing."""
UNKNOWN_TOOL = "<unknown>"
"""``mcp_tool`` of a reply to a call whose tool name could not be read (meclaw's word)."""


class McpCall(NamedTuple):
    name: str
    arguments: JsonObject
    id: str | None


def parse_call(body: Any, fixed_tool: str | None) -> McpCall:
    """The call in ``body`` (the tool cells' convention): its text is ``{"name": X,
    "arguments": {...}}`` (arguments also as a JSON string, as an llm cell writes them), or,
    with a ``fixed_tool``, the arguments object itself. Raises :class:`ToolCallError`."""
    args, call_id = parse_tool_call(body)
    if fixed_tool is not None:
        return McpCall(fixed_tool, args, call_id)
    name = args.get("name")
    if not isinstance(name, str) or not name:
        raise ToolCallError(
            "invalid_input",
            'tool_call.text needs "name" (the MCP tool to call) as a non-empty string',
            call_id=call_id,
        )
    raw = args.get("arguments", {})
    if isinstance(raw, str):
        try:
            raw = loads(raw) if raw.strip() else {}
        except JsonRefused as exc:
            raise ToolCallError(
                "invalid_input",
                f"tool_call arguments are not valid JSON: {exc.problem}",
                call_id=call_id,
            ) from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ToolCallError(
            "invalid_input", "tool_call arguments must be a JSON object", call_id=call_id
        )
    return McpCall(name, raw, call_id)


def result_text(result: JsonObject) -> str:
    """A tool result as one text: its ``structuredContent`` as JSON when present, else its
    text contents joined by newlines (any other content described as JSON)."""
    structured = result.get("structuredContent")
    if structured is not None:
        return dumps_sorted(structured)
    parts: list[str] = []
    for item in result.get("content") or []:
        if isinstance(item, dict) and item.get("type") == "text" and "text" in item:
            parts.append(str(item["text"]))
        else:
            parts.append(dumps_sorted(item))
    return "\n".join(parts)


def reply(
    tool: str,
    duration_ms: int,
    text: str,
    call_id: str | None,
    error_code: str | None = None,
) -> JsonObject:
    """The one ``tool_result`` reply: header ``mcp_tool``, ``duration_ms`` and on failure
    ``error_code``, never ``finish_reason`` (meclaw's mcp cell writes none)."""
    header: JsonObject = {"mcp_tool": tool, "duration_ms": duration_ms}
    if error_code is not None:
        header["error_code"] = error_code
    return {"header": header, "messages": [result_turn(text, call_id)]}


def provider_key(path: str) -> str:
    """The ``system.tools`` slot of a cell's tools: its path, slashes as underscores."""
    return path.strip("/").replace("/", "_") or "mcp"


TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
"""The tool names model providers take (OpenAI's and Anthropic's function name rule)."""
OFFER_MAX_TOOLS = 128
"""Tools offered at most: an llm cell refuses a whole write past its ``system_max_slots``
(256 by default, shared with its other slots)."""
OFFER_MAX_LEAF_BYTES = 65_536
"""An offered tool's leaf at most, measured as the llm cell measures it (its
``system_max_leaf_bytes`` default)."""
EMPTY_SCHEMA: JsonObject = {"type": "object", "properties": {}}


class Listing(NamedTuple):
    message: JsonObject
    skipped: dict[str, str]
    """Tool name → why it is not offered (it stays callable by name)."""


def listing(path: str, tools: list[JsonObject], duration_ms: int) -> Listing:
    """The ``system`` write that offers ``tools`` to an llm cell: one leaf per tool under
    ``system.tools.<provider_key>``, replacing what this server offered before. A leaf's text
    is the OpenAI function object the llm cell puts into its request; its slot is the tool's
    name.

    Only what an llm cell and its provider take is offered: a name matching
    :data:`TOOL_NAME`, once, in a leaf of at most :data:`OFFER_MAX_LEAF_BYTES`, at most
    :data:`OFFER_MAX_TOOLS` of them; an ``inputSchema`` that is no object schema is offered as
    one taking any object. What is left out is named in ``skipped``.

    This is the ``__list_tools__`` reply (meclaw's shape, with ``messages: []``); the offer
    the cell emits on its own leaves ``messages`` out, because an llm cell given an empty
    ``messages`` calls its model with no turns, and given no ``messages`` it only stores."""
    slots: JsonObject = {"$replace": True}
    skipped: dict[str, str] = {}
    offered = 0
    for tool in tools:
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            continue
        if not TOOL_NAME.fullmatch(name):
            skipped[name] = "name is not [a-zA-Z0-9_-]{1,64}"
            continue
        if name in slots:
            skipped[name] = "listed twice"
            continue
        if offered >= OFFER_MAX_TOOLS:
            skipped[name] = f"more than {OFFER_MAX_TOOLS} tools"
            continue
        schema = tool.get("inputSchema")
        if not isinstance(schema, dict) or schema.get("type", "object") != "object":
            schema = EMPTY_SCHEMA
        function: JsonObject = {"name": name, "parameters": schema or EMPTY_SCHEMA}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        leaf = {"text": dumps_sorted({"type": "function", "function": function})}
        size = len(json.dumps(leaf, separators=(",", ":"), ensure_ascii=False).encode())
        if size > OFFER_MAX_LEAF_BYTES:
            skipped[name] = f"its schema is {size} bytes (at most {OFFER_MAX_LEAF_BYTES})"
            continue
        slots[name] = leaf
        offered += 1
    message = {
        "header": {"mcp_tool": LIST_TOOLS, "duration_ms": duration_ms},
        "system": {"tools": {provider_key(path): slots}},
        "messages": [],
    }
    return Listing(message, skipped)


def shown_url(url: str) -> str:
    """``url`` as logs and ``/health`` show it: without user info, query or fragment, where
    credentials may sit."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        return "<the endpoint>"
    if ":" in host:
        host = f"[{host}]"
    return urlunsplit((parts.scheme, host + port, parts.path, "", ""))


def redacted(text: str, url: str) -> str:
    """``text`` with ``url`` written as :func:`shown_url` shows it."""
    return text.replace(url, shown_url(url))


def describe_exit(returncode: int | None, pid: int) -> str:
    """How a server process ended, for the caller and the log."""
    if returncode is None:
        return f"the MCP server (pid {pid}) closed its output but is still running"
    if returncode < 0:
        name = signal_name(-returncode)
        return f"the MCP server (pid {pid}) was killed by signal {-returncode} ({name})"
    return f"the MCP server (pid {pid}) exited with code {returncode}"
