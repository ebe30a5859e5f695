"""A full disk: ingress is refused with 503 while colony.db cannot be written, nothing
accepted is lost, and the colony works again once space returns, without a restart
(issue 15, item 12). The disk is a real tmpfs, filled to the last byte."""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from colony.cell import CellClass, CellType
from colony.envelope import Envelope, source_message
from colony.observability import file_logger
from colony.persist.db import StorageUnavailable
from colony.testing import ColonyHarness
from tests.colony.persist.disk import fill, small_disk
from tests.conftest import TreeFactory, cell, hive

pytestmark = pytest.mark.sqlite_only  # a full disk under colony.db

BIG = "x" * 2_000_000
"""A body the WAL must grow for: a commit of it needs free blocks."""


def _say(text: str) -> dict[str, Any]:
    return {"messages": [{"origin": "user", "type": "text", "text": text}]}


class _Gate:
    """Answers each message with a 2 MB text once ``opened`` is set."""

    def __init__(self, opened: asyncio.Event, started: asyncio.Event) -> None:
        self.opened, self.started = opened, started

    async def handle(self, message: Envelope) -> list[Any]:
        self.started.set()
        await self.opened.wait()
        return [{"messages": [{"origin": "assistant", "type": "text", "text": BIG}]}]


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with small_disk(tmp_path / "disk") as mounted:
        yield mounted


async def _until(condition: Any, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        await asyncio.sleep(0.02)


async def test_a_full_disk_refuses_ingress_with_503_and_the_colony_recovers_losing_nothing(
    make_tree: TreeFactory, disk: Path
) -> None:
    tree = make_tree(
        {
            "main/config.json": hive(
                {"from": ".", "to": "./gate"}, {"from": "gate", "to": "/sink"}
            ),
            "main/gate/config.json": cell("gate"),
        }
    )
    opened, started = asyncio.Event(), asyncio.Event()
    types = {"gate": CellType("gate", CellClass.STATEFUL, lambda spec: _Gate(opened, started))}
    async with ColonyHarness(
        tree, capture=["/sink"], cell_types=types, workdir=disk / "work"
    ) as harness:
        colony = harness.colony
        await harness.send("/gate", _say("accepted before the disk filled"))
        await started.wait()
        filler = fill(disk)

        opened.set()  # the gate's 2 MB answer cannot be committed now: it is kept
        with pytest.raises(StorageUnavailable):
            await colony.send(source_message("/gate", {**_say("refused"), "pad": BIG}))
        refusal = colony.admission(100)
        assert refusal is not None
        assert (refusal.status, refusal.token) == (503, "storage_unavailable")
        assert refusal.retry_after_s > 0
        assert "colony.db cannot be written" in refusal.detail
        assert harness.captured("/sink") == []  # nothing delivered that was not committed
        (line,) = harness.logs("colony_db_unavailable", "error")
        assert "full" in line["error"]

        filler.unlink()  # space returns: no restart
        await _until(lambda: colony.admission() is None)
        await harness.settle()
        assert [len(m.body["messages"][0]["text"]) for m in harness.captured("/sink")] == [len(BIG)]
        assert harness.logs("colony_db_recovered")
        again = await harness.send("/gate", _say("after"))
        await harness.settle()
        assert len(harness.captured("/sink")) == 2
        assert [r.trace_id for r in await harness.message_log(again)]
        assert await harness.dead_letters() == []


def test_a_log_line_that_cannot_be_written_is_counted_and_reported_once_it_can(
    disk: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with open(disk / "log.jsonl", "a", encoding="utf-8") as stream:
        log = file_logger(stream, "info")
        log.info("before")
        filler = fill(disk)
        for n in range(50):
            log.warning("while_full", n=n, pad="y" * 500)  # must not raise
        filler.unlink()
        log.info("after", odd="\ud800")
    # Every line is whole JSON (a line cut short by the full disk was cut off again); what
    # fitted in the file's last page went out, the rest is counted.
    lines = [json.loads(line) for line in (disk / "log.jsonl").read_text().splitlines()]
    events = [line["event"] for line in lines]
    assert (events[0], events[-1]) == ("before", "after")
    reports = [line for line in lines if line["event"] == "log_lines_dropped"]
    assert reports
    assert all("No space left" in report["error"] for report in reports)
    assert events.count("while_full") + sum(r["dropped"] for r in reports) == 50
    assert lines[-1]["odd"] == "\ud800"
    warned = [line for line in capsys.readouterr().err.splitlines() if "log file" in line]
    assert len(warned) == 1  # rate-limited, not one line per dropped write


def test_a_log_line_with_a_lone_surrogate_is_written_escaped_not_raised() -> None:
    stream = io.StringIO()
    file_logger(stream, "info").info("odd", path="/caf\udce9")
    (line,) = stream.getvalue().splitlines()
    assert "\\udce9" in line
    assert json.loads(line)["path"] == "/caf\udce9"
