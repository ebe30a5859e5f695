"""Load: many conversations at once through the store-backed tool loop, nothing lost or doubled.

Sized for ``make test`` (50 conversations, two tools per round, three rounds: ~200 model calls
and ~4,400 routing decisions). ``make soak`` runs 1,000 and 10,000 through ``bench/load.py``.
"""

from __future__ import annotations

from colony.load import run_load


async def test_fifty_concurrent_conversations_complete_with_no_loss_and_no_duplicate() -> None:
    result = await run_load(50, rounds=3, tools=2, timeout=240)
    assert result.lost == []
    assert result.duplicated == []
    assert result.wrong == []  # no answer crossed into another conversation
    assert result.bad_threads == []  # every thread holds user + 3 x (assistant + 2 results)
    assert result.dead_letters == 0
    assert result.watchdog_reports == 0  # no cell stopped draining, nobody waited in a cycle
    assert result.answered == 50
    assert result.model_calls == 50 * 4  # three tool rounds and the answer, exactly once each
    assert result.ok
