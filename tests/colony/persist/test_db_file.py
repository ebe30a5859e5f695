"""colony.db itself: deleted or replaced under a running colony it is noticed and ingress
stops (issue 15, item 19); a damaged one at boot is named with its fix (item 18)."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from colony.persist import health
from colony.persist.db import ColonyDb, StorageUnavailable
from colony.persist.schema import ColonyDbError, probe
from colony.testing import ColonyHarness
from tests.conftest import TreeFactory, hive

pytestmark = pytest.mark.sqlite_only  # colony.db deleted or replaced under the daemon

BODY = {"messages": [{"origin": "user", "type": "text", "text": "hi"}]}


async def _until(condition: Any, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("how", ["deleted", "replaced"])
async def test_colony_db_deleted_or_replaced_under_a_running_colony_stops_ingress_loudly(
    make_tree: TreeFactory,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    how: str,
) -> None:
    monkeypatch.setattr(health, "CHECK_S", 0.02)
    tree = make_tree({"main/config.json": hive({"from": ".", "to": "/box"})})
    async with ColonyHarness(tree, capture=["/box"]) as harness:
        colony = harness.colony
        await harness.send("/", BODY)
        await harness.settle()
        db = harness.root / "colony.db"
        if how == "deleted":
            for suffix in ("", "-wal", "-shm"):
                db.with_name(db.name + suffix).unlink(missing_ok=True)
        else:
            shutil.copy(db, harness.root / "other.db")
            (harness.root / "other.db").replace(db)
        await _until(lambda: colony.admission() is not None)
        refusal = colony.admission()
        assert refusal is not None
        assert (refusal.status, refusal.token) == (503, "storage_unavailable")
        assert f"was {how}" in refusal.detail
        written = colony.db.statistics().rows_written
        with pytest.raises(StorageUnavailable):
            await harness.colony.send(harness_message())
        await colony.db.flush()
        assert colony.db.statistics().rows_written == written  # nothing into a lost file
        await asyncio.sleep(0.1)  # several more checks: still one report
        (line,) = harness.logs("colony_db_lost", "error")
        assert "restore colony.db" in line["error"]
    said = [line for line in capsys.readouterr().err.splitlines() if f"was {how}" in line]
    assert len(said) == 1


def harness_message() -> Any:
    from colony.envelope import source_message

    return source_message("/", BODY)


# -- a damaged colony.db at boot --------------------------------------------------------------


def _good_db(path: Path) -> Path:
    ColonyDb(path).close()
    return path


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (lambda p: p.write_bytes(b"this is not a database at all" * 10), "not a SQLite database"),
        (lambda p: p.write_bytes(_good_db(p).read_bytes()[:5000]), "truncated"),
        (lambda p: p.mkdir(), "is a directory"),
        (
            lambda p: sqlite3.connect(p).execute("CREATE TABLE notes(x)").connection.commit(),
            "no meta table",
        ),
    ],
    ids=["garbage", "truncated", "directory", "foreign"],
)
def test_a_damaged_colony_db_is_named_with_what_is_wrong_and_the_fix(
    tmp_path: Path, damage: Any, says: str
) -> None:
    path = tmp_path / "colony.db"
    damage(path)
    problem = probe(path)
    assert problem is not None
    assert says in problem
    with pytest.raises(ColonyDbError) as refused:
        ColonyDb(path)
    assert str(refused.value).startswith(f"{path}: ")
    assert says in str(refused.value)
    assert "move it aside" in str(refused.value)


def test_probe_passes_an_absent_empty_or_good_colony_db_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "colony.db"
    assert probe(path) is None
    assert not path.exists()
    path.touch()
    assert probe(path) is None
    path.unlink()
    _good_db(path)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert probe(path) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == before
