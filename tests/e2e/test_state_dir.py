"""``meclaw --state-dir DIR``: a colony run writes nothing into its tree.

The tree is the loop-turn topology (code cells running script files from the tree, one of them
importing a module beside it; an llm brain keeping its transcript in sqlite) plus a store with
a seed file and a timer. Each run is checked against a snapshot of the tree (every path, its
kind, size and mtime, folders included: a file made and removed again changes its folder's
mtime). The daemon runs once more in a mount namespace where the tree is bind-mounted read-only,
when this machine allows one (the test says so when it cannot: root ignores file modes, so a
chmod proves nothing here).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from colony.testing import ColonyHarness, ScriptedAnthropic, anthropic_text, anthropic_tool_use
from scripted.telegram import ScriptedTelegram
from tests.cells.proxy.test_proxy import TOKEN, bot_tree
from tests.conftest import FIXTURES, TreeFactory, cell
from tests.processes import eventually

MECLAW = str(Path(sys.executable).with_name("meclaw"))
LOOP_TURN = FIXTURES / "trees" / "loop-turn"
QUESTION = {"messages": [{"origin": "user", "type": "text", "text": "Add 2 and 3."}]}
NOTE = {
    "messages": [
        {
            "origin": "assistant",
            "type": "tool_call",
            "id": "call-1",
            "text": json.dumps(
                {"operation": "insert", "table": "notes", "row": {"text": "written at run time"}}
            ),
        }
    ]
}
SCRIPT = [
    anthropic_tool_use([("toolu_a", "calc", {"numbers": [2, 3]})], text="Summing."),
    anthropic_text("The total is 5."),
]

Snapshot = dict[str, tuple[str, int, int]]


def snapshot(root: Path) -> Snapshot:
    """Every path under ``root`` (and ``root``): kind, size, mtime in ns."""
    found: Snapshot = {}
    for path in [root, *sorted(root.rglob("*"))]:
        info = path.lstat()
        kind = "dir" if path.is_dir() else "file"
        found[str(path.relative_to(root))] = (kind, info.st_size, info.st_mtime_ns)
    return found


def state_tree(root: Path, model_url: str, *, sink: bool = False) -> Path:
    """The loop-turn tree with a sqlite transcript, a seeded store, a timer, and a code cell
    whose script imports a module beside it (Python would cache its bytecode there); with
    ``sink``, a cell at ``/sink`` that takes the answer (the harness captures it instead)."""
    shutil.copytree(LOOP_TURN, root)
    if sink:
        (root / "main" / "sink").mkdir()
        (root / "main" / "sink" / "config.json").write_text(json.dumps(cell("code")))
    brain = root / "main" / "brain" / "config.json"
    doc = json.loads(brain.read_text())
    doc["params"]["transcript"] = {"store": "sqlite"}
    doc["params"]["base_url"] = model_url
    brain.write_text(json.dumps(doc))
    hive = root / "main" / "config.json"
    doc = json.loads(hive.read_text())
    edges = doc["params"]["graph"]["edges"]
    edges[0]["condition"] = "!has(hop.to)"  # . -> ./prep: the question
    for name in ("memory", "helper"):
        edges.append(
            {"from": ".", "to": f"./{name}", "condition": f"has(hop.to) && hop.to == '{name}'"}
        )
    edges.append({"from": "./tick", "to": "./helper"})
    hive.write_text(json.dumps(doc))
    memory = root / "main" / "memory"
    (memory / "seed").mkdir(parents=True)
    (memory / "config.json").write_text(
        json.dumps(cell("store", {"schema": {"notes": {"text": "text"}}}))
    )
    (memory / "seed" / "notes.jsonl").write_text(
        '{"schema": {"text": "text"}}\n{"text": "from the seed"}\n'
    )
    (root / "main" / "tick").mkdir()
    (root / "main" / "tick" / "config.json").write_text(json.dumps(cell("timer")))
    helper = root / "main" / "helper"
    helper.mkdir()
    (helper / "config.json").write_text(
        json.dumps(cell("code", {"runner": "python3", "script": "run.py"}))
    )
    (helper / "run.py").write_text("import helpmod\nprint(helpmod.ANSWER)\n")
    (helper / "helpmod.py").write_text("ANSWER = '[]'\n")
    return root


def sqlite_rows(file: Path, sql: str) -> list[Any]:
    conn = sqlite3.connect(f"file:{file}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def assert_state_holds_the_run(state: Path, *, leased: bool) -> None:
    assert (state / "colony.db").is_file()
    assert (state / "colony.db-lease").is_file() == leased  # the harness takes no lease
    brain = state / "cells" / "brain" / "cell.db"
    assert sqlite_rows(brain, "SELECT count(*) FROM sqlite_master WHERE type = 'table'")[0][0] > 0
    assert (state / "cells" / "tick" / "cell.db").is_file()
    assert not (state / "cells" / "helper").exists()  # a code cell keeps no file
    stored = sqlite_rows(state / "colony.db", 'SELECT text FROM "/memory:notes" ORDER BY rowid')
    assert stored == [("from the seed",), ("written at run time",)]


@pytest.fixture(autouse=True)
def bytecode_caches_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Python as it runs by default, writing bytecode caches (the suite may run with
    PYTHONDONTWRITEBYTECODE set, which would hide a cache written into the tree)."""
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)


