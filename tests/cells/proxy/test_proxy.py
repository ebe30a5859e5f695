"""The proxy cell against a scripted Telegram, through a real colony."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from cells.proxy import PROXY, ProxyCell, ProxyParams, split_message
from colony.cell import CellClass, CellSpec, CellType
from colony.errors import ConfigError
from colony.testing import ColonyHarness, spec_for
from scripted.telegram import ScriptedTelegram
from tests.conftest import CONTRACT, TreeFactory, hive

TOKEN = "424242:proxy-test-SECRET-token"
CHAT = 4711
USER = 77

ECHO = """
import json, sys
doc = json.load(sys.stdin)
text = doc["body"]["messages"][-1]["text"]
print(json.dumps({"messages": [{"origin": "assistant", "type": "text", "text": "echo: " + text}]}))
"""

LONG_ANSWER = """
import json, sys
paragraphs = ["a" * 2999, "b" * 2999, "c" * 2998]
text = "\\n\\n".join(paragraphs)
assert len(text) == 9000
print(json.dumps({"messages": [
    {"origin": "assistant", "type": "text", "text": "an earlier draft"},
    {"origin": "tool", "type": "tool_result", "id": "t1", "text": "noise"},
    {"origin": "assistant", "type": "text", "text": text},
]}))
"""


class Clock:
    """The proxy's sleep: records every wait it is asked for and waits a hundredth of it at
    most, so a five-minute backoff costs a test milliseconds."""

    def __init__(self) -> None:
        self.asked: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.asked.append(seconds)
        await asyncio.sleep(min(seconds / 100, 0.05))


def proxy_type(clock: Clock, cells: list[ProxyCell], built: asyncio.Event) -> CellType:
    def make(spec: CellSpec) -> ProxyCell:
        cell = ProxyCell(spec, sleep=clock.sleep)
        cells.append(cell)
        built.set()
        return cell

    return CellType("proxy", CellClass.LONG_RUNNING, make, check_params=PROXY.check_params)


def proxy_params(telegram: ScriptedTelegram, **params: Any) -> dict[str, Any]:
    return {
        "bot_token": "${TELEGRAM_BOT_TOKEN}",
        "emit_to": "../echo",
        "base_url": telegram.url,
        "long_poll_request_secs": 2,
        "long_poll_timeout_ms": 5000,
        **params,
    }


def bot_tree(telegram: ScriptedTelegram, script: str = ECHO, **params: Any) -> dict[str, Any]:
    return {
        "main/config.json": hive(
            {
                "from": "./proxy",
                "to": "./echo",
                "condition": "has(hop.chat_id)",
                "modifier": {"set_context": {"chat_id": "hop.chat_id"}},
            },
            {"from": "./proxy", "to": "/sink"},  # everything the proxy emits, for inspection
            {"from": "./echo", "to": "./proxy"},
        ),
        "main/proxy/config.json": {
            "cell": {"type": "proxy", "timeout": -1},
            "params": proxy_params(telegram, **params),
            "contract": CONTRACT,
        },
        "main/echo/config.json": {
            "cell": {"type": "code"},
            "params": {"runner": "python3", "script_inline": script},
            "contract": CONTRACT,
        },
    }


class Running:
    """A running colony with its proxy, the scripted Telegram and the proxy's clock."""

    def __init__(
        self,
        colony: ColonyHarness,
        telegram: ScriptedTelegram,
        clock: Clock,
        cells: list[ProxyCell],
        token: str,
    ) -> None:
        self.colony, self.telegram, self.clock, self.cells = colony, telegram, clock, cells
        self.token = token

    def emitted(self) -> list[Any]:
        """What the proxy emitted (its /sink edge takes everything)."""
        return [m for m in self.colony.captured("/sink") if m.reply_to == "/proxy"]


