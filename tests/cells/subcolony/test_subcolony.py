"""The subcolony cell in a real parent colony: a real child colony (the subcolony-echo tree) for
the reply path, and a small stand-in child (``fake_child.py``) for what a real one does not do
on demand (die, stall, refuse, speak another protocol)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from cells import BUILTIN_CELL_TYPES, implemented_cell_types
from colony.cell import param_checks
from colony.config.diagnostics import Severity
from colony.config.loader import load_tree
from colony.testing import ColonyHarness
from tests.conftest import CONTRACT, FIXTURES, TreeFactory, cell, hive
from tests.processes import alive

ECHO_TREE = FIXTURES / "trees" / "subcolony-echo"
FAKE = Path(__file__).with_name("fake_child.py")


def user(text: str) -> dict[str, Any]:
    return {"messages": [{"origin": "user", "type": "text", "text": text}]}


def parent_tree(**params: Any) -> dict[str, Any]:
    return {
        "main/config.json": hive({"from": "./child", "to": "/sink"}),
        "main/child/config.json": {
            "cell": {"type": "subcolony"},
            "params": params,
            "contract": CONTRACT,
        },
    }


@pytest.fixture
def fake(tmp_path: Path) -> dict[str, Any]:
    """Params that start the stand-in child (an executable script on this Python)."""
    program = tmp_path / "fake-child"
    program.write_text(f"#!{sys.executable}\n" + FAKE.read_text(encoding="utf-8"))
    program.chmod(0o755)
    root = tmp_path / "fake-root"
    root.mkdir()
    return {"root": str(root), "command": str(program), "kill_grace_ms": 500}


def seen(message: Any) -> dict[str, Any]:
    """What the stand-in child reported seeing."""
    result: dict[str, Any] = json.loads(message.body["messages"][0]["text"])
    return result


async def until(predicate: Any, within: float = 10) -> None:
    """Poll ``predicate``: a restart and a child's own frame leave no event to await."""
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.05)


# -- a real child colony --------------------------------------------------------------------------


