"""Issue 10 item 6: the HTTP API refuses a non-loopback bind without a token and compares
tokens in constant time."""

from __future__ import annotations

import hmac
from typing import Any

import httpx
import pytest
import typer

from colony.api import build_app, serve
from colony.cli import _api_address
from colony.testing import ColonyHarness
from tests.conftest import TreeFactory, hive


@pytest.mark.parametrize("address", ["0.0.0.0:7799", "10.0.0.1:7799", "[::]:7799"])
def test_a_non_loopback_bind_without_a_token_is_refused(address: str) -> None:
    with pytest.raises(typer.Exit):
        _api_address(address, None)


def test_a_non_loopback_bind_with_a_token_is_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SECURITY_TEST_API_TOKEN", "t0ken")
    assert _api_address("0.0.0.0:7799", "SECURITY_TEST_API_TOKEN") == (("0.0.0.0", 7799), "t0ken")
    assert _api_address("127.0.0.1:7799", None) == (("127.0.0.1", 7799), None)


async def test_tokens_are_compared_in_constant_time_and_near_misses_are_401(
    make_tree: TreeFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    compared: list[tuple[Any, Any]] = []
    original = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        compared.append((a, b))
        return original(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)  # what colony.api calls
    async with ColonyHarness(make_tree({"main/config.json": hive()})) as colony:
        runner = await serve(build_app(colony.colony, token="s3cret-token"), "127.0.0.1", 0)
        port = runner.addresses[0][1]
        try:
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{port}", trust_env=False
            ) as client:
                for sent in [
                    "",
                    "Bearer",
                    "Bearer s3cret",  # a prefix
                    "Bearer s3cret-token-and-more",
                    "Bearer S3CRET-TOKEN",
                    "s3cret-token",
                    "Basic s3cret-token",
                    "Bearer s3cret-toke",
                ]:
                    headers = {"Authorization": sent} if sent else {}
                    denied = await client.get("/colony/registry", headers=headers)
                    assert (denied.status_code, denied.json()["error"]) == (401, "unauthorized")
                    assert "s3cret" not in denied.text
                ok = await client.get(
                    "/colony/registry", headers={"Authorization": "Bearer s3cret-token"}
                )
                assert ok.status_code == 200
        finally:
            await runner.cleanup()
    assert len(compared) == 9
    assert all(isinstance(a, bytes) and isinstance(b, bytes) for a, b in compared)
