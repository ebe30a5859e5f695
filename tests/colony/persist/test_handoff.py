"""What the event loop hands the ``colony.db`` writer in one pass reaches it together, in
order, and nothing is held once the pass is over (persist/handoff.py)."""

from __future__ import annotations

import asyncio
import queue
import threading

from colony.persist.handoff import HandOff


def _drain(target: queue.SimpleQueue[int]) -> list[int]:
    out: list[int] = []
    while not target.empty():
        out.append(target.get_nowait())
    return out


async def test_what_one_pass_of_the_loop_hands_over_reaches_the_queue_together_at_the_next() -> (
    None
):
    target: queue.SimpleQueue[int] = queue.SimpleQueue()
    hand = HandOff(target)
    for n in range(3):
        hand.put(n)
    assert target.empty()  # held until the loop's next pass
    await asyncio.sleep(0)
    assert _drain(target) == [0, 1, 2]
    hand.put(3)
    await asyncio.sleep(0)
    assert _drain(target) == [3]


def test_without_a_running_loop_every_item_is_put_at_once() -> None:
    target: queue.SimpleQueue[int] = queue.SimpleQueue()
    hand = HandOff(target)
    hand.put(1)
    assert _drain(target) == [1]
    seen: list[int] = []

    def from_a_thread() -> None:
        hand.put(2)
        seen.extend(_drain(target))

    thread = threading.Thread(target=from_a_thread)
    thread.start()
    thread.join()
    assert seen == [2]


def test_items_held_for_a_loop_that_ended_are_handed_over_by_the_next_put_in_order() -> None:
    target: queue.SimpleQueue[int] = queue.SimpleQueue()
    hand = HandOff(target)

    def put_and_leave() -> None:
        hand.put(1)
        hand.put(2)

    loop = asyncio.new_event_loop()
    loop.call_soon(put_and_leave)
    loop.call_soon(loop.stop)  # the loop ends before its next pass
    loop.run_forever()
    loop.close()
    assert _drain(target) == []
    asyncio.run(_put(hand, 3))
    assert _drain(target) == [1, 2, 3]


async def _put(hand: HandOff[int], item: int) -> None:
    hand.put(item)
    await asyncio.sleep(0)