async def test_a_real_child_colony_behaves_as_one_cell_in_the_parent_tree(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    child_root = tmp_path / "child-tree"
    shutil.copytree(ECHO_TREE, child_root)
    tree = parent_tree(root=str(child_root), kill_grace_ms=2000)
    async with ColonyHarness(make_tree(tree), capture=["/sink"]) as colony:
        trace = "0190a3f2-0000-7000-8000-0000000000aa"
        await colony.send("/child", user("hello"), trace_id=trace)
        await colony.settle()
        [reply] = colony.captured("/sink")
    assert reply.headers.hop == {"subcolony_event": "reply"}
    assert reply.body["messages"][0]["text"] == "child-colony saw: hello"
    assert reply.trace_id == trace
    assert "finish_reason" not in reply.headers.hop
    assert (child_root / "colony.db").exists()  # the child keeps its own record


async def test_with_the_parent_on_a_state_dir_the_child_keeps_its_state_there_too(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    child_root = tmp_path / "child-tree"
    shutil.copytree(ECHO_TREE, child_root)
    before = sorted(p.relative_to(child_root) for p in child_root.rglob("*"))
    state = tmp_path / "state"
    tree = parent_tree(root=str(child_root), kill_grace_ms=2000)
    async with ColonyHarness(make_tree(tree), capture=["/sink"], state_dir=state) as colony:
        await colony.send("/child", user("hello"))
        await colony.settle()
        [reply] = colony.captured("/sink")
    assert reply.body["messages"][0]["text"] == "child-colony saw: hello"
    assert sorted(p.relative_to(child_root) for p in child_root.rglob("*")) == before
    kept = {p.name for p in state.rglob("*")}
    assert {"child", "colony.db"} <= kept  # the child's record, under the cell's state folder
    assert any(p.name == "colony.db" and "child" in p.parent.parts for p in state.rglob("*"))


def descendants() -> set[int]:
    """Live processes below this one (from /proc), whatever their process group."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if state != "Z":
            parents[int(entry.name)] = int(ppid)
    found: set[int] = set()
    frontier = {os.getpid()}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= frontier
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="lists processes via /proc")
async def test_no_process_of_a_real_child_colony_outlives_the_cell(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    child_root = tmp_path / "child-tree"
    shutil.copytree(ECHO_TREE, child_root)
    before = descendants()
    tree = parent_tree(root=str(child_root), kill_grace_ms=2000)
    async with ColonyHarness(make_tree(tree), capture=["/sink"]) as colony:
        await colony.send("/child", user("hello"))
        await colony.settle()
        [reply] = colony.captured("/sink")
        started = descendants() - before
    assert reply.body["messages"][0]["text"] == "child-colony saw: hello"
    assert len(started) >= 2  # the child colony and its code cell's worker(s)
    assert [pid for pid in started if alive(pid)] == []


async def test_a_path_inside_the_child_tree_is_not_routable_from_the_parent(
    make_tree: TreeFactory, fake: dict[str, Any]
) -> None:
    async with ColonyHarness(make_tree(parent_tree(**fake)), capture=["/sink"]) as colony:
        await colony.send("/child/echo", user("hello"))
        await colony.settle()
        letters = await colony.dead_letters()
        assert colony.captured("/sink") == []
        await colony.send("/child", user("then this"))
        await colony.settle()
        [reply] = colony.captured("/sink")
    assert [(d.error_code, d.original_target) for d in letters] == [
        ("unresolved_path", "/child/echo")
    ]
    assert seen(reply)["frames"] == 1  # the child was sent the second message only


async def test_stopping_sends_sigterm_then_sigkill_after_kill_grace_ms_to_a_stubborn_child(
    make_tree: TreeFactory, fake: dict[str, Any]
) -> None:
    tree = parent_tree(**{**fake, "kill_grace_ms": 300}, env={"FAKE_MODE": "stubborn"})
    before = descendants()
    async with ColonyHarness(make_tree(tree), capture=["/sink"]) as colony:
        await colony.send("/child", user("hi"))
        await colony.settle()
        [reply] = colony.captured("/sink")
        started = descendants() - before
        stopping = asyncio.get_running_loop().time()
    took = asyncio.get_running_loop().time() - stopping
    assert seen(reply)["pid"] in started
    assert (Path(fake["root"]) / "got-sigterm").exists()  # SIGTERM came first
    assert [pid for pid in started if alive(pid)] == []  # then SIGKILL: no orphan
    assert took >= 0.6  # the input closed, kill_grace_ms; SIGTERM, kill_grace_ms; SIGKILL


async def test_a_subcolony_whose_root_is_its_own_colony_is_refused_at_once(
    make_tree: TreeFactory,
) -> None:
    tree = parent_tree(root="../..")  # main/child -> the tree's root
    async with ColonyHarness(make_tree(tree), capture=["/sink"]) as colony:
        await colony.send("/child", user("hi"))
        await colony.settle()
        [error] = colony.captured("/sink")
        [failure] = colony.logs("subcolony_boot_failed")
        started = colony.logs("subcolony_ready")
    assert error.headers.hop["error_code"] == "subcolony_unavailable"
    assert f"root {colony.root.resolve()} is this colony" in error.body["messages"][0]["text"]
    assert failure["error_code"] == "subcolony_unavailable"
    assert started == []


async def test_a_subcolony_pointing_back_at_the_colony_above_is_refused_in_the_child(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    """A -> B -> A: B, started by A, refuses to start A again (no third colony runs)."""
    b_root = tmp_path / "colony-b"
    (b_root / "main" / "back").mkdir(parents=True)
    (b_root / "colony.json").write_text('{"schema_version": 1}')
    (b_root / "main" / "config.json").write_text(
        json.dumps(
            hive(
                {"from": ".", "to": "./back", "condition": "!has(hop.subcolony_event)"},
                {"from": "./back", "to": "."},
            )
        )
    )
    work = tmp_path / "work"
    a_root = work / "colony"  # where the harness copies A's tree to run it
    back = {"root": str(a_root), "kill_grace_ms": 500}
    (b_root / "main" / "back" / "config.json").write_text(
        json.dumps({"cell": {"type": "subcolony"}, "params": back, "contract": CONTRACT})
    )
    a_tree = make_tree(parent_tree(root=str(b_root), kill_grace_ms=2000))
    async with ColonyHarness(a_tree, capture=["/sink"], workdir=work) as colony:
        await colony.send("/child", user("hi"))
        await colony.settle()
        [answer] = colony.captured("/sink")
        ready = colony.logs("subcolony_ready")
    [text] = [turn["text"] for turn in answer.body["messages"]]
    assert f"root {a_root.resolve()} is this colony or one already running above it" in text
    assert len(ready) == 1  # A's child B; B never started a copy of A


# -- crossing: trace, ttl, context, environment ---------------------------------------------------


async def test_the_crossing_carries_the_trace_one_ttl_unit_less_and_only_mapped_context(
    make_tree: TreeFactory, fake: dict[str, Any]
) -> None:
    tree = parent_tree(**fake, context_in={"user_id": "parent_user"})
    async with ColonyHarness(make_tree(tree), capture=["/sink"]) as colony:
        trace = await colony.send(
            "/child", user("hi"), context={"user_id": "u-1", "other": "x"}, ttl=10
        )
        await colony.settle()
        [reply] = colony.captured("/sink")
    report = seen(reply)
    assert report["trace_id"] == trace
    assert report["ttl"] == 8  # 10, one decision to reach /child, one for the crossing
    assert set(report["context"]) == {"parent_user", "turn_id"}
    assert report["context"]["parent_user"] == "u-1"


async def test_a_message_without_ttl_for_the_child_is_answered_ttl_exhausted(
    make_tree: TreeFactory, fake: dict[str, Any]
) -> None:
    async with ColonyHarness(make_tree(parent_tree(**fake)), capture=["/sink"]) as colony:
        await colony.send("/child", user("hi"), ttl=2)  # 1 left at /child: nothing to cross with
        await colony.settle()
        [error] = colony.captured("/sink")
    assert error.headers.hop == {"subcolony_event": "error", "error_code": "ttl_exhausted"}
    assert error.body["messages"][0]["origin"] == "assistant"


async def test_the_child_sees_only_the_passed_through_and_given_environment(
    make_tree: TreeFactory, fake: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUBCOLONY_TEST_SECRET", "parent-only")
    tree = parent_tree(**fake, env={"GIVEN": "yes"})
    async with ColonyHarness(make_tree(tree), capture=["/sink"]) as colony:
        await colony.send("/child", user("hi"))
        await colony.settle()
        [reply] = colony.captured("/sink")
    assert seen(reply)["env"] == {"SUBCOLONY_TEST_SECRET": None, "GIVEN": "yes"}


# -- failures -------------------------------------------------------------------------------------


async def test_requests_overlap_and_a_stalled_one_ends_in_request_timeout(
    make_tree: TreeFactory, fake: dict[str, Any]
) -> None:
    tree = parent_tree(**fake, request_timeout_ms=700)
    async with ColonyHarness(make_tree(tree), capture=["/sink"]) as colony:
        await colony.send("/child", user("slow"))
        await colony.send("/child", user("quick"))
        await colony.settle()
        first, second = colony.captured("/sink")
    assert seen(first)["said"] == "quick"  # not held back by the stalled request
    assert second.headers.hop["error_code"] == "request_timeout"
    assert "700 ms" in second.body["messages"][0]["text"]


async def test_an_error_frame_for_a_request_is_answered_child_error(
    make_tree: TreeFactory, fake: dict[str, Any]
) -> None:
    async with ColonyHarness(make_tree(parent_tree(**fake)), capture=["/sink"]) as colony:
        await colony.send("/child", user("fail"))
        await colony.settle()
        [error] = colony.captured("/sink")
    assert error.headers.hop["error_code"] == "child_error"
    assert "invalid_frame: no thanks" in error.body["messages"][0]["text"]


async def test_a_child_that_dies_fails_its_requests_then_the_cell_restarts_a_new_child(
    make_tree: TreeFactory, fake: dict[str, Any]
) -> None:
    async with ColonyHarness(make_tree(parent_tree(**fake)), capture=["/sink"]) as colony:
        await colony.send("/child", user("hi"))
        await colony.settle()
        await colony.send("/child", user("die"))
        await colony.settle()
        await until(lambda: len(colony.logs("subcolony_ready")) == 2)
        await colony.send("/child", user("again"))
        await colony.settle()
        before, gone, after = colony.captured("/sink")
        restarts = colony.logs("cell_restarting")
    assert gone.headers.hop["error_code"] == "subcolony_gone"
    assert "exit status 3" in gone.body["messages"][0]["text"]
    assert seen(after)["said"] == "again"
    assert seen(after)["pid"] != seen(before)["pid"]
    assert len(restarts) == 1


async def test_a_child_that_exits_is_noticed_though_a_process_it_started_holds_its_stdout(
    make_tree: TreeFactory, fake: dict[str, Any]
) -> None:
    tree = parent_tree(**fake, request_timeout_ms=20_000)
    async with ColonyHarness(make_tree(tree), capture=["/sink"]) as colony:
        await colony.send("/child", user("orphan"))
        await colony.settle(timeout=10)
        await until(lambda: len(colony.logs("subcolony_ready")) == 2)
        await colony.send("/child", user("again"))
        await colony.settle(timeout=10)
        gone, after = colony.captured("/sink")
    assert gone.headers.hop["error_code"] == "subcolony_gone"
    assert "exit status 3" in gone.body["messages"][0]["text"]
    assert seen(after)["said"] == "again"


@pytest.mark.parametrize(
    ("mode", "code"),
    [("v2", "protocol_mismatch"), ("mute", "boot_timeout")],
)
async def test_a_boot_that_cannot_succeed_leaves_the_cell_up_answering_its_reason(
    make_tree: TreeFactory, fake: dict[str, Any], mode: str, code: str
) -> None:
    tree = parent_tree(**fake, env={"FAKE_MODE": mode}, boot_timeout_ms=400)
    async with ColonyHarness(make_tree(tree), capture=["/sink"]) as colony:
        await colony.send("/child", user("one"))
        await colony.send("/child", user("two"))
        await colony.settle()
        answers = colony.captured("/sink")
        failures = colony.logs("subcolony_boot_failed")
        restarts = colony.logs("cell_restarting")
    assert [a.headers.hop["error_code"] for a in answers] == [code, code]
    assert len(failures) == 1
    assert restarts == []  # a certainty does not burn the restart budget


async def test_a_params_update_after_a_failed_boot_boots_the_child_again(
    make_tree: TreeFactory, fake: dict[str, Any]
) -> None:
    tree = parent_tree(**fake, env={"FAKE_MODE": "late"}, boot_timeout_ms=300)
    async with ColonyHarness(make_tree(tree), capture=["/sink"]) as colony:
        await colony.send("/child", user("too early"))
        await colony.settle()
        await colony.send("/child", {"params": {"boot_timeout_ms": 5000}})
        await colony.send("/child", user("after the retry"))
        await colony.settle()
        refused, answered = colony.captured("/sink")
        [failure] = colony.logs("subcolony_boot_failed")
        retried = colony.logs("subcolony_boot_retried")
    assert refused.headers.hop["error_code"] == "boot_timeout"
    assert "a params update" in failure["detail"]
    assert len(retried) == 1
    assert seen(answered)["said"] == "after the retry"


async def test_a_nul_byte_in_the_childs_environment_is_answered_subcolony_unavailable(
    make_tree: TreeFactory, fake: dict[str, Any]
) -> None:
    tree = parent_tree(**fake, env={"GIVEN": "a\u0000b"})
    async with ColonyHarness(make_tree(tree), capture=["/sink"]) as colony:
        await colony.send("/child", user("hi"))
        await colony.settle(timeout=10)
        [error] = colony.captured("/sink")
        [failure] = colony.logs("subcolony_boot_failed")
    assert error.headers.hop["error_code"] == "subcolony_unavailable"
    assert "could not be started" in error.body["messages"][0]["text"]
    assert failure["error_code"] == "subcolony_unavailable"


async def test_a_line_nested_too_deep_for_the_json_parser_is_skipped(
    make_tree: TreeFactory, fake: dict[str, Any]
) -> None:
    tree = parent_tree(**fake, env={"FAKE_MODE": "deep"})
    async with ColonyHarness(make_tree(tree), capture=["/sink"]) as colony:
        await colony.send("/child", user("hi"))
        await colony.settle(timeout=10)
        [reply] = colony.captured("/sink")
    assert seen(reply)["said"] == "hi"


async def test_a_stderr_line_over_the_limit_does_not_stop_the_draining_of_stderr(
    make_tree: TreeFactory, fake: dict[str, Any]
) -> None:
    tree = parent_tree(**fake, env={"FAKE_MODE": "loud"}, boot_timeout_ms=5000)
    async with ColonyHarness(make_tree(tree), capture=["/sink"]) as colony:
        await colony.send("/child", user("hi"))
        await colony.settle(timeout=10)
        [reply] = colony.captured("/sink")
        lines = [r["line"] for r in colony.logs("subcolony_child_output")]
    assert seen(reply)["said"] == "hi"
    assert any("stderr line longer than" in line for line in lines)
    assert "after the long line" in lines  # still read: a child never blocks on a full pipe


@pytest.mark.parametrize("value", ["lone \ud800 surrogate", float("nan")])
async def test_a_body_the_wire_cannot_carry_is_answered_invalid_input(
    make_tree: TreeFactory, fake: dict[str, Any], value: Any
) -> None:
    async with ColonyHarness(make_tree(parent_tree(**fake)), capture=["/sink"]) as colony:
        await colony.send("/child", {**user("hi"), "extra": value})
        await colony.send("/child", user("next"))
        await colony.settle()
        refused, answered = colony.captured("/sink")
        crashes = colony.logs("cell_crashed")
    assert refused.headers.hop["error_code"] == "invalid_input"
    assert "cannot cross to the child colony" in refused.body["messages"][0]["text"]
    assert seen(answered)["said"] == "next"
    assert crashes == []


async def test_a_command_not_on_the_childs_path_is_answered_subcolony_unavailable(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    tree = parent_tree(root=str(tmp_path), command="no-such-meclaw-build")
    async with ColonyHarness(make_tree(tree), capture=["/sink"]) as colony:
        await colony.send("/child", user("hi"))
        await colony.settle()
        [error] = colony.captured("/sink")
    assert error.headers.hop["error_code"] == "subcolony_unavailable"
    assert "no-such-meclaw-build" in error.body["messages"][0]["text"]


async def test_a_frame_nobody_asked_for_goes_to_emit_to_on_a_fresh_trace(
    make_tree: TreeFactory, fake: dict[str, Any]
) -> None:
    tree = parent_tree(**fake, emit_to="/heard")
    tree["main/config.json"] = hive(
        {"from": "./child", "to": "/sink", "condition": "hop.subcolony_event != 'unsolicited'"},
        {"from": "./child", "to": "/heard", "condition": "hop.subcolony_event == 'unsolicited'"},
    )
    async with ColonyHarness(make_tree(tree), capture=["/sink", "/heard"]) as colony:
        trace = await colony.send("/child", user("shout"))
        await colony.settle()
        await until(lambda: len(colony.captured("/heard")) == 1)
        [reply] = colony.captured("/sink")
        [heard] = colony.captured("/heard")
    assert seen(reply)["said"] == "shout"
    assert heard.headers.hop == {"subcolony_event": "unsolicited"}
    assert heard.body["messages"][0]["text"] == "unasked"
    assert heard.trace_id != trace


# -- runtime params -------------------------------------------------------------------------------


@pytest.mark.sqlite_only  # reads the cell's cell.db
async def test_a_params_update_of_a_timeout_applies_silently_and_persists(
    make_tree: TreeFactory, fake: dict[str, Any]
) -> None:
    async with ColonyHarness(make_tree(parent_tree(**fake)), capture=["/sink"]) as colony:
        await colony.send("/child", {"params": {"request_timeout_ms": 300}})
        await colony.settle()
        assert colony.captured("/sink") == []
        await colony.send("/child", {"params": {"request_timeout_ms": 300, "root": "/"}})
        await colony.send("/child", user("slow"))
        await colony.settle()
        refused, timed_out = colony.captured("/sink")
        conn = sqlite3.connect(colony.root / "main" / "child" / "cell.db")
        try:
            rows = conn.execute("SELECT key, value FROM subcolony_params").fetchall()
        finally:
            conn.close()
    assert refused.headers.hop["error_code"] == "invalid_input"
    assert "params.root cannot be changed" in refused.body["messages"][0]["text"]
    assert timed_out.headers.hop["error_code"] == "request_timeout"
    assert "300 ms" in timed_out.body["messages"][0]["text"]
    assert rows == [("request_timeout_ms", "300")]


async def test_a_body_without_messages_is_answered_invalid_input(
    make_tree: TreeFactory, fake: dict[str, Any]
) -> None:
    async with ColonyHarness(make_tree(parent_tree(**fake)), capture=["/sink"]) as colony:
        await colony.send("/child", {"note": "no turns"})
        await colony.settle()
        [error] = colony.captured("/sink")
    assert error.headers.hop["error_code"] == "invalid_input"


# -- --validate -----------------------------------------------------------------------------------


def findings(root: Path) -> list[tuple[Severity, str, str]]:
    result = load_tree(
        root,
        cell_types=BUILTIN_CELL_TYPES,
        environ={},
        param_checks=param_checks(implemented_cell_types()),
    )
    return [(d.severity, d.code, d.message) for d in result.diagnostics]


def validated(make_tree: TreeFactory, params: dict[str, Any]) -> list[tuple[Severity, str, str]]:
    tree = {
        "main/config.json": hive(),
        "main/child/config.json": cell("subcolony", params),
    }
    return findings(make_tree(tree))


def test_validate_refuses_a_root_that_does_not_exist(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    [(severity, code, message)] = validated(make_tree, {"root": str(tmp_path / "nowhere")})
    assert severity is Severity.ERROR
    assert "does not exist" in message, code


def test_validate_refuses_a_root_that_is_a_file(make_tree: TreeFactory, tmp_path: Path) -> None:
    file = tmp_path / "colony.json"
    file.write_text("{}")
    [(severity, _, message)] = validated(make_tree, {"root": str(file)})
    assert severity is Severity.ERROR
    assert "is not a directory" in message


def test_validate_reads_a_relative_root_from_the_cells_folder(make_tree: TreeFactory) -> None:
    tree = {
        "main/config.json": hive(),
        "main/child/config.json": cell("subcolony", {"root": "inner"}),
        "main/child/inner/colony.json": {"schema_version": 1},
    }
    assert findings(make_tree(tree)) == []


def test_validate_refuses_turn_id_as_a_context_in_target(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    params = {"root": str(tmp_path), "context_in": {"user_id": "turn_id"}}
    [(severity, _, message)] = validated(make_tree, params)
    assert severity is Severity.ERROR
    assert "turn_id" in message
    assert "user_id" in message


def test_validate_takes_max_concurrency_as_a_subcolony_param(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    assert validated(make_tree, {"root": str(tmp_path), "max_concurrency": 8}) == []
    [(severity, _, message)] = validated(make_tree, {"root": str(tmp_path), "max_concurrency": 0})
    assert severity is Severity.ERROR
    assert "at least 1" in message


def test_validate_warns_about_a_misspelt_param_with_the_likely_one(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    result = load_tree(
        make_tree(
            {
                "main/config.json": hive(),
                "main/child/config.json": cell(
                    "subcolony", {"root": str(tmp_path), "request_timeout": 5}
                ),
            }
        ),
        cell_types=BUILTIN_CELL_TYPES,
        environ={},
        param_checks=param_checks(implemented_cell_types()),
    )
    [finding] = result.diagnostics
    assert (finding.severity, finding.code) == (Severity.WARNING, "unknown_param")
    assert finding.hint is not None
    assert "request_timeout_ms" in finding.hint
