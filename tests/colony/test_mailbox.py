"""The in-memory mailbox: bounded in messages and in bytes, and fair to the senders waiting
for room."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from typing import Any

from colony.envelope import Envelope, source_message
from colony.mailbox import ByteGauge, MemoryMailbox, message_bytes
from colony.persist.journal import CellBacklog, JournalEntry


def _message(text: str) -> Envelope:
    return source_message("/box", {"messages": [{"origin": "user", "type": "text", "text": text}]})


async def test_a_sender_arriving_as_room_frees_up_queues_behind_those_already_waiting() -> None:
    box = MemoryMailbox(1)
    await box.put(_message("first"))
    waiting = [asyncio.create_task(box.put(_message(f"waiting {n}"))) for n in range(3)]
    await asyncio.sleep(0)  # all three now wait for room
    taken = [box.get_nowait()]  # room is free; "waiting 0" is woken but has not run yet
    late = box.put(_message("late"))
    try:
        late.send(None)  # the late sender's first step, before anyone else runs
    except StopIteration:
        overtook = True
    else:
        overtook = False  # it waits for its turn
    late.close()
    assert not overtook
    for _ in range(3):
        taken.append(await box.get())
    await asyncio.gather(*waiting)
    texts = [m.body["messages"][0]["text"] for m in taken if m is not None]
    assert texts == ["first", "waiting 0", "waiting 1", "waiting 2"]


async def test_a_put_with_room_and_nobody_waiting_does_not_wait() -> None:
    box = MemoryMailbox(2)
    await asyncio.wait_for(box.put(_message("a")), timeout=0.01)
    await asyncio.wait_for(box.put(_message("b")), timeout=0.01)
    assert box.full()
    assert box.statistics().peak == 2


def _sized(text: str, pad: int) -> Envelope:
    message = _message(text)
    message.body["pad"] = "p" * pad
    return message


async def test_a_mailbox_full_in_bytes_makes_its_sender_wait_as_a_full_one_does() -> None:
    gauge = ByteGauge()
    box = MemoryMailbox(100, max_bytes=10_000, gauge=gauge)
    first, second = _sized("first", 6_000), _sized("second", 6_000)
    await box.put(first)
    assert not box.full()  # a small message still fits
    waiting = asyncio.create_task(box.put(second))
    await asyncio.sleep(0)
    assert not waiting.done()  # 12 kB would pass the bound: the sender waits
    assert gauge.value == message_bytes(first) + message_bytes(second)  # a waiter counts
    taken = await box.get()
    await asyncio.wait_for(waiting, timeout=1)
    assert taken is first
    assert box.statistics().queued_bytes == message_bytes(second) == gauge.value


async def test_an_empty_mailbox_takes_one_message_larger_than_its_byte_bound() -> None:
    box = MemoryMailbox(10, max_bytes=1_000)
    await asyncio.wait_for(box.put(_sized("huge", 50_000)), timeout=0.01)
    assert box.qsize() == 1


def test_message_bytes_follow_the_json_size_and_any_nesting_depth() -> None:
    message = _sized("x", 10_000)
    encoded = len(json.dumps(message.to_json()))
    assert 0.8 * encoded < message_bytes(message) < 1.2 * encoded
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    message.body = {**message.body, "deep": deep}
    assert message_bytes(message) > 100_000  # walked without recursion


class _HeldSnapshot:
    """A journal snapshot of three rows for ``/box`` whose page reads wait for ``go`` (a
    stand-in for :class:`colony.persist.journal.JournalSnapshot`: a read of the disk that a
    cancelled ``get()`` leaves running in its thread)."""

    def __init__(self) -> None:
        self.cells = {"/box": 3}
        self.rows = [
            JournalEntry(seq, "/box", "/sender", _message(f"row {seq}"), 10) for seq in (1, 2, 3)
        ]
        self.go = threading.Event()
        self.reads = 0

    def page(
        self, cell: str, after: int, limit: int, max_bytes: int | None = None
    ) -> list[JournalEntry]:
        self.reads += 1
        self.go.wait(10)
        return [r for r in self.rows if r.cell == cell and r.seq > after][:limit]


async def test_a_get_cancelled_while_it_reads_the_backlog_loses_no_message() -> None:
    snapshot = _HeldSnapshot()
    box = MemoryMailbox(2)
    box.attach(CellBacklog(snapshot, "/box"))  # type: ignore[arg-type]
    waiting = asyncio.create_task(box.get())
    while snapshot.reads == 0:  # noqa: ASYNC110 (the page read is under way in its thread)
        await asyncio.sleep(0.01)
    waiting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    snapshot.go.set()  # the abandoned read finishes; its page is dropped, not consumed
    texts = [(await box.get()).body["messages"][0]["text"] for _ in range(3)]
    assert texts == ["row 1", "row 2", "row 3"]
    assert box.qsize() == 0
