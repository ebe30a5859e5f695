"""``isolation: "pool"``: warm workers that run a python3 script message after message.

Every test boots a real colony; where a behaviour must match ``fork``, the same script runs in a
fork-mode colony too and the emissions are compared (``duration_ms`` aside)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from colony.envelope import Envelope
from colony.testing import ColonyHarness
from tests.cells.code.test_code_cell import code_tree as tree
from tests.cells.code.test_code_cell import user
from tests.conftest import CONTRACT, TreeFactory
from tests.processes import alive, eventually

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux /proc")


async def replies(make_tree: TreeFactory, files: dict[str, Any], *texts: str) -> list[Envelope]:
    """Send each text in turn (each settled before the next); what reached /sink, in order."""
    async with ColonyHarness(make_tree(files), capture=["/sink"]) as colony:
        for text in texts:
            await colony.send("/", user(text))
            await colony.settle(timeout=60)
        assert await colony.dead_letters() == []
        return colony.captured("/sink")


def seen(message: Envelope) -> dict[str, Any]:
    """An emission as a comparison sees it: header without the duration, and the body."""
    hop = {k: v for k, v in message.headers.hop.items() if k != "duration_ms"}
    return {"hop": hop, "body": message.body}


async def both(make_tree: TreeFactory, script: str, *texts: str, **params: Any) -> list[Any]:
    """The emissions of ``texts`` under fork and under pool; asserts they are the same."""
    fork = await replies(make_tree, tree(script, isolation="fork", **params), *texts)
    pool = await replies(make_tree, tree(script, isolation="pool", **params), *texts)
    assert [seen(m) for m in pool] == [seen(m) for m in fork]
    return [seen(m) for m in pool]


# ---------------------------------------------------------------------------------------------
# The contract, as fork keeps it.

ECHO = """
import json, sys
doc = json.load(sys.stdin)
turns = doc["body"]["messages"]
print(json.dumps({"header": {"route": "fire"}, "messages": turns + [
    {"origin": "assistant", "type": "text", "text": "seen " + turns[-1]["text"]}]}))
"""


async def test_a_pool_cell_answers_each_message_as_a_fork_cell_does(
    make_tree: TreeFactory,
) -> None:
    [first, second] = await both(make_tree, ECHO, "ping", "pong")
    assert first["body"]["messages"][-1]["text"] == "seen ping"
    assert second["body"]["messages"][-1]["text"] == "seen pong"
    assert first["hop"]["exit_code"] == 0
    assert first["hop"]["had_stderr"] is False


WRITES = """
import json, sys
how = json.loads(sys.stdin.read())["body"]["messages"][-1]["text"]
doc = {"header": {"how": how}, "messages": []}
if how == "print":
    print(json.dumps(doc))
elif how == "write":
    sys.stdout.write(json.dumps(doc) + "\\n")
elif how == "buffer":
    sys.stdout.buffer.write(json.dumps(doc).encode())
elif how == "dump":
    json.dump(doc, sys.stdout)
elif how == "mixed":
    sys.stdout.write("[")
    sys.stdout.flush()
    sys.stdout.buffer.write(json.dumps(doc).encode())
    print("]")
sys.stderr.write("a note on stderr\\n")
"""


async def test_every_way_a_script_prints_reaches_stdout_and_stderr_as_under_fork(
    make_tree: TreeFactory,
) -> None:
    ways = ["print", "write", "buffer", "dump", "mixed"]
    got = await both(make_tree, WRITES, *ways)
    assert [m["hop"]["how"] for m in got] == ways
    assert all(m["hop"]["had_stderr"] is True for m in got)


async def test_multi_send_and_invalid_json_are_the_same_as_under_fork(
    make_tree: TreeFactory,
) -> None:
    script = """
import json, sys
text = json.load(sys.stdin)["body"]["messages"][-1]["text"]
if text == "three":
    print(json.dumps([{"header": {"n": n}, "messages": []} for n in range(3)]))
elif text == "none":
    print("[]")
elif text == "garbage":
    print("not json")
elif text == "nan":
    print('{"messages": [], "x": NaN}')
else:
    print(42)