@asynccontextmanager
async def running(
    make_tree: TreeFactory,
    *,
    script: str = ECHO,
    workdir: Path | None = None,
    telegram: ScriptedTelegram | None = None,
    token: str = TOKEN,
    **params: Any,
) -> AsyncIterator[Running]:
    clock, cells_list, built = Clock(), list[ProxyCell](), asyncio.Event()
    async with ScriptedTelegram(token=TOKEN) if telegram is None else _borrowed(telegram) as tg:
        tree = make_tree(bot_tree(tg, script, **params))
        async with ColonyHarness(
            tree,
            capture=["/sink"],
            env={"TELEGRAM_BOT_TOKEN": token},
            cell_types={"proxy": proxy_type(clock, cells_list, built)},
            workdir=workdir,
        ) as colony:
            bot = Running(colony, tg, clock, cells_list, token)
            async with asyncio.timeout(10):  # long-running cells are built by their own task
                await built.wait()
            yield bot
            assert_no_token(bot)


@asynccontextmanager
async def _borrowed(telegram: ScriptedTelegram) -> AsyncIterator[ScriptedTelegram]:
    yield telegram


def assert_no_token(bot: Running) -> None:
    """The bot token is in no log record and no message the colony carried."""
    records = json.dumps(bot.colony.records, default=str)
    secret = bot.token.split(":")[1]
    assert secret not in records
    for message in bot.colony.captured("/sink"):
        assert secret not in json.dumps(message.to_json(), default=str)


def user_text(message: Any) -> str:
    turn = message.body["messages"][0]
    assert (turn["origin"], turn["type"]) == ("user", "text")
    text: str = turn["text"]
    return text


def inbound_error(message: Any) -> tuple[str, str]:
    assert message.headers.hop["msg_type"] == "proxy_inbound_error"
    assert "finish_reason" not in message.headers.hop
    assert message.body["messages"] == []
    return message.headers.hop["error_code"], message.body["meta"]["detail"]


# -- params ------------------------------------------------------------------------------------


def problems(params: dict[str, Any]) -> list[tuple[str, str]]:
    assert PROXY.check_params is not None
    return [(p.code, p.message) for p in PROXY.check_params(params, None)]


def test_params_have_meclaws_defaults() -> None:
    p = ProxyParams.model_validate({"bot_token": TOKEN, "emit_to": "../prep"})
    assert (p.platform, p.base_url) == ("telegram", "https://api.telegram.org")
    assert (p.long_poll_timeout_ms, p.long_poll_request_secs) == (35_000, 30)
    assert (p.send_timeout_ms, p.query_timeout_ms) == (10_000, 5_000)
    assert TOKEN not in repr(p)


def test_slack_is_refused_naming_what_is_supported() -> None:
    [(code, message)] = problems({"platform": "slack", "bot_token": TOKEN, "emit_to": ".."})
    assert code == "unsupported_platform"
    assert "'slack'" in message
    assert "supported: telegram" in message


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"emit_to": ".."}, "missing_key"),
        ({"bot_token": "", "emit_to": ".."}, "empty_bot_token"),
        ({"bot_token": "12 34", "emit_to": ".."}, "invalid_bot_token"),
        ({"bot_token": TOKEN}, "missing_key"),
        ({"bot_token": TOKEN, "emit_to": " "}, "empty_emit_to"),
        (
            {"bot_token": TOKEN, "emit_to": "..", "long_poll_timeout_ms": 30_000},
            "long_poll_tripwire",
        ),
        ({"bot_token": TOKEN, "emit_to": "..", "long_poll_request_secs": 40}, "long_poll_tripwire"),
        ({"bot_token": TOKEN, "emit_to": "..", "send_timeout_ms": 0}, "out_of_range"),
        ({"bot_token": TOKEN, "emit_to": "..", "query_timeout_ms": 0}, "out_of_range"),
        ({"bot_token": TOKEN, "emit_to": "..", "base_url": "api.telegram.org"}, "invalid_base_url"),
        ({"bot_token": TOKEN, "emit_to": "..", "max_concurrency": 2}, "unknown_param"),
    ],
)
def test_bad_params_are_reported_without_quoting_the_token(
    params: dict[str, Any], code: str
) -> None:
    found = problems(params)
    assert [c for c, _ in found] == [code]
    assert TOKEN not in found[0][1]


