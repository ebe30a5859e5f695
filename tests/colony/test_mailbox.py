"""The in-memory mailbox: bounded, and fair to the senders waiting for room."""

from __future__ import annotations

import asyncio

from colony.envelope import Envelope, source_message
from colony.mailbox import MemoryMailbox


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
