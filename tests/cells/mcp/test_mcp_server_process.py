"""The stdio server process itself: its stderr pump, its stop, its end with the daemon."""

from __future__ import annotations

import asyncio
import signal
import sys

from cells.mcp.stdio import LINE_LIMIT, STDERR_LINE_KEPT, ServerProcess

PYTHON = sys.executable


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