def test_building_a_cell_from_bad_params_fails_without_quoting_the_token() -> None:
    with pytest.raises(ValueError, match="bot_token contains whitespace") as caught:
        ProxyCell(spec_for("/proxy", {"bot_token": "12 SECRET", "emit_to": ".."}))
    assert "SECRET" not in str(caught.value)
    assert caught.value.__cause__ is None


def test_the_tripwire_names_both_numbers() -> None:
    [(_, message)] = problems({"bot_token": TOKEN, "emit_to": "..", "long_poll_timeout_ms": 30_000})
    assert "long_poll_timeout_ms (30000)" in message
    assert "long_poll_request_secs * 1000 (30000)" in message


async def test_a_slack_proxy_does_not_boot(make_tree: TreeFactory) -> None:
    async with ScriptedTelegram(token=TOKEN) as telegram:
        tree = make_tree(bot_tree(telegram, platform="slack"))
        with pytest.raises(ConfigError, match="supported: telegram"):
            async with ColonyHarness(
                tree,
                capture=["/sink"],
                env={"TELEGRAM_BOT_TOKEN": TOKEN},
                cell_types={"proxy": PROXY},
            ):
                pass


# -- splitting ---------------------------------------------------------------------------------


def test_a_text_within_the_limit_is_one_message() -> None:
    assert split_message("hello") == ["hello"]
    assert split_message("x" * 4096) == ["x" * 4096]


def test_a_long_text_is_split_on_paragraph_boundaries_in_order() -> None:
    paragraphs = ["a" * 2999, "b" * 2999, "c" * 2998]
    parts = split_message("\n\n".join(paragraphs))
    assert parts == paragraphs


def test_paragraphs_are_packed_together_while_they_fit() -> None:
    paragraphs = ["p1 " * 500, "p2 " * 500, "p3 " * 500, "p4 " * 500]  # 1500 characters each
    parts = split_message("\n\n".join(p.strip() for p in paragraphs))
    assert len(parts) == 2
    assert parts[0] == "\n\n".join(p.strip() for p in paragraphs[:2])
    assert all(len(part) <= 4096 for part in parts)


def test_a_paragraph_longer_than_the_limit_is_split_on_lines_then_cut_hard() -> None:
    lines = "\n".join(f"line {i:04d} " + "x" * 90 for i in range(60))  # ~6000 characters
    parts = split_message(lines)
    assert len(parts) == 2
    assert all(len(part) <= 4096 for part in parts)
    assert "\n".join(parts) == lines
    assert not parts[0].endswith("\n")

    solid = "y" * 9000
    assert split_message(solid) == ["y" * 4096, "y" * 4096, "y" * 808]


def test_the_limit_counts_utf16_units_like_telegram() -> None:
    parts = split_message("😀" * 3000)  # 6000 UTF-16 units
    assert [len(p) for p in parts] == [2048, 952]
    assert "".join(parts) == "😀" * 3000


# -- through a colony -------------------------------------------------------------------------


async def test_a_user_message_travels_through_the_colony_and_back_to_its_chat(
    make_tree: TreeFactory,
) -> None:
    async with running(make_tree) as bot:
        update_id = bot.telegram.push_text(CHAT, "hello bot", user_id=USER, message_id=5)
        [reply] = await bot.telegram.wait_sent(1)
        await bot.colony.settle()
        assert reply == {"chat_id": CHAT, "text": "echo: hello bot"}

        [inbound] = bot.emitted()
        assert inbound.headers.hop == {
            "chat_id": CHAT,
            "user_id": USER,
            "platform": "telegram",
            "message_id": 5,
        }
        assert inbound.headers.context == {}
        assert inbound.parent_message_id is None
        assert inbound.body == {
            "messages": [{"origin": "user", "type": "text", "text": "hello bot"}]
        }
        assert bot.colony.rows("/proxy", "update_cursor") == [{"id": 1, "offset": update_id + 1}]
        assert await bot.colony.dead_letters() == []
        assert bot.cells[0].backoffs == []