"""
    contract = {**CONTRACT, "multi_send_capable": True}
    got = await both(
        make_tree, script, "three", "none", "garbage", "nan", "number", contract=contract
    )
    assert [m["hop"].get("n", m["hop"].get("error_code")) for m in got] == [
        0,
        1,
        2,
        "invalid_json",
        "invalid_json",
        "invalid_json",
    ]


async def test_exit_codes_exceptions_and_syntax_errors_fail_as_under_fork(
    make_tree: TreeFactory,
) -> None:
    script = """
import json, sys
text = json.load(sys.stdin)["body"]["messages"][-1]["text"]
if text == "exit":
    print("partial"); sys.stderr.write("broke\\n"); sys.exit(3)
if text == "message":
    sys.exit("no luck")
if text == "zero":
    print(json.dumps({"messages": []})); sys.exit(0)
def divide(a, b):
    return a / b
divide(1, 0)
"""
    got = await both(make_tree, script, "exit", "message", "zero", "raise")
    assert [m["hop"].get("error_code", "ok") for m in got] == [
        "script_failed",
        "script_failed",
        "ok",
        "script_failed",
    ]
    assert [m["hop"]["exit_code"] for m in got] == [3, 1, 0, 1]
    assert got[3]["body"]["meta"]["error"]["detail"] == "ZeroDivisionError: division by zero"
    syntax = await both(make_tree, "x = (", "one")
    assert "SyntaxError" in syntax[0]["body"]["meta"]["error"]["detail"]


async def test_exit_functions_a_script_registers_run_when_its_message_ends(
    make_tree: TreeFactory,
) -> None:
    script = """
import atexit, json, sys
json.load(sys.stdin)
atexit.register(lambda: print(json.dumps({"header": {"at": "exit"}, "messages": []})))
"""
    got = await both(make_tree, script, "one", "two")
    assert [m["hop"]["at"] for m in got] == ["exit", "exit"]


# ---------------------------------------------------------------------------------------------
# What kills or spoils a worker: the same emission as fork, and a fresh worker next.

FAILING = """
import ctypes, json, os, sys, time
text = json.load(sys.stdin)["body"]["messages"][-1]["text"]
if text == "exit":
    print("partial"); sys.exit(3)
elif text == "os_exit":
    print("flushed", flush=True); print("lost"); os._exit(4)
elif text == "segfault":
    ctypes.string_at(0)
elif text == "loop":
    while True:
        pass
elif text == "alloc":
    hoard = bytearray((256 + 1024) << 20)
elif text == "flood":  # endless: a forked child is killed (not racing its own exit)
    while True:
        sys.stdout.write("y" * 5000)
elif text == "cpu":
    while True:
        pass
print(json.dumps({"header": {"pid": os.getpid()}, "messages": []}))
"""

CASES: dict[str, tuple[dict[str, Any], str]] = {
    "exit": ({}, "script_failed"),
    "os_exit": ({}, "script_failed"),
    "segfault": ({}, "script_failed"),
    "loop": ({"external_timeout_ms": 500}, "script_timeout"),
    "alloc": ({"memory_mb": 256}, "script_failed"),
    "flood": ({"max_output_bytes": 1000}, "invalid_json"),
    "cpu": ({"cpu_seconds": 1, "external_timeout_ms": 30_000}, "script_failed"),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_message_that_breaks_its_worker_fails_as_under_fork_and_the_next_gets_a_fresh_one(
    make_tree: TreeFactory, case: str
) -> None:
    params, code = CASES[case]
    params = {**params, "max_concurrency": 1}
    fork = await replies(make_tree, tree(FAILING, isolation="fork", **params), case)
    before, failed, after = await replies(
        make_tree, tree(FAILING, isolation="pool", **params), "pid", case, "pid"
    )
    assert seen(failed) == seen(fork[0])
    assert failed.headers.hop["error_code"] == code
    if case == "exit":  # SystemExit is caught: the worker is sound and serves on
        assert after.headers.hop["pid"] == before.headers.hop["pid"]
    else:
        assert after.headers.hop["pid"] != before.headers.hop["pid"]
    detail = failed.body["meta"]["error"]["detail"]
    expected = {
        "exit": "the script exited with status 3",
        "os_exit": "the script exited with status 4",
        "segfault": "the script was ended by signal SIGSEGV",
        "alloc": "MemoryError",
        "cpu": "the script hit its CPU limit (1 s)",
    }
    if case in expected:
        assert detail == expected[case]
    if case == "os_exit":  # what was flushed before os._exit is kept, as from a forked child
        assert failed.body["messages"][0]["text"] == "flushed\n"
    if case == "flood":
        assert "exceeded max_output_bytes (1000)" in detail


async def test_a_script_that_leaves_a_thread_gets_it_joined_and_its_worker_replaced(
    make_tree: TreeFactory,
) -> None:
    script = """
