"""A harness colony's HTTP API served on 127.0.0.1 for one test, with a client bound to it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
from aiohttp import web

from cells.llm.chat_endpoint import ChatRoute
from cells.metrics import describe_cells
from colony.api import build_app, serve
from colony.httpguard import ServerLimits
from colony.testing import ColonyHarness


@dataclass
class Api:
    colony: ColonyHarness
    client: httpx.AsyncClient
    port: int
    app: web.Application

    async def nothing_entered(self) -> None:
        """Nothing reached the message log or the dead letters (a refused ingress)."""
        await self.colony.settle()
        assert await self.colony.message_log() == []
        assert await self.colony.dead_letters() == []


@asynccontextmanager
async def served(
    colony: ColonyHarness, *, limits: ServerLimits | None = None, client_timeout: float = 5.0
) -> AsyncIterator[Api]:
    """The API of ``colony`` (with ``POST /llm/chat`` mounted, as the daemon mounts it)."""
    chat = ChatRoute()
    describe_cells(colony.colony)  # as the daemon does
    app = build_app(colony.colony, extra_routes={("POST", "/llm/chat"): chat}, limits=limits)
    runner = await serve(app, "127.0.0.1", 0)
    try:
        port = runner.addresses[0][1]
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", trust_env=False, timeout=client_timeout
        ) as client:
            yield Api(colony, client, port, app)
    finally:
        await runner.cleanup()
        await chat.close()
