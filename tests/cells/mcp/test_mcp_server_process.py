"""The stdio server process itself: its stderr pump, its stop, its end with the daemon."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path

import pytest

from cells.mcp.stdio import LINE_LIMIT, STDERR_LINE_KEPT, ServerProcess
from tests.processes import alive, eventually

PYTHON = sys.executable
ROOT = Path(__file__).resolve().parents[3]


async def spawn(code: str) -> ServerProcess:
    return await ServerProcess.spawn(PYTHON, ["-c", code], {}, None, log=None, path="/mcp")


async def test_a_stderr_line_over_the_stream_limit_is_cut_and_the_pump_goes_on() -> None:
    code = (
        "import sys\n"
        f"sys.stderr.write('x' * {LINE_LIMIT + 1024} + '\\nafter\\n')\n"
        "sys.stderr.flush()\n"
        "sys.stdin.read()\n"
    )
    server = await spawn(code)
    try:
        async with asyncio.timeout(20):
            while list(server.stderr)[-1:] != ["after"]:  # noqa: ASYNC110 (no event to await)
                await asyncio.sleep(0.02)
        first = server.stderr[0]
        assert first.endswith("[line cut]")
        assert len(first) < STDERR_LINE_KEPT + 20
    finally:
        await server.stop(500)


async def test_stopping_a_server_twice_signals_its_group_only_once() -> None:
    server = await spawn("import sys; sys.stdin.read()")
    sent: list[int] = []
    signal_group = server._signal

    def counted(sig: signal.Signals) -> None:
        sent.append(sig)
        signal_group(sig)

    server._signal = counted  # type: ignore[method-assign]
    await asyncio.gather(server.stop(500), server.stop(500))
    first = len(sent)
    await server.stop(500)
    assert server.proc.returncode is not None
    assert first >= 1
    assert len(sent) == first


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
async def test_a_server_is_terminated_when_the_process_that_spawned_it_is_killed() -> None:
    daemon_code = (
        "import asyncio, sys\n"
        "from cells.mcp.stdio import ServerProcess\n"
        "async def main():\n"
        "    s = await ServerProcess.spawn(sys.executable, ['-c', 'import time; time.sleep(60)'],"
        " {}, None, log=None, path='/mcp')\n"
        "    print(s.pid, flush=True)\n"
        "    await asyncio.sleep(60)\n"
        "asyncio.run(main())\n"
    )
    daemon = await asyncio.create_subprocess_exec(
        PYTHON, "-c", daemon_code, stdout=asyncio.subprocess.PIPE, cwd=ROOT
    )
    assert daemon.stdout is not None
    try:
        async with asyncio.timeout(10):
            pid = int(await daemon.stdout.readline())
    finally:
        daemon.kill()
        await daemon.wait()
    try:
        assert await eventually(lambda: not alive(pid), 5)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
