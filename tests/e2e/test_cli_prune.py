"""``meclaw prune --root DIR [--dry-run]``: what it prints, that a dry run deletes nothing,
that colony.json retention decides, and that it prunes beside a running daemon."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from colony.effects import LogRow
from colony.envelope import source_message
from colony.ids import now_ms
from colony.persist.db import ColonyDb
from colony.persist.prune import DAY_MS
from tests.conftest import TreeFactory, hive
from tests.e2e.test_cli_commands import invoke
from tests.e2e.test_cli_daemon import start, wait_for_line

MECLAW = str(Path(sys.executable).with_name("meclaw"))
BODY = {"messages": [{"origin": "user", "type": "text", "text": "ping"}]}


def _with_rows(root: Path, ages_days: list[float]) -> Path:
    db = ColonyDb(root / "colony.db")
    rows = []
    for age in ages_days:
        at = int(now_ms() - age * DAY_MS)
        m = source_message("/a", BODY)
        m.created_at = at // 1000
        rows.append(LogRow(m, "/", "/a", 5, at))
    db.write(rows)
    db.close()
    return root


def _log_rows(root: Path) -> int:
    with sqlite3.connect(root / "colony.db") as conn:
        return int(conn.execute("SELECT count(*) FROM message_log").fetchone()[0])


def test_prune_deletes_the_rows_past_retention_and_prints_a_line_per_record(
    make_tree: TreeFactory,
) -> None:
    root = _with_rows(make_tree({"main/config.json": hive()}), [30, 20, 1, 0])
    code, out, err = invoke("prune", "--root", str(root))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["message_log", "2", "rows", "deleted"]
    assert [line.split()[0] for line in lines[:4]] == [
        "message_log",
        "handling",
        "dead_letters",
        "ingress_keys",
    ]
    assert "message_log_days 14" in lines[-1]
    assert _log_rows(root) == 2


def test_a_dry_run_says_what_would_go_and_deletes_nothing(make_tree: TreeFactory) -> None:
    root = _with_rows(make_tree({"main/config.json": hive()}), [30, 20, 1, 0])
    code, out, _ = invoke("prune", "--root", str(root), "--dry-run")
    assert code == 0
    assert out.splitlines()[0].split() == ["message_log", "2", "rows", "would", "be", "deleted"]
    assert "nothing deleted" in out
    assert _log_rows(root) == 4


def test_colony_json_retention_decides_what_prune_deletes(make_tree: TreeFactory) -> None:
    root = make_tree(
        {"main/config.json": hive(), "colony.json": {"retention": {"message_log_days": 0}}}
    )
    _with_rows(root, [30, 20, 1, 0])
    code, out, _ = invoke("prune", "--root", str(root))
    assert code == 0
    assert out.splitlines()[0].split()[1] == "0"
    assert _log_rows(root) == 4


def test_prune_of_a_root_with_an_invalid_colony_json_is_refused_with_the_fix(
    make_tree: TreeFactory,
) -> None:
    root = _with_rows(make_tree({"main/config.json": hive()}), [30])
    (root / "colony.json").write_text(json.dumps({"retention": {"message_log_days": -1}}))
    code, _, err = invoke("prune", "--root", str(root))
    assert code == 1
    assert "colony.json is invalid" in err
    assert "--validate" in err


def test_prune_of_a_root_without_a_database_says_so(make_tree: TreeFactory) -> None:
    root = make_tree({"main/config.json": hive()})
    code, _, err = invoke("prune", "--root", str(root))
    assert code == 2
    assert "no colony.db" in err


def test_prune_works_beside_a_running_daemon(make_tree: TreeFactory) -> None:
    root = _with_rows(make_tree({"main/config.json": hive()}), [30, 20, 0])
    daemon = start(root)
    try:
        wait_for_line(daemon, "colony running")
        done = subprocess.run(
            [MECLAW, "prune", "--root", str(root)], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[0].split()[1] == "2"
    finally:
        daemon.terminate()
        daemon.communicate(timeout=30)
    assert _log_rows(root) == 1