import json, os, sys, threading, time
text = json.load(sys.stdin)["body"]["messages"][-1]["text"]
def late():
    time.sleep(0.2)
    print(json.dumps({"header": {"pid": os.getpid(), "from": "thread"}, "messages": []}))
if text == "thread":
    threading.Thread(target=late).start()
elif text == "daemon":
    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
    print(json.dumps({"header": {"pid": os.getpid()}, "messages": []}))
else:
    print(json.dumps({"header": {"pid": os.getpid()}, "messages": []}))
"""
    files = tree(script, isolation="pool", max_concurrency=1)
    async with ColonyHarness(make_tree(files), capture=["/sink"]) as colony:
        for text in ("pid", "thread", "pid", "daemon", "pid"):
            await colony.send("/", user(text))
            await colony.settle(timeout=60)
        got = colony.captured("/sink")
        told = colony.logs("code_pool_worker_replaced", level="warning")
    pids = [m.headers.hop["pid"] for m in got]
    assert got[1].headers.hop["from"] == "thread"  # joined before the answer, as at exit
    assert pids[0] == pids[1] != pids[2]
    assert pids[2] == pids[3] != pids[4]
    # Said once per cell and reason, so a script that does it every message is noticed.
    assert [(r["cell"], r["reason"]) for r in told] == [("/a", "the script left a thread running")]


async def test_processes_a_script_leaves_are_killed_when_its_message_ends(
    make_tree: TreeFactory,
) -> None:
    script = """
import json, os, subprocess, sys
text = json.load(sys.stdin)["body"]["messages"][-1]["text"]
if text == "spawn":
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    print(json.dumps({"header": {"child": child.pid}, "messages": []}))
else:
    subprocess.run(["echo", json.dumps({"header": {"echoed": True}, "messages": []})])
"""
    [spawned, echoed] = await replies(
        make_tree, tree(script, isolation="pool", max_concurrency=1), "spawn", "echo"
    )
    assert await eventually(lambda: not alive(spawned.headers.hop["child"]))
    assert echoed.headers.hop["echoed"] is True  # a subprocess's output is the script's stdout


# ---------------------------------------------------------------------------------------------
# Recycling, isolation, what persists.

PID = """
import json, os, sys
json.load(sys.stdin)
print(json.dumps({"header": {"pid": os.getpid()}, "messages": []}))
"""


async def test_a_worker_is_replaced_after_pool_max_jobs_messages(make_tree: TreeFactory) -> None:
    files = tree(PID, isolation="pool", max_concurrency=1, pool_max_jobs=2)
    got = await replies(make_tree, files, *"abcde")
    pids = [m.headers.hop["pid"] for m in got]
    assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4]


async def test_a_worker_past_pool_max_rss_mb_is_replaced(make_tree: TreeFactory) -> None:
    script = """
import json, os, sys
text = json.load(sys.stdin)["body"]["messages"][-1]["text"]
if text == "grow":
    block = bytearray(64 << 20)
    block[::4096] = b"x" * len(block[::4096])
print(json.dumps({"header": {"pid": os.getpid()}, "messages": []}))
"""
    files = tree(script, isolation="pool", max_concurrency=1, pool_max_rss_mb=48)
    got = await replies(make_tree, files, "pid", "grow", "pid")
    pids = [m.headers.hop["pid"] for m in got]
    assert pids[0] == pids[1] != pids[2]


async def test_a_pool_worker_sees_only_the_allow_list_and_params_env(
    make_tree: TreeFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POOL_PROBE_SECRET", "s3cr3t")
    monkeypatch.setenv("POOL_PROBE_PASSED", "given")
    script = """
