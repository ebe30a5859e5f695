"""``meclaw backup``: an online copy of colony.db, taken while the colony routes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from colony.backup import BackupRefused, backup_colony_db
from colony.testing import ColonyHarness
from tests.conformance.cells import user
from tests.conftest import TreeFactory, hive

MECLAW = str(Path(sys.executable).with_name("meclaw"))


def meclaw(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MECLAW, *args], capture_output=True, text=True, timeout=60, check=False)


def routed_rows(db: Path) -> int:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        return int(conn.execute("SELECT count(*) FROM message_log").fetchone()[0])


async def routed_once(make_tree: TreeFactory, tmp_path: Path) -> tuple[Path, int]:
    """A stopped colony that routed one message: its root and its message-log rows."""
    tree = make_tree({"main/config.json": hive({"from": ".", "to": "/sink"})})
    async with ColonyHarness(tree, capture=["/sink"], workdir=tmp_path / "work") as colony:
        await colony.send("/", user())
        await colony.settle()
        return colony.root, len(await colony.message_log())


@pytest.mark.sqlite_only
async def test_a_backup_taken_while_the_colony_routes_is_whole_and_holds_the_rows(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    tree = make_tree({"main/config.json": hive({"from": ".", "to": "/sink"})})
    async with ColonyHarness(tree, capture=["/sink"]) as colony:
        for _ in range(50):
            await colony.send("/", user())
        await colony.settle()
        stop = asyncio.Event()

        async def keep_routing() -> int:
            sent = 0
            while not stop.is_set():
                await colony.send("/", user())
                sent += 1
                await asyncio.sleep(0)
            return sent

        routing = asyncio.create_task(keep_routing())
        await asyncio.sleep(0.2)
        copies = []
        (tmp_path / "backups").mkdir()
        for n in range(3):  # each while hand-offs commit
            copies.append(tmp_path / "backups" / f"copy{n}.db")
            done = await asyncio.to_thread(backup_colony_db, colony.root, copies[-1])
            assert done.pages > 0
        stop.set()
        sent = await routing
        await colony.settle()
        live = len(await colony.message_log())
    assert sent > 0
    counts = [routed_rows(copy) for copy in copies]
    assert counts == sorted(counts)
    assert counts[0] >= 50
    assert counts[-1] <= live
    # one file each (no -wal beside it), and no partial file left over
    assert sorted(await asyncio.to_thread(lambda: list((tmp_path / "backups").iterdir()))) == copies


@pytest.mark.sqlite_only
async def test_the_cli_backs_up_a_stopped_colony_and_never_overwrites(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    root, live = await routed_once(make_tree, tmp_path)
    out = tmp_path / "colony-backup.db"
    done = meclaw("backup", "--root", str(root), str(out))
    assert done.returncode == 0, done.stderr
    assert f"to {out}" in done.stdout
    assert routed_rows(out) == live > 0
    assert out.stat().st_mode & 0o777 == 0o600  # it holds every message: its owner's alone
    again = meclaw("backup", "--root", str(root), str(out))
    assert again.returncode == 1
    assert f"{out} exists" in again.stderr


def test_a_root_without_colony_db_is_refused_with_the_reason(tmp_path: Path) -> None:
    done = meclaw("backup", "--root", str(tmp_path), str(tmp_path / "out.db"))
    assert done.returncode == 1
    assert "no colony.db" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.sqlite_only
async def test_a_copy_that_cannot_be_written_is_refused_with_the_reason_not_a_bug_report(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    root, _ = await routed_once(make_tree, tmp_path)
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    for out in ("/proc/no-backups-here.db", str(tmp_path / "a-file" / "x.db")):
        done = meclaw("backup", "--root", str(root), out)
        assert done.returncode == 1, done.stderr
        assert "backup:" in done.stderr
        assert "bug in meclaw" not in done.stderr
        assert "Traceback" not in done.stderr


def test_a_cluster_colony_is_refused_and_pointed_at_pg_dump(tmp_path: Path) -> None:
    (tmp_path / "colony.json").write_text(
        json.dumps({"cluster": {"dsn": "postgresql://db.invalid/colony"}}), encoding="utf-8"
    )
    with pytest.raises(BackupRefused, match="pg_dump"):
        backup_colony_db(tmp_path, tmp_path / "out.db")
