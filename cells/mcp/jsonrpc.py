"""meclaw's ``http`` transport: one plain JSON-RPC POST per request, no session.

Written by hand rather than with the SDK's Streamable HTTP client so that a server built for
meclaw sees exactly what meclaw's cell sends: ``Content-Type: application/json``,
``Accept: */*``, ``Authorization: Bearer …`` only when a bearer is set, a JSON-RPC 2.0 body
with a fresh UUIDv7 ``id``; ``initialize`` (protocol ``2024-11-05``) and ``tools/list`` once
at start, then one ``tools/call`` per call. The answer must be ``application/json``; no
``notifications/initialized``, no ``Mcp-Session-Id``. A Streamable HTTP server in its
stateless JSON-response mode answers this form too.
"""

from __future__ import annotations

from typing import Any

import httpx

from colony.envelope import JsonObject
from colony.ids import uuid7

__all__ = ["PROTOCOL_VERSION", "JsonRpcClient", "RpcError"]

PROTOCOL_VERSION = "2024-11-05"
CLIENT_INFO = {"name": "meclaw-mcp-cell", "version": "0.1.0"}


class RpcError(Exception):
    """The request failed: the server's JSON-RPC error, a bad status, or no usable answer."""


class JsonRpcClient:
    def __init__(self, endpoint: str, bearer: str | None) -> None:
        self.endpoint = endpoint
        headers = {"Accept": "*/*"}
        if bearer:
            headers["Authorization"] = f"Bearer {bearer}"
        self._client = httpx.AsyncClient(headers=headers, timeout=None, follow_redirects=False)

    async def request(self, method: str, params: JsonObject) -> Any:
        """The ``result`` of one request (the caller bounds the time)."""
        body = {"jsonrpc": "2.0", "id": uuid7(), "method": method, "params": params}
        try:
            response = await self._client.post(self.endpoint, json=body)
        except httpx.HTTPError as exc:
            raise RpcError(f"send: {type(exc).__name__}: {exc}") from None
        if not response.is_success:
            raise RpcError(f"status: {response.status_code} {response.reason_phrase}")
        try:
            answer = response.json()
        except ValueError as exc:
            kind = response.headers.get("content-type", "no content type")
            raise RpcError(f"json: the answer is not JSON ({kind}): {exc}") from None
        if not isinstance(answer, dict):
            raise RpcError("json: the answer is not a JSON-RPC object")
        error = answer.get("error")
        if isinstance(error, dict):
            raise RpcError(f"rpc {error.get('code')}: {error.get('message')}")
        if "result" not in answer:
            raise RpcError("missing result and error")
        return answer["result"]

    async def initialize(self) -> None:
        await self.request(
            "initialize",
            {"protocolVersion": PROTOCOL_VERSION, "capabilities": {}, "clientInfo": CLIENT_INFO},
        )

    async def list_tools(self) -> list[JsonObject]:
        result = await self.request("tools/list", {})
        tools = result.get("tools") if isinstance(result, dict) else None
        if not isinstance(tools, list) or not all(
            isinstance(t, dict) and isinstance(t.get("name"), str) for t in tools
        ):
            raise RpcError("tools/list: missing tools array, or a tool without a name")
        return tools

    async def call_tool(self, name: str, arguments: JsonObject) -> JsonObject:
        result = await self.request("tools/call", {"name": name, "arguments": arguments})
        if not isinstance(result, dict):
            raise RpcError("tools/call: the result is not an object")
        return result

    async def close(self) -> None:
        await self._client.aclose()