async def test_a_harness_colony_with_a_state_dir_writes_nothing_into_its_tree(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    async with ScriptedAnthropic(SCRIPT) as model:
        tree = state_tree(tmp_path / "work" / "colony", model.url)
        before = snapshot(tree)
        async with ColonyHarness(
            LOOP_TURN, workdir=tmp_path / "work", state_dir=state, capture=["/sink"]
        ) as colony:
            assert colony.state.path == state
            await colony.send("/", QUESTION)
            await colony.send("/", NOTE, hop={"to": "memory"})
            await colony.send("/", QUESTION, hop={"to": "helper"})
            await colony.settle(timeout=60)
            [answer] = colony.captured("/sink")
            assert answer.body["text"] == "The total is 5."
            assert [r["text"] for r in colony.rows("/memory", "notes")] == [
                "from the seed",
                "written at run time",
            ]
    assert snapshot(tree) == before
    assert_state_holds_the_run(state, leased=False)


@pytest.mark.sqlite_only  # a cluster proxy keeps its state in the cluster database
async def test_a_proxy_keeps_its_cell_db_in_the_state_dir(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    async with ScriptedTelegram(token=TOKEN) as telegram:
        tree = make_tree(bot_tree(telegram))
        async with ColonyHarness(
            tree, capture=["/sink"], env={"TELEGRAM_BOT_TOKEN": TOKEN}, state_dir=state
        ) as colony:
            own = state / "cells" / "proxy" / "cell.db"
            assert await eventually(own.exists, within=10)
            assert colony.colony.runners["/proxy"].spec.state == own.parent
            assert sorted(p.name for p in (colony.root / "main" / "proxy").iterdir()) == [
                "config.json"
            ]


# -- the daemon, as an operator runs it ----------------------------------------------------


def mount_read_only_prefix(tmp_path: Path) -> list[str] | None:
    """A command prefix that runs a program with its first argument's folder bind-mounted
    read-only in a mount namespace of its own; None when this machine refuses one."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return None
    probe = tmp_path / "mount-probe"
    probe.mkdir()
    prefix = ["unshare", "-rm", "sh", "-c", 'mount --bind -o ro "$0" "$0" && exec "${@}"']
    done = subprocess.run(
        [*prefix, str(probe), "sh", "-c", 'touch "$0/x"', str(probe)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if "Read-only file system" not in done.stderr or (probe / "x").exists():
        return None
    return prefix


async def read_until(stream: asyncio.StreamReader, needle: str, seen: list[str]) -> str:
    async with asyncio.timeout(30):
        while True:
            line = (await stream.readline()).decode()
            if not line:
                raise AssertionError(f"never saw {needle!r}; stderr: {''.join(seen)}")
            seen.append(line)
            if needle in line:
                return line


@contextlib.asynccontextmanager
async def daemon(tree: Path, state: Path, prefix: list[str]) -> AsyncIterator[str]:
    """``meclaw --root TREE --state-dir STATE --api 127.0.0.1:0`` (under ``prefix``); yields
    its API's URL, then stops it with SIGTERM and checks that it exited 0."""
    argv = [MECLAW, "--root", str(tree), "--state-dir", str(state), "--api", "127.0.0.1:0"]
    if prefix:
        argv = [*prefix, str(tree), *argv]
    process = await asyncio.create_subprocess_exec(
        *argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert process.stderr is not None
    seen: list[str] = []
    try:
        line = await read_until(process.stderr, "HTTP API on ", seen)
        url = line.split("HTTP API on ", 1)[1].strip()
        await read_until(process.stderr, "colony running", seen)
        yield url
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        rest = await asyncio.wait_for(process.stderr.read(), 30)
        code = await asyncio.wait_for(process.wait(), 30)
    assert code == 0, "".join(seen) + rest.decode()
    assert "Traceback" not in "".join(seen) + rest.decode()


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def meclaw(*args: str) -> subprocess.CompletedProcess[str]:
    return run(MECLAW, *args)


@pytest.mark.parametrize("mounted", [False, True], ids=["snapshot", "read-only mount"])
async def test_a_daemon_with_a_state_dir_writes_nothing_into_its_tree_and_commands_find_its_state(
    tmp_path: Path, mounted: bool
) -> None:
    prefix: list[str] = []
    if mounted:
        found = mount_read_only_prefix(tmp_path)
        if found is None:
            pytest.skip(
                "NOT TESTED: this machine cannot bind-mount the tree read-only in a mount "
                "namespace (unshare -rm); the snapshot variant still checks the tree"
            )
        prefix = found
    state = tmp_path / "state"
    async with ScriptedAnthropic(SCRIPT) as model:
        tree = state_tree(tmp_path / "tree", model.url, sink=True)
        before = snapshot(tree)
        async with daemon(tree, state, prefix) as url, httpx.AsyncClient(base_url=url) as api:
            posted = await api.post("/messages", json={"target": "/", "body": QUESTION, "ttl": 64})
            assert posted.status_code == 202, posted.text
            trace = posted.json()["trace_id"]
            stored = await api.post(
                "/messages", json={"target": "/", "body": NOTE, "hop": {"to": "memory"}}
            )
            assert stored.status_code == 202, stored.text
            ran = await api.post(
                "/messages", json={"target": "/", "body": QUESTION, "hop": {"to": "helper"}}
            )
            assert ran.status_code == 202, ran.text
            async with asyncio.timeout(60):
                while True:  # until the answer reaches /sink, and the store's reply dies
                    hops = await api.get("/colony/trace", params={"trace_id": trace})
                    letters = (await api.get("/colony/dead_letters")).json()["dead_letters"]
                    if letters and any(r["to_path"] == "/sink" for r in hops.json()["trace"]):
                        break
                    await asyncio.sleep(0.05)
            running = await asyncio.to_thread(
                meclaw, "cells", "--root", str(tree), "--state-dir", str(state), "--json"
            )
            assert running.returncode == 0, running.stderr
            assert "/brain" in {json.loads(line)["path"] for line in running.stdout.splitlines()}
        assert len(model.requests) == 2
    assert snapshot(tree) == before
    assert_state_holds_the_run(state, leased=True)
    if mounted:  # the control: the mount is real, and without --state-dir the refusal is clear
        alone = run(*prefix, str(tree), MECLAW, "--root", str(tree), "--daemon")
        assert alone.returncode == 2, alone.stderr
        assert f"meclaw: --root {tree}: cannot write there" in alone.stderr
        assert "give --state-dir DIR" in alone.stderr
    events = [json.loads(line)["event"] for line in (state / "log.jsonl").read_text().splitlines()]
    assert "colony_started" in events
    assert events[-1] == "colony_stopped"

    listed = meclaw("dead-letters", "--root", str(tree), "--state-dir", str(state), "--json")
    assert listed.returncode == 0, listed.stderr
    [letter] = [json.loads(line) for line in listed.stdout.splitlines()]
    assert (letter["sender_path"], letter["error_code"]) == ("/memory", "no_route")
    passed_down = meclaw("--state-dir", str(state), "dead-letters", "--root", str(tree), "--json")
    assert passed_down.stdout == listed.stdout
    shown = meclaw("dead-letters", "show", str(letter["id"]), "--root", str(tree),
                   "--state-dir", str(state))  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    traced = meclaw("trace", trace, "--root", str(tree), "--state-dir", str(state), "--json")
    assert traced.returncode == 0, traced.stderr
    assert "/sink" in {hop["to_path"] for hop in json.loads(traced.stdout)["trace"]}
    stopped = meclaw("watch", "--root", str(tree), "--state-dir", str(state))
    assert stopped.returncode == 1
    assert f"no daemon is running on {tree} --state-dir {state}" in stopped.stderr
    revived = meclaw("cells", "revive", "/brain", "--root", str(tree), "--state-dir", str(state))
    assert revived.returncode == 0, revived.stderr  # offline: colony.db and the lease in STATE
    assert "/brain is not failed" in revived.stdout
    without = meclaw("dead-letters", "--root", str(tree))
    assert without.returncode == 2
    assert "no colony.db" in without.stderr
    assert snapshot(tree) == before


def test_validate_with_a_state_dir_reads_the_state_dirs_colony_db_and_writes_nothing(
    tmp_path: Path,
) -> None:
    tree = state_tree(tmp_path / "tree", "http://127.0.0.1:9/v1")
    before = snapshot(tree)
    state = tmp_path / "state"
    fine = meclaw("--root", str(tree), "--state-dir", str(state), "--validate")
    assert fine.returncode == 0, fine.stderr
    assert not state.exists()  # nothing made, not even the state folder
    state.mkdir()
    (state / "colony.db").write_text("not a database, but long enough to have a header " * 4)
    garbage = meclaw("--root", str(tree), "--state-dir", str(state), "--validate")
    assert garbage.returncode == 1
    assert "colony_db_unusable" in garbage.stderr
    assert str(state / "colony.db") in garbage.stderr
    assert meclaw("--root", str(tree), "--validate").returncode == 0  # the tree has none
    assert snapshot(tree) == before
    assert sorted(p.name for p in state.iterdir()) == ["colony.db"]


@pytest.mark.parametrize(
    ("name", "says"),
    [("file", "not a folder"), ("file/state", "cannot write there")],
    ids=["a file", "below a file"],
)
def test_a_state_dir_that_cannot_hold_the_state_is_a_usage_error(
    tmp_path: Path, name: str, says: str
) -> None:
    tree = state_tree(tmp_path / "tree", "http://127.0.0.1:9/v1")
    (tmp_path / "file").write_text("")
    target = tmp_path / name
    done = meclaw("--root", str(tree), "--state-dir", str(target), "--daemon")
    assert done.returncode == 2
    assert f"meclaw: --state-dir {target}: {says}" in done.stderr
    assert "Traceback" not in done.stderr
    assert not os.path.exists(tree / "colony.db")