async def test_a_9000_character_answer_arrives_as_three_messages_in_order(
    make_tree: TreeFactory,
) -> None:
    async with running(make_tree, script=LONG_ANSWER) as bot:
        bot.telegram.push_text(CHAT, "tell me a lot", user_id=USER)
        sent = await bot.telegram.wait_sent(3)
        await bot.colony.settle()
        assert [m["chat_id"] for m in sent] == [CHAT] * 3
        assert [m["text"] for m in sent] == ["a" * 2999, "b" * 2999, "c" * 2998]
        assert len(bot.telegram.sent) == 3


async def test_updates_are_emitted_in_order_and_only_text_messages(
    make_tree: TreeFactory,
) -> None:
    async with running(make_tree) as bot:
        bot.telegram.push_text(CHAT, "first", user_id=USER)
        bot.telegram.push_text(CHAT, None, user_id=USER)  # a sticker: no text
        last = bot.telegram.push_text(CHAT + 1, "second")  # no sender (e.g. a channel)
        await bot.telegram.wait_sent(2)
        await bot.colony.settle()
        emitted = bot.emitted()
        assert [user_text(m) for m in emitted] == ["first", "second"]
        assert "user_id" not in emitted[1].headers.hop
        assert sorted((m["chat_id"], m["text"]) for m in bot.telegram.sent) == [
            (CHAT, "echo: first"),
            (CHAT + 1, "echo: second"),
        ]
        await bot.telegram.wait_polls(len(bot.telegram.polls) + 1)
        assert bot.telegram.polls[-1]["offset"] == last + 1
        assert bot.telegram.pending == []


async def test_a_401_slows_the_poll_to_the_five_minute_retry(make_tree: TreeFactory) -> None:
    async with running(make_tree) as bot:
        bot.telegram.auth_fail(2)
        bot.telegram.push_text(CHAT, "after the outage", user_id=USER)
        [reply] = await bot.telegram.wait_sent(1)
        assert reply["text"] == "echo: after the outage"
        statuses = [p["status"] for p in bot.telegram.polls]
        assert statuses[:3] == [401, 401, 200]
        assert bot.cells[0].backoffs == [("auth", 300.0), ("auth", 300.0)]
        assert bot.clock.asked == [300.0, 300.0]
        logged = bot.colony.logs("proxy_poll_backoff")
        assert [(r["kind"], r["delay_s"]) for r in logged] == [("auth", 300.0), ("auth", 300.0)]
        assert all(r["level"] == "warning" for r in logged)


async def test_a_wrong_token_keeps_the_bot_at_the_five_minute_retry(
    make_tree: TreeFactory,
) -> None:
    async with running(make_tree, token="424242:a-wrong-token") as bot:
        await bot.telegram.wait_polls(3)
        assert {p["status"] for p in bot.telegram.polls} == {401}
        assert set(bot.clock.asked) == {300.0}
        assert bot.telegram.tokens_seen[0] == "424242:a-wrong-token"


async def test_transient_failures_back_off_doubling_to_a_minute_and_reset_after_success(
    make_tree: TreeFactory,
) -> None:
    async with running(make_tree) as bot:
        bot.telegram.fail(502, method="getUpdates", times=8)
        bot.telegram.push_text(CHAT, "eventually", user_id=USER)
        await bot.telegram.wait_sent(1)
        assert bot.clock.asked == [1, 2, 4, 8, 16, 32, 60, 60]
        assert [kind for kind, _ in bot.cells[0].backoffs] == ["transient"] * 8

        bot.telegram.fail(500, method="getUpdates", times=1)
        await bot.telegram.wait_polls(len(bot.telegram.polls) + 2)
        assert bot.clock.asked[-1] == 1  # the ladder starts again after a success


