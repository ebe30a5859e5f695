"""Running a script as a real process: spawned per message, or forked from the zygote."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from cells.code.isolation import job_environment
from cells.code.pool import PoolSettings, WorkerPool
from cells.code.process import Limits, ProcessError, RunResult
from cells.code.zygote_client import Zygote, close_shared_zygotes, run_spawned, shared_zygote
from tests.processes import alive, eventually

PYTHON = sys.executable

Run = Callable[..., Awaitable[RunResult]]


@pytest.fixture
async def zygote() -> AsyncIterator[Zygote]:
    worker = Zygote(PYTHON)
    await worker.start()
    yield worker
    await worker.close()


@pytest.fixture(params=["spawn", "fork", "pool"])
def run(request: pytest.FixtureRequest, zygote: Zygote) -> Run:
    """``run(script, stdin=b"", timeout=10, **options)`` in the parametrised mode (``pool``:
    one message on a worker of a pool made for it)."""

    async def spawn(script: str, stdin: bytes = b"", **kw: Any) -> RunResult:
        kw.setdefault("timeout", 10)
        return await run_spawned([PYTHON, "-c", script], stdin, **kw)

    async def fork(script: str, stdin: bytes = b"", **kw: Any) -> RunResult:
        kw.setdefault("timeout", 10)
        return await zygote.run(script=script, stdin=stdin, **kw)

    async def pool(script: str, stdin: bytes = b"", **kw: Any) -> RunResult:
        settings = PoolSettings(
            script=script,
            path=None,
            cwd=kw.pop("cwd", None) or os.getcwd(),
            env=kw.pop("env", None) or job_environment(),
            limits=kw.pop("limits", Limits()),
            max_output_bytes=kw.pop("max_stdout_bytes", 4 << 20),
            max_jobs=1000,
            max_rss_mb=None,
            size=1,
        )
        workers = WorkerPool(zygote, settings)
        try:
            return await workers.run(stdin, timeout=kw.pop("timeout", 10))
        finally:
            await workers.close()

    return {"spawn": spawn, "fork": fork, "pool": pool}[request.param]


def children(ppid: int) -> dict[int, str]:
    """``{pid: state}`` of every process whose parent is ``ppid``, read from /proc."""
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        state, parent = stat.rsplit(")", 1)[1].split()[:2]
        if int(parent) == ppid:
            found[int(entry)] = state
    return found


ECHO_LINES = """
import sys
for line in sys.stdin.buffer:
    sys.stdout.buffer.write(line)
