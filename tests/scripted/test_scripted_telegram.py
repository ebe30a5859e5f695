"""The scripted Telegram Bot API, spoken to over real HTTP (httpx and python-telegram-bot)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from telegram import Bot
from telegram.error import BadRequest, InvalidToken, RetryAfter
from telegram.request import HTTPXRequest

from scripted.telegram import ScriptedTelegram, telegram_error

TOKEN = "123456:scripted-test-token"


@pytest.fixture
async def telegram() -> AsyncIterator[ScriptedTelegram]:
    async with ScriptedTelegram(token=TOKEN) as server:
        yield server


def api(server: ScriptedTelegram, method: str, token: str = TOKEN) -> str:
    return f"{server.url}/bot{token}/{method}"


async def call(
    client: httpx.AsyncClient, server: ScriptedTelegram, method: str, **params: Any
) -> tuple[int, Any]:
    response = await client.post(api(server, method), json=params)
    return response.status_code, response.json()


async def test_get_updates_serves_the_queue_from_the_offset_and_forgets_confirmed_ones(
    telegram: ScriptedTelegram, client: httpx.AsyncClient
) -> None:
    first = telegram.push_text(42, "one", user_id=7)
    second = telegram.push_text(42, "two", user_id=7)
    assert second == first + 1

    status, body = await call(client, telegram, "getUpdates")
    assert status == 200
    assert body["ok"] is True
    assert [u["message"]["text"] for u in body["result"]] == ["one", "two"]
    message = body["result"][0]["message"]
    assert message["chat"] == {"id": 42, "type": "private"}
    assert message["from"]["id"] == 7

    _, body = await call(client, telegram, "getUpdates", offset=second)
    assert [u["update_id"] for u in body["result"]] == [second]
    assert [u["update_id"] for u in telegram.pending] == [second]  # the first is confirmed

    _, body = await call(client, telegram, "getUpdates", offset=second + 1)
    assert body["result"] == []
    assert telegram.pending == []
    assert [p["offset"] for p in telegram.polls] == [None, second, second + 1]


async def test_a_long_poll_answers_as_soon_as_an_update_is_queued(
    telegram: ScriptedTelegram, client: httpx.AsyncClient
) -> None:
    asyncio.get_running_loop().call_later(0.2, telegram.push_text, 5, "late")
    started = time.monotonic()
    status, body = await call(client, telegram, "getUpdates", timeout=10)
    assert status == 200
    assert [u["message"]["text"] for u in body["result"]] == ["late"]
    assert time.monotonic() - started < 2


async def test_a_long_poll_without_updates_ends_after_its_timeout_with_an_empty_list(
    telegram: ScriptedTelegram, client: httpx.AsyncClient
) -> None:
    started = time.monotonic()
    status, body = await call(client, telegram, "getUpdates", timeout=1)
    elapsed = time.monotonic() - started
    assert (status, body) == (200, {"ok": True, "result": []})
    assert 0.9 < elapsed < 3


async def test_a_second_poll_ends_the_held_one_with_409_conflict(
    telegram: ScriptedTelegram, client: httpx.AsyncClient
) -> None:
    held = asyncio.create_task(call(client, telegram, "getUpdates", timeout=10))
    await telegram.wait_polls(1)
    status, _ = await call(client, telegram, "getUpdates", timeout=0)
    assert status == 200
    status, body = await held
    assert status == 409
    assert body["description"].startswith("Conflict: terminated by other getUpdates request")


async def test_a_client_leaving_a_held_poll_does_not_disturb_the_server(
    telegram: ScriptedTelegram,
) -> None:
    async with httpx.AsyncClient(timeout=httpx.Timeout(10, read=0.2)) as impatient:
        with pytest.raises(httpx.ReadTimeout):
            await impatient.post(api(telegram, "getUpdates"), json={"timeout": 5})
    async with httpx.AsyncClient(timeout=10) as client:
        telegram.push_text(1, "still here")
        _, body = await call(client, telegram, "getUpdates", timeout=5)
    assert [u["message"]["text"] for u in body["result"]] == ["still here"]


async def test_a_wrong_token_is_401_and_an_unknown_method_404_like_telegram(
    telegram: ScriptedTelegram, client: httpx.AsyncClient
) -> None:
    response = await client.post(api(telegram, "getUpdates", token="999:wrong"), json={})
    assert response.status_code == 401
    assert response.json() == {"ok": False, "error_code": 401, "description": "Unauthorized"}
    response = await client.post(api(telegram, "getChatHistory"), json={})
    assert response.status_code == 404
    assert response.json() == {"ok": False, "error_code": 404, "description": "Not Found"}
    response = await client.get(f"{telegram.url}/elsewhere")
    assert response.status_code == 404
    assert telegram.tokens_seen == ["999:wrong", TOKEN]


async def test_send_message_takes_json_form_and_query_parameters(
    telegram: ScriptedTelegram, client: httpx.AsyncClient
) -> None:
    telegram.push_text(42, "hi")
    telegram.push_text(-100123, "group hi")
    await client.post(api(telegram, "sendMessage"), json={"chat_id": 42, "text": "json"})
    await client.post(api(telegram, "sendMessage"), data={"chat_id": "42", "text": "form"})
    response = await client.get(
        api(telegram, "sendmessage"), params={"chat_id": "-100123", "text": "query"}
    )
    body = response.json()
    assert body["ok"] is True
    assert body["result"]["chat"] == {"id": -100123, "type": "group", "title": "group"}
    assert body["result"]["text"] == "query"
    assert telegram.sent == [
        {"chat_id": 42, "text": "json"},
        {"chat_id": 42, "text": "form"},
        {"chat_id": -100123, "text": "query"},
    ]


@pytest.mark.parametrize(
    ("params", "description"),
    [
        ({"text": "no chat"}, "Bad Request: chat_id is empty"),
        ({"chat_id": 42, "text": "  "}, "Bad Request: message text is empty"),
        ({"chat_id": 42, "text": "x" * 4097}, "Bad Request: message is too long"),
        ({"chat_id": 42, "text": "😀" * 2049}, "Bad Request: message is too long"),
        ({"chat_id": 77, "text": "stranger"}, "Bad Request: chat not found"),
    ],
)
async def test_send_message_refuses_what_telegram_refuses(
    telegram: ScriptedTelegram,
    client: httpx.AsyncClient,
    params: dict[str, Any],
    description: str,
) -> None:
    telegram.push_text(42, "hi")
    status, body = await call(client, telegram, "sendMessage", **params)
    assert status == 400
    assert body == telegram_error(400, description)
    assert telegram.sent == []


async def test_a_text_of_exactly_4096_characters_is_accepted(
    telegram: ScriptedTelegram, client: httpx.AsyncClient
) -> None:
    telegram.push_text(42, "hi")
    status, _ = await call(client, telegram, "sendMessage", chat_id=42, text="x" * 4096)
    assert status == 200


async def test_scripted_failures_are_served_in_order_then_the_api_answers_again(
    telegram: ScriptedTelegram, client: httpx.AsyncClient
) -> None:
    telegram.auth_fail(2)
    telegram.fail(429, method="sendMessage", retry_after=3)
    telegram.push_text(42, "hi")
    assert (await call(client, telegram, "getUpdates"))[0] == 401
    assert (await call(client, telegram, "sendMessage", chat_id=42, text="a"))[1] == {
        "ok": False,
        "error_code": 429,
        "description": "Too Many Requests",
        "parameters": {"retry_after": 3},
    }
    assert (await call(client, telegram, "getUpdates"))[0] == 401
    assert (await call(client, telegram, "getUpdates"))[0] == 200
    assert (await call(client, telegram, "sendMessage", chat_id=42, text="b"))[0] == 200
    assert [p["status"] for p in telegram.polls] == [401, 401, 200]
    assert telegram.sent == [{"chat_id": 42, "text": "b"}]


async def test_python_telegram_bot_talks_to_it_unchanged(
    telegram: ScriptedTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PTB_TIMEDELTA", "true")  # RetryAfter warns about int periods otherwise
    poll, send = HTTPXRequest(connection_pool_size=1), HTTPXRequest()
    bot = Bot(TOKEN, base_url=f"{telegram.url}/bot", request=send, get_updates_request=poll)
    try:
        update_id = telegram.push_text(42, "hello", user_id=7, message_id=99)
        [update] = await bot.get_updates(timeout=5)
        assert update.update_id == update_id
        assert update.message is not None
        assert (update.message.text, update.message.chat.id, update.message.message_id) == (
            "hello",
            42,
            99,
        )
        assert update.message.from_user is not None
        assert update.message.from_user.id == 7
        sent = await bot.send_message(chat_id=42, text="hi back")
        assert sent.text == "hi back"
        assert telegram.sent == [{"chat_id": 42, "text": "hi back"}]
        # python-telegram-bot posts form bodies; the integer parameters arrive as numbers
        assert telegram.calls[-1] == ("sendMessage", {"chat_id": 42, "text": "hi back"})

        telegram.fail(429, method="sendMessage", retry_after=2)
        with pytest.raises(RetryAfter):
            await bot.send_message(chat_id=42, text="flood")
        with pytest.raises(BadRequest, match=r"(?i)chat not found"):
            await bot.send_message(chat_id=5, text="nobody")
        telegram.auth_fail()
        with pytest.raises(InvalidToken):
            await bot.get_updates(offset=update_id + 1)
    finally:
        await poll.shutdown()
        await send.shutdown()


async def test_wait_sent_names_what_it_waited_for_when_it_times_out(
    telegram: ScriptedTelegram,
) -> None:
    with pytest.raises(TimeoutError, match=r"no 1 sendMessage within 0\.1 s"):
        await telegram.wait_sent(1, timeout=0.1)


def test_it_binds_loopback_addresses_only() -> None:
    with pytest.raises(ValueError, match="loopback"):
        ScriptedTelegram(host="0.0.0.0")
