"""Load: many conversations at once through the store-backed tool loop, nothing lost or doubled.

Sized for ``make test`` (50 conversations, two tools per round, three rounds: ~200 model calls
and ~4,400 routing decisions). ``make soak`` runs 1,000 and 10,000 through ``bench/load.py``.
"""

from __future__ import annotations

import pytest

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


@pytest.mark.sqlite_only  # the load driver watches colony.db
async def test_a_failed_load_run_names_the_code_and_cell_of_its_dead_letters() -> None:
    # A TTL far too small for the loop: every conversation dies of it, and the report must say
    # of what (a bare count once sent a 10,000 run's reader hunting for the cause).
    result = await run_load(3, rounds=1, tools=1, timeout=120, colony={"message_default_ttl": 4})
    assert result.dead_letters > 0
    assert not result.ok
    [line] = [f for f in result.failures() if f.startswith("dead letters")]
    assert result.dead_letter_kinds
    assert result.dead_letter_kinds[0] in line
