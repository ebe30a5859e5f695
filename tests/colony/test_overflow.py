"""A full mailbox overflows instead of making its sender wait: in order, bounded in memory,
and read back from the journal (at-least-once) or memory (at-most-once)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from colony.effects import Delivery
from colony.envelope import Envelope, source_message
from colony.mailbox import ByteGauge, MemoryMailbox, message_bytes
from colony.overflow import JournalOverflow, MemoryOverflow
from colony.persist.db import ColonyDb
from colony.persist.items import Unit


def _message(text: str, body_size: int = 0) -> Envelope:
    text_turn = {"origin": "user", "type": "text", "text": text}
    return source_message("/box", {"messages": [text_turn], "padding": "x" * body_size})


def _text(message: Envelope | None) -> str:
    assert message is not None
    return str(message.body["messages"][0]["text"])


async def _take_all(box: MemoryMailbox, count: int) -> list[str]:
    return [_text(await box.get()) for _ in range(count)]


async def test_a_push_past_capacity_overflows_and_every_message_comes_back_in_order() -> None:
    gauge = ByteGauge()
    box = MemoryMailbox(2, gauge=gauge, overflow=MemoryOverflow(gauge))
    overflowed = [box.push(_message(f"m{i}")) for i in range(7)]
    assert overflowed == [False, False, True, True, True, True, True]
    assert box.qsize() == 7
    assert box.full()
    assert await _take_all(box, 7) == [f"m{i}" for i in range(7)]
    assert box.qsize() == 0
    assert gauge.value == 0


async def test_once_a_mailbox_overflows_a_later_push_goes_behind_the_overflow() -> None:
    gauge = ByteGauge()
    box = MemoryMailbox(2, gauge=gauge, overflow=MemoryOverflow(gauge))
    for i in range(3):
        box.push(_message(f"m{i}"))  # m2 overflows
    assert _text(box.get_nowait()) == "m0"  # room again in memory...
    assert box.push(_message("m3"))  # ...but m3 must not overtake m2
    assert await _take_all(box, 3) == ["m1", "m2", "m3"]


async def test_a_waiting_put_goes_only_after_the_overflow_is_delivered() -> None:
    gauge = ByteGauge()
    box = MemoryMailbox(1, gauge=gauge, overflow=MemoryOverflow(gauge))
    box.push(_message("cell 0"))
    box.push(_message("cell 1"))  # overflows
    ingress = asyncio.create_task(box.put(_message("ingress")))
    await asyncio.sleep(0)
    assert not ingress.done()
    assert await _take_all(box, 2) == ["cell 0", "cell 1"]
    await asyncio.wait_for(ingress, 5)
    assert await _take_all(box, 1) == ["ingress"]


@settings(max_examples=30, deadline=None)
@given(
    capacity=st.integers(1, 4),
    steps=st.lists(st.one_of(st.just("take"), st.integers(0, 300)), max_size=40),
)
def test_whatever_the_pushes_and_takes_the_order_is_kept_and_memory_stays_bounded(
    capacity: int, steps: list[str | int]
) -> None:
    async def run() -> None:
        gauge = ByteGauge()
        box = MemoryMailbox(capacity, gauge=gauge, overflow=MemoryOverflow(gauge))
        sent: list[str] = []
        got: list[str] = []
        for step in steps:
            if step == "take":
                message = box.get_nowait()
                if message is None and box.qsize():
                    message = await box.get()
                if message is not None:
                    got.append(_text(message))
            else:
                name = f"m{len(sent)}"
                box.push(_message(name, int(step)))
                sent.append(name)
            held_in_memory = box.statistics().queued - box.overflowing
            assert held_in_memory <= capacity
        got += await _take_all(box, box.qsize())
        assert got == sent
        assert gauge.value == 0

    asyncio.run(run())


async def test_the_journal_overflow_keeps_ids_only_and_reads_the_bodies_back_from_disk(
    tmp_path: Path,
) -> None:
    db = ColonyDb(tmp_path / "colony.db")
    try:
        messages = [_message(f"m{i}", 10_000) for i in range(6)]
        # As the colony does: deliveries are journal rows before they reach the mailbox.
        await db.commit(Unit(deliveries=[Delivery("/box", m, "/") for m in messages]))
        queued, spilled = ByteGauge(), ByteGauge()
        box = MemoryMailbox(2, gauge=queued, overflow=JournalOverflow(db.path, "/box", spilled))
        for m in messages:
            box.push(m)
        assert box.overflowing == 4
        in_memory = sum(message_bytes(m) for m in messages[:2])
        assert queued.value == in_memory  # the four overflowed bodies are not in memory
        assert spilled.value == sum(message_bytes(m) for m in messages[2:])
        got = [await box.get() for _ in range(6)]
        assert [m.id for m in got] == [m.id for m in messages]
        assert [_text(m) for m in got] == [_text(m) for m in messages]
        assert queued.value == 0
        assert spilled.value == 0
    finally:
        db.close()
