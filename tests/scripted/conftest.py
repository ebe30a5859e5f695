"""Fixtures every scripted-server test shares: one HTTP client, and silence from asyncio."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest


@pytest.fixture(autouse=True)
def no_asyncio_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Dropped clients and shutdown must be silent: asyncio logs handler failures, not warns."""
    yield
    noisy = [
        r.getMessage()
        for r in caplog.records
        if r.name == "asyncio" and r.levelno >= logging.WARNING
    ]
    assert noisy == []


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    """A real HTTP client; 10 s outlasts the longest poll a test holds open on purpose."""
    async with httpx.AsyncClient(timeout=10.0) as c:
        yield c
