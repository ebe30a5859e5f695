"""The seed's pattern for a big document in topologies/telegram-research: ``web_fetch`` with
``save_to`` writes the whole page through the ``file`` cell and answers the model with the
file's name; ``read_file`` reads windows of it. The payload never becomes a thread row."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from colony.testing import ColonyHarness
from scripted.core import ScriptedOpenAI, ScriptItem, text_reply
from scripted.core import tool_calls_reply as calls
from scripted.search import ScriptedSearch
from scripted.telegram import ScriptedTelegram
from tests.topologies.test_research_bot import (
    CHAT,
    research_env,
    research_tree,
    tool_contents,
)

PAGE = "".join(f"line {n:06d} of a long report about sea otters\n" for n in range(6000))
READ_LIMIT = 16384


@dataclass
class Run:
    colony: ColonyHarness
    telegram: ScriptedTelegram
    model: ScriptedOpenAI
    files: Path


@asynccontextmanager
async def bot_with_files(script: Sequence[ScriptItem]) -> AsyncIterator[Run]:
    async with ScriptedSearch() as search:
        search.add_page("/report.txt", PAGE)
        items = [
            json.loads(json.dumps(item).replace("URL", search.page_url("/report.txt")))
            for item in script
        ]
        async with (
            ScriptedTelegram(known_chats=[CHAT]) as telegram,
            ScriptedOpenAI(items) as model,
        ):
            tmp = Path(tempfile.mkdtemp(prefix="research-files-"))
            try:
                tree = research_tree(tmp)
                files = tmp / "files"
                files.mkdir()
                env = {**research_env(telegram, model, search), "RESEARCH_FILES_DIR": str(files)}
                async with ColonyHarness(tree, env=env, log_level="info") as colony:
                    yield Run(colony, telegram, model, files)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)


async def ask(run: Run, text: str) -> dict[str, Any]:
    run.telegram.push_text(CHAT, text, user_id=7)
    [answer] = await run.telegram.wait_sent(1, timeout=30)
    await run.colony.settle(timeout=30)
    return answer


def fetch_then_read(save_to: str) -> list[ScriptItem]:
    return [
        calls([("call-save", "web_fetch", {"url": "URL", "save_to": save_to})]),
        calls(
            [
                ("call-window", "read_file", {"path": save_to, "offset": 5, "limit": 6}),
                ("call-greedy", "read_file", {"path": save_to, "limit": 10**6}),
            ]
        ),
        text_reply("The report is long; its lines are numbered."),
    ]


async def test_a_page_fetched_with_save_to_lands_in_the_file_and_never_in_the_thread() -> None:
    async with bot_with_files(fetch_then_read("report.txt")) as run:
        answer = await ask(run, "Summarise the long report")
        assert answer["text"] == "The report is long; its lines are numbered."
        assert (run.files / "report.txt").read_text(encoding="utf-8") == PAGE
        size = len(PAGE.encode())
        assert size > 200_000
        _, second, third = run.model.requests
        assert tool_contents(second) == {
            "call-save": f"saved {size} bytes to report.txt; read it in pieces with read_file "
            "(offset and limit are in bytes)"
        }
        results = tool_contents(third)
        assert results["call-window"] == PAGE[5:11]
        assert results["call-greedy"] == PAGE[:READ_LIMIT]  # a read is capped at 16 KiB
        rows = run.colony.rows("/memory", "thread")
        assert max(len(json.dumps(r)) for r in rows) < 2 * READ_LIMIT
        assert not any("line 005999" in json.dumps(r) for r in rows)
        assert await run.colony.dead_letters() == []


async def test_a_save_to_outside_the_folder_is_an_error_result_and_the_round_completes() -> None:
    script = [
        calls([("call-save", "web_fetch", {"url": "URL", "save_to": "../escape.txt"})]),
        text_reply("I could not save it."),
    ]
    async with bot_with_files(script) as run:
        answer = await ask(run, "Save the report outside")
        assert answer["text"] == "I could not save it."
        result = tool_contents(run.model.requests[1])["call-save"]
        assert result.startswith("could not save to ../escape.txt: ")
        assert "boundary" in result
        assert not (run.files.parent / "escape.txt").exists()
        assert await run.colony.dead_letters() == []


async def test_reading_a_file_that_was_never_saved_is_an_error_result_not_a_stall() -> None:
    script = [
        calls([("call-read", "read_file", {"path": "nothing-here.txt"})]),
        text_reply("There is no such file."),
    ]
    async with bot_with_files(script) as run:
        answer = await ask(run, "Read a file")
        assert answer["text"] == "There is no such file."
        assert "nothing-here.txt" in tool_contents(run.model.requests[1])["call-read"]
        assert await run.colony.dead_letters() == []