async def test_flood_control_on_polling_waits_as_long_as_telegram_says(
    make_tree: TreeFactory,
) -> None:
    async with running(make_tree) as bot:
        bot.telegram.fail(429, method="getUpdates", retry_after=7)
        bot.telegram.push_text(CHAT, "hi", user_id=USER)
        await bot.telegram.wait_sent(1)
        assert bot.cells[0].backoffs == [("flood", 7.0)]


async def test_the_cursor_survives_a_restart_so_no_update_is_emitted_twice(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    workdir = tmp_path / "work"
    async with ScriptedTelegram(token=TOKEN) as telegram:
        async with running(make_tree, workdir=workdir, telegram=telegram) as bot:
            first = telegram.push_text(CHAT, "before the restart", user_id=USER)
            await telegram.wait_sent(1)
            await bot.colony.settle()
            assert [user_text(m) for m in bot.emitted()] == ["before the restart"]
        # As if Telegram never heard the confirmation: the update is queued again.
        if not telegram.pending:
            telegram.push_update(_update(first, "before the restart"))
        assert [u["update_id"] for u in telegram.pending] == [first]
        polls_before = len(telegram.polls)

        async with running(make_tree, workdir=workdir, telegram=telegram) as bot:
            second = telegram.push_text(CHAT, "after the restart", user_id=USER)
            await telegram.wait_sent(2)
            await bot.colony.settle()
            assert [user_text(m) for m in bot.emitted()] == ["after the restart"]
            assert telegram.polls[polls_before]["offset"] == first + 1
            assert [m["text"] for m in telegram.sent] == [
                "echo: before the restart",
                "echo: after the restart",
            ]
            assert bot.colony.rows("/proxy", "update_cursor") == [{"id": 1, "offset": second + 1}]


def _update(update_id: int, text: str) -> dict[str, Any]:
    from scripted.telegram import telegram_update

    return telegram_update(update_id, CHAT, text, user_id=USER)


# -- errors on the way out ---------------------------------------------------------------------


def answer(text: str = "hi there") -> dict[str, Any]:
    return {"messages": [{"origin": "assistant", "type": "text", "text": text}]}


async def one_error(
    bot: Running, body: Any, context: dict[str, Any] | None = None
) -> tuple[str, str]:
    await bot.colony.send("/proxy", body, context=context or {})
    await bot.colony.settle()
    [error] = bot.emitted()
    return inbound_error(error)


async def test_an_answer_without_context_chat_id_is_missing_chat_id(
    make_tree: TreeFactory,
) -> None:
    async with running(make_tree) as bot:
        code, detail = await one_error(bot, answer(), context={"chat": CHAT})
        assert code == "missing_chat_id"
        assert "context.chat_id" in detail
        assert bot.telegram.sent == []


async def test_an_answer_without_an_assistant_text_turn_is_missing_assistant_turn(
    make_tree: TreeFactory,
) -> None:
    async with running(make_tree) as bot:
        body = {"messages": [{"origin": "user", "type": "text", "text": "only me"}]}
        code, detail = await one_error(bot, body, context={"chat_id": CHAT})
        assert code == "missing_assistant_turn"
        assert detail == "messages[] has no assistant text turn"
        assert bot.telegram.sent == []


async def test_a_body_without_messages_is_invalid_body(make_tree: TreeFactory) -> None:
    async with running(make_tree) as bot:
        code, _ = await one_error(bot, {"system": {}}, context={"chat_id": CHAT})
        assert code == "invalid_body"


async def test_a_chat_id_given_as_digits_is_used_as_a_number(make_tree: TreeFactory) -> None:
    async with running(make_tree) as bot:
        bot.telegram.known_chats.add(-100555)
        await bot.colony.send("/proxy", answer("to the group"), context={"chat_id": "-100555"})
        await bot.colony.settle()
        assert bot.telegram.sent == [{"chat_id": -100555, "text": "to the group"}]
        assert bot.emitted() == []  # a pure sink: nothing on success


async def test_a_refused_send_is_send_failed_with_telegrams_reason(
    make_tree: TreeFactory,
) -> None:
    async with running(make_tree) as bot:
        code, detail = await one_error(bot, answer(), context={"chat_id": 999})
        assert code == "send_failed"
        assert "Chat not found" in detail

        bot.telegram.known_chats.add(CHAT)
        bot.telegram.fail(500, method="sendMessage")
        await bot.colony.send("/proxy", answer(), context={"chat_id": CHAT})
        await bot.colony.settle()
        code, detail = inbound_error(bot.emitted()[-1])
        assert code == "send_failed"
        assert "Internal Server Error" in detail


async def test_a_failure_midway_through_a_split_answer_names_the_part(
    make_tree: TreeFactory,
) -> None:
    async with running(make_tree) as bot:
        bot.telegram.known_chats.add(CHAT)
        bot.telegram.fail(400, method="sendMessage", after=1, description="Bad Request: boom")
        text = "\n\n".join(["a" * 3000, "b" * 3000, "c" * 3000])
        code, detail = await one_error(bot, answer(text), context={"chat_id": CHAT})
        assert code == "send_failed"
        assert detail == "sendMessage failed (part 2 of 3): BadRequest: Boom"
        assert bot.telegram.sent == [{"chat_id": CHAT, "text": "a" * 3000}]  # and no part 3


async def test_flood_control_on_sending_is_waited_out_within_the_send_timeout(
    make_tree: TreeFactory,
) -> None:
    async with running(make_tree) as bot:
        bot.telegram.known_chats.add(CHAT)
        bot.telegram.fail(429, method="sendMessage", retry_after=1)
        await bot.colony.send("/proxy", answer(), context={"chat_id": CHAT})
        await bot.colony.settle()
        assert bot.telegram.sent == [{"chat_id": CHAT, "text": "hi there"}]
        assert bot.clock.asked == [1.0]
        assert bot.emitted() == []


async def test_a_send_that_outlasts_send_timeout_ms_is_send_failed(
    make_tree: TreeFactory,
) -> None:
    async with running(make_tree, send_timeout_ms=300) as bot:
        bot.telegram.known_chats.add(CHAT)
        bot.telegram.fail(429, method="sendMessage", retry_after=5)  # longer than the budget
        code, detail = await one_error(bot, answer(), context={"chat_id": CHAT})
        assert code == "send_failed"
        assert "Flood control" in detail


# -- runtime params --------------------------------------------------------------------------------


async def test_a_params_slot_updates_mutable_params_silently_and_persists_them(
    make_tree: TreeFactory,
) -> None:
    async with running(make_tree) as bot:
        await bot.colony.send("/proxy", {"params": {"send_timeout_ms": 1234}})
        await bot.colony.settle()
        assert bot.emitted() == []
        assert bot.cells[0].params.send_timeout_ms == 1234
        [row] = bot.colony.rows("/proxy", "proxy_params")
        assert (row["key"], row["value"]) == ("send_timeout_ms", "1234")


@pytest.mark.parametrize(
    ("update", "expected"),
    [
        ({"bot_token": "1:other"}, "params.bot_token cannot be changed at runtime (mutable: "),
        ({"emit_to": "/x"}, "params.emit_to cannot be changed at runtime"),
        ({"colour": "red"}, "params.colour is not a proxy param (mutable: base_url, "),
        ({"long_poll_request_secs": 99}, "params.long_poll_timeout_ms: long_poll_timeout_ms"),
        ("fast", "params must be an object"),
    ],
)
async def test_a_params_slot_refuses_what_it_may_not_change(
    make_tree: TreeFactory, update: Any, expected: str
) -> None:
    async with running(make_tree) as bot:
        code, detail = await one_error(bot, {"params": update, "messages": []})
        assert code == "invalid_input"
        assert detail.startswith(expected)
        assert "1:other" not in detail
        assert bot.colony.rows("/proxy", "proxy_params") == []


@pytest.mark.sqlite_only  # locks the cell's cell.db
async def test_a_locked_cell_db_is_query_timeout(make_tree: TreeFactory) -> None:
    async with running(make_tree, query_timeout_ms=200) as bot:
        folder = bot.colony.colony.runners["/proxy"].spec.folder
        assert folder is not None
        blocker = sqlite3.connect(folder / "cell.db", isolation_level=None)
        try:
            blocker.execute("BEGIN IMMEDIATE")
            code, detail = await one_error(
                bot, {"params": {"send_timeout_ms": 999}, "messages": []}
            )
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert code == "query_timeout"
        assert "200 ms" in detail
        assert bot.cells[0].params.send_timeout_ms == 10_000


async def test_params_updates_survive_a_restart(make_tree: TreeFactory, tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    async with ScriptedTelegram(token=TOKEN) as telegram:
        async with running(make_tree, workdir=workdir, telegram=telegram) as bot:
            await bot.colony.send("/proxy", {"params": {"query_timeout_ms": 777}})
            await bot.colony.settle()
        async with running(make_tree, workdir=workdir, telegram=telegram) as bot:
            assert bot.cells[-1].params.query_timeout_ms == 777


# -- the I/O loop on its own ------------------------------------------------------------------


class Context:
    """A stand-in for the colony's CellContext: records what the loop emits."""

    path = "/proxy"

    def __init__(self) -> None:
        self.emitted: list[tuple[dict[str, Any], str | None]] = []
        self.changed = asyncio.Event()

    async def emit(
        self, content: dict[str, Any], target: str | None = None, *, key: str | None = None
    ) -> None:
        self.emitted.append((content, target))
        self.changed.set()


async def test_the_token_is_scrubbed_from_the_libraries_own_log_records(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with ScriptedTelegram(token=TOKEN) as telegram:
        cell = ProxyCell(spec_for("/proxy", proxy_params(telegram, bot_token=TOKEN)))
        ctx = Context()
        loop = asyncio.create_task(cell.run(ctx))
        try:
            telegram.push_text(CHAT, "hi", user_id=USER)
            async with asyncio.timeout(10):
                await ctx.changed.wait()
        finally:
            loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop
            await cell.close()
    assert ctx.emitted[0][1] == "../echo"
    library = [r for r in caplog.records if r.name in ("httpx", "telegram.Bot")]
    assert any("getUpdates" in r.getMessage() for r in library)  # they did log the URLs
    assert "[redacted]" in caplog.text
    assert TOKEN.split(":")[1] not in caplog.text
    # the filter forgets the token once the last cell holding it is closed
    logging.getLogger("httpx").debug("after close: %s", TOKEN)
    assert TOKEN.split(":")[1] in caplog.records[-1].getMessage()


async def test_an_answer_redelivered_after_a_crash_sends_only_the_parts_not_yet_sent(
    make_tree: TreeFactory,
) -> None:
    from colony.envelope import source_message

    async with running(make_tree) as bot:
        bot.telegram.known_chats.add(CHAT)
        cell = bot.cells[0]
        long = "\n\n".join(["x" * 4000, "y" * 4000, "z" * 100])
        message = source_message("/proxy", answer(long), context={"chat_id": CHAT})
        bot.telegram.fail(400, method="sendMessage", description="boom", after=1)
        first = await cell.handle(message)  # part 1 goes out, part 2 is refused
        assert first is not None
        assert [m["text"][0] for m in bot.telegram.sent] == ["x"]
        assert await cell.handle(message) is None  # the journal hands it over again
        assert [m["text"][0] for m in bot.telegram.sent] == ["x", "y", "z"]
        assert await cell.handle(message) is None  # and again: nothing more is sent
        assert len(bot.telegram.sent) == 3
        assert bot.colony.logs("proxy_redelivery_skipped")