import json, os, sys
text = json.load(sys.stdin)["body"]["messages"][-1]["text"]
env = dict(os.environ)
os.environ["SET_BY_A_MESSAGE"] = "1"
print(json.dumps({"header": {"env": env}, "messages": []}))
"""
    files = tree(
        script, isolation="pool", max_concurrency=1, env={"PASSED": "${POOL_PROBE_PASSED}"}
    )
    first, second = await replies(make_tree, files, "one", "two")
    env = first.headers.hop["env"]
    assert "POOL_PROBE_SECRET" not in env
    assert "s3cr3t" not in json.dumps(env)
    assert env["PASSED"] == "given"
    assert second.headers.hop["env"] == env  # what a message set is gone for the next


async def test_each_message_gets_fresh_globals_path_argv_and_working_directory(
    make_tree: TreeFactory,
) -> None:
    script = """
import json, os, signal, sys
json.load(sys.stdin)
state = {"seen": globals().get("SEEN", 0), "cwd": os.getcwd().endswith("/main/a"), "path0": sys.path[0],
         "argv": list(sys.argv), "name": __name__, "alarm": signal.getsignal(signal.SIGALRM) is signal.SIG_DFL}
SEEN = 1
sys.path.insert(0, "/nowhere")
sys.argv.append("extra")
signal.signal(signal.SIGALRM, lambda *_: None)
signal.alarm(1)
os.chdir("/")
print(json.dumps({"header": state, "messages": []}))
"""
    got = await both(make_tree, script, "one", "two", max_concurrency=1)
    first, second = (m["hop"] for m in got)
    for key in ("seen", "cwd", "path0", "argv", "name", "alarm"):
        assert first[key] == second[key], key
    assert (first["seen"], first["path0"], first["argv"], first["name"]) == (
        0,
        "",
        ["-c"],
        "__main__",
    )
    assert first["alarm"] is True
    assert first["cwd"] is True


async def test_every_way_a_script_changes_directory_is_put_back_for_the_next_message(
    make_tree: TreeFactory,
) -> None:
    script = """
import contextlib, json, os, sys
how = json.load(sys.stdin)["body"]["messages"][-1]["text"]
here = os.getcwd()
if how == "fchdir":
    os.fchdir(os.open("/", os.O_RDONLY))
elif how == "context":
    contextlib.chdir("/").__enter__()
elif how == "chdir_fd":
    os.chdir(os.open("/", os.O_RDONLY))
home = here.endswith("/main/a")
print(json.dumps({"header": {"home": home, "moved": os.getcwd() == "/"}, "messages": []}))
"""
    got = await both(make_tree, script, "fchdir", "context", "chdir_fd", "stay", max_concurrency=1)
    assert [m["hop"]["moved"] for m in got] == [True, True, True, False]
    assert all(m["hop"]["home"] for m in got)  # each began in the cell's folder


async def test_imported_modules_keep_their_state_between_messages_of_one_worker(
    make_tree: TreeFactory,
) -> None:
    """What pool gives up against fork (docs/cells/code.md): module-level state of imported
    modules persists between the messages one worker runs."""
    script = """
import json, os, sys
import counter
json.load(sys.stdin)
counter.count += 1
print(json.dumps({"header": {"count": counter.count}, "messages": []}))
"""
    files = tree(script, isolation="pool", max_concurrency=1)
    files["main/a/counter.py"] = "count = 0\n"
    got = await replies(make_tree, files, "one", "two", "three")
    assert [m.headers.hop["count"] for m in got] == [1, 2, 3]
    files = tree(script, isolation="fork", max_concurrency=1)
    files["main/a/counter.py"] = "count = 0\n"
    got = await replies(make_tree, files, "one", "two")
    assert [m.headers.hop["count"] for m in got] == [1, 1]


async def test_a_script_file_is_compiled_again_when_it_changes(make_tree: TreeFactory) -> None:
    files = tree("", isolation="pool", max_concurrency=1)
    params = files["main/a/config.json"]["params"]
    del params["script_inline"]
    params["script"] = "answer.py"
    answer = (
        "import json\nprint(json.dumps({'header': {'v': %d, 'file': __file__}, 'messages': []}))\n"
    )
    files["main/a/answer.py"] = answer % 1
    async with ColonyHarness(make_tree(files), capture=["/sink"]) as colony:
        await colony.send("/", user())
        await colony.settle(timeout=60)
        where = Path(colony.captured("/sink")[0].headers.hop["file"])
        where.write_text(answer % 22)  # noqa: ASYNC240 (another size: another version)
        await colony.send("/", user())
        await colony.settle(timeout=60)
        assert [m.headers.hop["v"] for m in colony.captured("/sink")] == [1, 22]


async def test_closing_the_colony_stops_its_pool_workers(make_tree: TreeFactory) -> None:
    [reply] = await replies(make_tree, tree(PID, isolation="pool"), "one")
    assert await eventually(lambda: not alive(reply.headers.hop["pid"]))


@pytest.mark.parametrize("runner", ["bash", "node"])
def test_pool_runs_python3_scripts_only(runner: str) -> None:
    from pydantic import ValidationError

    from cells.code.params import CodeParams

    with pytest.raises(ValidationError, match="isolation 'pool' runs python3 scripts only"):
        CodeParams.model_validate({"runner": runner, "script_inline": "x", "isolation": "pool"})


async def test_the_daemons_modules_are_not_importable_by_a_pool_script(
    make_tree: TreeFactory,
) -> None:
    script = """
