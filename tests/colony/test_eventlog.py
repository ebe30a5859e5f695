"""Events read back from the record for a watcher that resumes (``Last-Event-ID``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from colony import eventlog
from colony.effects import LogRow
from colony.envelope import source_message
from colony.events import Interest
from colony.persist.db import ColonyDb


async def test_a_cell_filter_is_applied_before_the_limit_and_the_loss_counts_its_matches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(eventlog, "REPLAY_MAX", 3)
    db = ColonyDb(tmp_path / "colony.db")
    try:
        rows = []
        for n in range(20):
            to = "/a/b" if n % 5 == 0 else ("/a/bc" if n % 5 == 1 else "/x")
            rows.append(LogRow(source_message(to, {}), "@external", to, 9, 1000 + n))
        db.write(rows)
        await db.flush()
        source = db.source
        wanted = Interest(cell="/a/b", kinds=frozenset({"route"}))
        events, left_out = eventlog.recorded(source, 1000, wanted)
        assert [e.data["to"] for e in events] == ["/a/b"] * 3  # not /a/bc: another subtree
        assert left_out == 1  # four went to /a/b; the newest three are sent
        assert [e.at_ms for e in events] == [1005, 1010, 1015]
        later, none_lost = eventlog.recorded(source, 1011, wanted)
        assert ([e.at_ms for e in later], none_lost) == ([1015], 0)
    finally:
        db.close()


def test_an_event_id_names_its_millisecond_and_a_foreign_one_names_none() -> None:
    assert eventlog.since_ms("1796525156915-366") == 1796525156915
    assert eventlog.since_ms("1796525156915-0") == 1796525156915
    for foreign in (None, "", "abc", "-5", "١٢٣-1", "9" * 40):
        assert eventlog.since_ms(foreign) is None
