"""colony.shielded.run_to_end: work begun runs to its end, however often its caller is
cancelled."""

from __future__ import annotations

import asyncio
import gc

import pytest

from colony.shielded import run_to_end


async def test_the_result_and_an_exception_of_the_work_reach_the_caller() -> None:
    async def answer() -> int:
        return 42

    async def fail() -> int:
        raise ValueError("no")

    assert await run_to_end(asyncio.ensure_future(answer())) == 42
    with pytest.raises(ValueError, match="no"):
        await run_to_end(asyncio.ensure_future(fail()))


async def test_a_caller_cancelled_twice_still_waits_for_the_work_then_is_cancelled() -> None:
    release = asyncio.Event()
    ended: list[str] = []

    async def work() -> str:
        await release.wait()
        ended.append("work")
        return "done"

    job = asyncio.ensure_future(work())
    caller = asyncio.create_task(run_to_end(job))
    await asyncio.sleep(0)
    caller.cancel()
    await asyncio.sleep(0.01)
    caller.cancel()  # a second cancellation (a stop on top of the backstop)
    await asyncio.sleep(0.01)
    assert not caller.done()  # still waiting for the work
    assert not job.cancelled()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert ended == ["work"]
    assert job.result() == "done"


async def test_the_exception_of_work_whose_caller_is_gone_is_not_reported_as_unseen(
    recwarn: pytest.WarningsRecorder,
) -> None:
    release = asyncio.Event()
    unseen: list[object] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: unseen.append(ctx))

    async def work() -> None:
        await release.wait()
        raise OSError("disk gone")

    job = asyncio.ensure_future(work())
    caller = asyncio.create_task(run_to_end(job))
    await asyncio.sleep(0)
    caller.cancel()
    await asyncio.sleep(0)
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await caller
    del job, caller
    gc.collect()
    assert unseen == []