import importlib.util, json, sys
json.load(sys.stdin)
found = [n for n in ("pool_worker", "zygote", "cells") if importlib.util.find_spec(n)]
print(json.dumps({"header": {"found": found}, "messages": []}))
"""
    [reply] = await both(make_tree, script, "one")
    assert reply["hop"]["found"] == []


async def test_a_logging_handler_an_imported_module_keeps_writes_to_each_messages_stderr(
    make_tree: TreeFactory,
) -> None:
    """``logging.basicConfig`` binds the root logger (which persists) to ``sys.stderr`` once:
    the worker's streams outlive a message, so every message's log lines are its own."""
    script = """
import json, logging, sys
text = json.load(sys.stdin)["body"]["messages"][-1]["text"]
logging.basicConfig(format="%(message)s")
logging.warning("note from %s", text)
print(json.dumps({"messages": []}))
"""
    got = await both(make_tree, script, "one", "two", max_concurrency=1)
    assert [m["hop"]["had_stderr"] for m in got] == [True, True]


async def test_a_script_that_replaces_or_closes_its_stdout_does_not_spoil_the_next_message(
    make_tree: TreeFactory,
) -> None:
    script = """
import io, json, sys
text = json.load(sys.stdin)["body"]["messages"][-1]["text"]
if text == "replace":
    sys.stdout = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", errors="strict")
if text == "reconfigure":
    sys.stdout.reconfigure(errors="ignore", line_buffering=True)
print(json.dumps({"header": {"text": text}, "messages": []}))
if text == "close":
    sys.stdout.close()
"""
    texts = ["replace", "plain", "reconfigure", "plain", "close", "plain"]
    got = await both(make_tree, script, *texts, max_concurrency=1)
    assert [m["hop"].get("text", m["hop"].get("error_code")) for m in got] == texts


async def test_a_script_that_forks_gets_its_child_back_as_under_fork(
    make_tree: TreeFactory,
) -> None:
    script = """
import json, os, sys
json.load(sys.stdin)
pid = os.fork()
if pid == 0:
    sys.exit(5)  # the child ends here, as a forked job's child would
_, status = os.waitpid(pid, 0)
print(json.dumps({"header": {"child": os.waitstatus_to_exitcode(status)}, "messages": []}))
"""
    got = await both(make_tree, script, "one", "two", max_concurrency=1)
    assert [m["hop"]["child"] for m in got] == [5, 5]


async def test_a_pool_runs_at_most_max_concurrency_workers(make_tree: TreeFactory) -> None:
    script = """
import json, os, sys, time
json.load(sys.stdin)
time.sleep(0.2)
print(json.dumps({"header": {"pid": os.getpid()}, "messages": []}))
"""
    async with ColonyHarness(
        make_tree(tree(script, isolation="pool", max_concurrency=2)), capture=["/sink"]
    ) as colony:
        for n in range(6):
            await colony.send("/", user(str(n)))
        await colony.settle(timeout=60)
        pids = {m.headers.hop["pid"] for m in colony.captured("/sink")}
    assert len(colony.captured("/sink")) == 6
    assert 1 <= len(pids) <= 2