"""


async def test_stdin_is_echoed_to_stdout_and_a_megabyte_does_not_deadlock(run: Run) -> None:
    # The script answers line by line, before it has read everything: both pipes fill up
    # unless stdin is written while stdout is read.
    stdin = b"".join(b"%07d the quick brown fox\n" % i for i in range(40_000))
    assert len(stdin) > 1_000_000
    result = await run(ECHO_LINES, stdin)
    assert result.exit_code == 0
    assert result.stdout == stdin
    assert not result.timed_out
    assert not result.stdout_overflow


async def test_the_exit_code_is_reported(run: Run) -> None:
    result = await run("import sys; print('bye'); sys.exit(3)")
    assert result.exit_code == 3
    assert result.stdout == b"bye\n"
    assert result.term_signal is None


async def test_an_uncaught_exception_exits_1_with_its_traceback_on_stderr(run: Run) -> None:
    result = await run("def f():\n    raise ValueError('boom')\nf()")
    assert result.exit_code == 1
    assert result.stderr.startswith(b"Traceback (most recent call last):\n")
    assert b'File "<string>", line 3, in <module>' in result.stderr
    assert result.stderr.endswith(b"ValueError: boom\n")


async def test_a_syntax_error_exits_1_and_is_reported_like_the_interpreter_does(run: Run) -> None:
    result = await run("x = (")
    assert result.exit_code == 1
    assert b"SyntaxError" in result.stderr
    assert b"Traceback" not in result.stderr


async def test_a_process_ended_by_a_signal_reports_minus_1_and_the_signal(run: Run) -> None:
    result = await run("import os, signal; os.kill(os.getpid(), signal.SIGTERM)")
    assert (result.exit_code, result.term_signal) == (-1, signal.SIGTERM)
    assert not result.timed_out


async def test_the_zygotes_own_future_imports_do_not_leak_into_scripts(run: Run) -> None:
    # zygote.py has ``from __future__ import annotations``; a script must not inherit it.
    result = await run("def f(x: int): pass\nprint(f.__annotations__)")
    assert result.stdout == b"{'x': <class 'int'>}\n"


async def test_a_large_script_runs(run: Run) -> None:
    # 100 kB: more than one socket write for the zygote, under Linux's 128 KiB cap on one
    # exec argument for ``python3 -c``.
    script = "# " + "padding " * 12_500 + "\nprint('big')"
    result = await run(script)
    assert (result.exit_code, result.stdout) == (0, b"big\n")


async def test_sys_exit_with_a_message_exits_1_and_prints_the_message(run: Run) -> None:
    result = await run("import sys; sys.exit('no luck')")
    assert result.exit_code == 1
    assert result.stderr == b"no luck\n"


async def test_a_script_that_closes_its_stdout_exits_0_as_the_interpreter_does(run: Run) -> None:
    result = await run("import sys; print('done'); sys.stdout.close()")
    assert (result.exit_code, result.stdout) == (0, b"done\n")


async def test_sys_exit_without_a_code_is_success(run: Run) -> None:
    result = await run("import sys; print('ok'); sys.exit()")
    assert (result.exit_code, result.stdout) == (0, b"ok\n")


async def test_a_script_past_its_timeout_is_killed_together_with_its_grandchildren(
    run: Run,
) -> None:
    script = (
        "import subprocess, time\n"
        "child = subprocess.Popen(['sleep', '30'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(30)\n"
    )
    began = time.monotonic()
    result = await run(script, timeout=1.0)
    elapsed = time.monotonic() - began
    assert result.timed_out
    assert result.exit_code == -1
    assert result.term_signal == signal.SIGKILL
    assert elapsed < 2.0
    grandchild = int(result.stdout)
    assert await eventually(lambda: not alive(grandchild))


async def test_a_process_left_in_the_background_does_not_keep_the_run_open(run: Run) -> None:
    # The background sleep inherits stdout; the run ends when the script does, and the rest
    # of its process group is killed with it.
    script = (
        "import subprocess\n"
        "child = subprocess.Popen(['sleep', '30'])\n"
        "print(child.pid, flush=True)\n"
    )
    began = time.monotonic()
    result = await run(script, timeout=10)
    assert time.monotonic() - began < 2.0
    assert result.exit_code == 0
    assert not result.timed_out
    assert await eventually(lambda: not alive(int(result.stdout)))


async def test_a_flood_of_stdout_is_cut_at_the_limit_and_the_script_is_killed(run: Run) -> None:
    limit = 1_000_000
    began = time.monotonic()
    result = await run(
        "import sys; sys.stdout.buffer.write(b'x' * 10_000_000)",
        timeout=20,
        max_stdout_bytes=limit,
    )
    assert time.monotonic() - began < 2.0
    assert result.stdout_overflow
    assert result.stdout == b"x" * limit
    assert result.exit_code == -1
    assert not result.timed_out


async def test_stdout_of_exactly_the_limit_is_not_an_overflow(run: Run) -> None:
    result = await run("import sys; sys.stdout.buffer.write(b'y' * 5000)", max_stdout_bytes=5000)
    assert not result.stdout_overflow
    assert (result.exit_code, result.stdout) == (0, b"y" * 5000)


async def test_only_the_last_8_kib_of_a_long_stderr_are_kept(run: Run) -> None:
    script = "import sys; sys.stderr.write(''.join(f'{i:07d}\\n' for i in range(12_500)))"
    written = "".join(f"{i:07d}\n" for i in range(12_500)).encode()
    assert len(written) == 100_000
    result = await run(script)
    assert result.exit_code == 0
    assert result.stderr_truncated
    assert result.stderr == written[-8 * 1024 :]


async def test_a_short_stderr_is_kept_whole(run: Run) -> None:
    result = await run("import sys; sys.stderr.write('careful\\n')")
    assert (result.stderr, result.stderr_truncated) == (b"careful\n", False)


FRESHNESS = """
import builtins, json, os
print(json.dumps({"pid": os.getpid(), "seen": hasattr(builtins, "_job_mark")}))
builtins._job_mark = json._job_mark = True
"""


async def test_every_job_runs_in_a_fresh_process(run: Run) -> None:
    first = json.loads((await run(FRESHNESS)).stdout)
    second = json.loads((await run(FRESHNESS)).stdout)
    assert not first["seen"]
    assert not second["seen"]
    assert first["pid"] != second["pid"]


async def test_twenty_concurrent_jobs_each_get_their_own_output(run: Run) -> None:
    script = "import sys, time; name = sys.stdin.read(); time.sleep(0.05); print(name * 2)"
    results = await asyncio.gather(*(run(script, f"job{i}-".encode()) for i in range(20)))
    assert [r.stdout for r in results] == [f"job{i}-job{i}-\n".encode() for i in range(20)]
    assert all(r.exit_code == 0 for r in results)


async def test_a_cpu_limit_ends_a_busy_loop_long_before_the_wall_timeout(run: Run) -> None:
    began = time.monotonic()
    result = await run("while True: pass", timeout=20, limits=Limits(cpu_seconds=1))
    assert time.monotonic() - began < 6
    assert not result.timed_out
    assert result.exit_code == -1
    assert result.term_signal in (signal.SIGXCPU, signal.SIGKILL)


async def test_an_address_space_limit_makes_a_big_allocation_fail(run: Run) -> None:
    script = "block = bytearray(2 * 1024 * 1024 * 1024)"
    result = await run(script, limits=Limits(address_space_mb=1024))
    assert result.exit_code == 1
    assert b"MemoryError" in result.stderr


async def test_a_script_that_ignores_its_stdin_still_succeeds(run: Run) -> None:
    result = await run("print('not reading')", b"z" * 2_000_000)
    assert (result.exit_code, result.stdout) == (0, b"not reading\n")


INTROSPECT = """
import json, sys
print(json.dumps({
    "name": __name__,
    "argv": sys.argv,
    "path0": sys.path[0],
    "file": globals().get("__file__"),
    "streams": [
        [s.encoding, s.errors, s.line_buffering, s.write_through, s.seekable(), s.isatty()]
        for s in (sys.stdin, sys.stdout, sys.stderr)
    ],
    "unraisable": sys.stdin.read(),
}))
"""


async def test_a_forked_job_sees_what_python3_dash_c_would_see(zygote: Zygote) -> None:
    spawned = await run_spawned([PYTHON, "-c", INTROSPECT], b"in", timeout=10)
    forked = await zygote.run(script=INTROSPECT, stdin=b"in", timeout=10)
    assert json.loads(forked.stdout) == json.loads(spawned.stdout)
    assert json.loads(forked.stdout)["argv"] == ["-c"]
    assert json.loads(forked.stdout)["name"] == "__main__"


async def test_a_script_file_runs_as_main_with_its_folder_first_on_sys_path(
    zygote: Zygote, tmp_path: Path
) -> None:
    (tmp_path / "helper_for_the_test.py").write_text("WORD = 'from the sibling'\n")
    script = tmp_path / "main.py"
    script.write_text(INTROSPECT + "import helper_for_the_test\nprint(helper_for_the_test.WORD)\n")
    spawned = await run_spawned([PYTHON, str(script)], b"", timeout=10)
    forked = await zygote.run(path=str(script), stdin=b"", timeout=10)
    assert spawned.exit_code == forked.exit_code == 0
    assert forked.stdout == spawned.stdout
    first, word = forked.stdout.decode().splitlines()
    assert json.loads(first)["path0"] == str(tmp_path)
    assert json.loads(first)["file"] == str(script)
    assert word == "from the sibling"


async def test_a_script_file_edited_between_jobs_runs_as_edited(
    zygote: Zygote, tmp_path: Path
) -> None:
    script = tmp_path / "edited.py"
    script.write_text("print('first')\n")
    assert (await zygote.run(path=str(script), stdin=b"", timeout=10)).stdout == b"first\n"
    assert (await zygote.run(path=str(script), stdin=b"", timeout=10)).stdout == b"first\n"
    script.write_text("print('second version')\n")  # another size: a new file version
    assert (await zygote.run(path=str(script), stdin=b"", timeout=10)).stdout == b"second version\n"
    script.write_text("print(\n")  # no longer compiles: reported as the interpreter would
    broken = await zygote.run(path=str(script), stdin=b"", timeout=10)
    assert broken.exit_code == 1
    assert b"SyntaxError" in broken.stderr
    script.unlink()
    gone = await zygote.run(path=str(script), stdin=b"", timeout=10)
    assert gone.exit_code == 2


async def test_a_missing_script_file_exits_2_like_the_interpreter(
    zygote: Zygote, tmp_path: Path
) -> None:
    result = await zygote.run(path=str(tmp_path / "absent.py"), stdin=b"", timeout=10)
    assert result.exit_code == 2
    assert b"can't open file" in result.stderr


async def test_the_working_directory_is_the_one_given(run: Run, tmp_path: Path) -> None:
    result = await run("import os; print(os.getcwd())", cwd=str(tmp_path))
    assert result.stdout.decode().strip() == str(tmp_path)


async def test_a_missing_working_directory_raises_process_error(run: Run, tmp_path: Path) -> None:
    with pytest.raises(ProcessError, match="not found"):
        await run("print(1)", cwd=str(tmp_path / "nowhere"))


async def test_a_missing_binary_raises_process_error() -> None:
    with pytest.raises(ProcessError, match="not found"):
        await run_spawned(["no-such-binary-for-the-code-cell"], b"", timeout=5)


async def test_other_runners_work_in_spawn_mode() -> None:
    result = await run_spawned(["bash", "-c", 'read x; echo "got $x"; exit 4'], b"hi\n", timeout=5)
    assert (result.exit_code, result.stdout) == (4, b"got hi\n")


async def test_cancelling_a_run_kills_its_process(run: Run, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    script = (
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(30)"
    )
    task = asyncio.ensure_future(run(script, timeout=20))
    assert await eventually(lambda: pid_file.exists() and pid_file.read_text() != "", within=5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await eventually(lambda: not alive(int(pid_file.read_text())))


async def test_after_the_zygote_is_killed_the_next_run_starts_a_new_one(zygote: Zygote) -> None:
    first = zygote.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    result = await zygote.run(script="print('still here')", stdin=b"", timeout=10)
    assert result.stdout == b"still here\n"
    assert zygote.pid not in (None, first)


async def test_jobs_running_when_the_zygote_dies_fail_and_are_killed(zygote: Zygote) -> None:
    worker = zygote.pid
    assert worker is not None
    job = asyncio.ensure_future(
        zygote.run(script="import time; time.sleep(30)", stdin=b"", timeout=20)
    )
    assert await eventually(lambda: bool(children(worker)), within=5)
    (child,) = children(worker)
    os.kill(worker, signal.SIGKILL)
    with pytest.raises(ProcessError):
        await asyncio.wait_for(job, 5)
    assert await eventually(lambda: not alive(child))


async def test_closing_the_zygote_kills_the_jobs_it_runs() -> None:
    worker = Zygote(PYTHON)
    await worker.start()
    pid = worker.pid
    assert pid is not None
    job = asyncio.ensure_future(
        worker.run(script="import time; time.sleep(30)", stdin=b"", timeout=20)
    )
    assert await eventually(lambda: bool(children(pid)), within=5)
    (child,) = children(pid)
    await worker.close()
    with pytest.raises(ProcessError):
        await asyncio.wait_for(job, 5)
    assert not alive(child)
    assert not alive(pid)
    assert worker.pid is None


async def test_no_zombies_remain_after_jobs(run: Run, zygote: Zygote) -> None:
    leaves_a_grandchild = "import subprocess; subprocess.Popen(['sleep', '30'])"
    await asyncio.gather(
        run("print(1)"),
        run("raise SystemExit(5)"),
        run("import time; time.sleep(5)", timeout=0.3),
        run(leaves_a_grandchild),
        run(leaves_a_grandchild, timeout=0.3),
    )
    worker = zygote.pid
    assert worker is not None
    # The zygote reaps its children and, as a subreaper, the orphans they leave behind.
    assert await eventually(lambda: children(worker) == {})
    assert await eventually(lambda: "Z" not in children(os.getpid()).values())


async def test_a_zygote_with_a_missing_interpreter_raises_process_error() -> None:
    worker = Zygote("/no/such/python3")
    with pytest.raises(ProcessError, match="not found"):
        await worker.start()
    await worker.close()


async def test_a_shared_zygote_is_one_per_interpreter() -> None:
    try:
        assert shared_zygote(PYTHON) is shared_zygote(PYTHON)
        assert shared_zygote(PYTHON) is not shared_zygote("python3")
        await shared_zygote(PYTHON).start()
        pid = shared_zygote(PYTHON).pid
        assert pid is not None
    finally:
        await close_shared_zygotes()
    assert not alive(pid)
    assert shared_zygote(PYTHON).pid is None
    await close_shared_zygotes()
