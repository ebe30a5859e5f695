"""``GET /health`` tells the truth about the Telegram poller: a refused token degrades the
colony with the reason at the first refused poll, and a poll that works again clears it."""

from __future__ import annotations

from typing import Any

from tests.api_client import Api, served
from tests.cells.proxy.test_proxy import CHAT, USER, running
from tests.conftest import TreeFactory
from tests.processes import eventually


async def _health(api: Api) -> tuple[int, dict[str, Any]]:
    answer = await api.client.get("/health")
    doc: dict[str, Any] = answer.json()
    return answer.status_code, doc


async def test_a_wrong_telegram_token_turns_health_degraded_at_the_first_refused_poll(
    make_tree: TreeFactory,
) -> None:
    async with (
        running(make_tree, token="424242:a-wrong-token") as bot,
        served(bot.colony) as api,
    ):
        assert await eventually(lambda: bool(bot.cells and bot.cells[0].backoffs), within=10)
        status, doc = await _health(api)
        assert (status, doc["status"]) == (200, "degraded")
        [reason] = doc["reasons"]
        assert reason.startswith("/proxy telegram_poll: ")
        assert "Telegram refuses the bot token" in reason
        [poller] = doc["io_liveness"]
        assert (poller["path"], poller["task"], poller["state"]) == (
            "/proxy",
            "telegram_poll",
            "failing",
        )
        assert poller["last_error_kind"] == "auth"
        assert poller["last_success_secs"] is None
        assert "a-wrong-token" not in str(doc)  # the token is scrubbed from the reason
        ready = await api.client.get("/ready")  # degraded still takes traffic
        assert (ready.status_code, ready.json()["ready"]) == (200, True)


async def test_health_is_ok_again_once_telegram_takes_the_token(make_tree: TreeFactory) -> None:
    async with running(make_tree) as bot, served(bot.colony) as api:
        bot.telegram.auth_fail(1)
        bot.telegram.push_text(CHAT, "after the outage", user_id=USER)
        await bot.telegram.wait_sent(1)
        status, doc = await _health(api)
        assert (status, doc["status"], doc["reasons"]) == (200, "ok", [])
        [poller] = doc["io_liveness"]
        assert poller["state"] == "ok"
        assert isinstance(poller["last_success_secs"], int)
        assert poller["last_error_kind"] == "auth"  # what happened last is kept
        assert poller["failures"] == 0
