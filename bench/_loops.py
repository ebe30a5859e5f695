"""Which event loop a benchmark runs on: asyncio's own, uvloop, or each in turn.

The daemon takes uvloop when it imports (colony/daemon.py), so every figure is worth knowing on
both. ``--loop both`` runs the benchmark once per loop, each in a fresh interpreter, so nothing
a run leaves behind (peak RSS, warm workers, caches, garbage) leaks into the other's figures.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import subprocess
import sys
from collections.abc import Callable, Coroutine
from typing import Any

LOOPS = ("asyncio", "uvloop")
UVLOOP_HINT = "uvloop is not installed: pip install -e '.[uvloop]'"


def uvloop_available() -> bool:
    return importlib.util.find_spec("uvloop") is not None


def add_loop_argument(parser: argparse.ArgumentParser) -> None:
    default = "both" if uvloop_available() else "asyncio"
    parser.add_argument(
        "--loop",
        choices=[*LOOPS, "both"],
        default=default,
        help=f"event loop to run on (default here: {default})",
    )


def chosen_loops(choice: str) -> list[str]:
    """The loops ``--loop`` names that can run here; uvloop asked for but missing exits."""
    if choice == "both":
        if uvloop_available():
            return list(LOOPS)
        print(f"only asyncio's loop measured: {UVLOOP_HINT}", file=sys.stderr)
        return ["asyncio"]
    if choice == "uvloop" and not uvloop_available():
        raise SystemExit(UVLOOP_HINT)
    return [choice]


def _argv_with_loop(argv: list[str], loop: str) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--loop":
            skip = True
        elif not arg.startswith("--loop="):
            out.append(arg)
    return [*out, "--loop", loop]


def run_on(loop: str, main: Callable[[], Coroutine[Any, Any, int | None]]) -> int:
    """Run ``main()`` on a new loop of the named kind; its exit code (None counts as 0)."""
    factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    if loop == "uvloop":
        factory = importlib.import_module("uvloop").new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main()) or 0


def per_loop(choice: str, main: Callable[[str], Coroutine[Any, Any, int | None]]) -> int:
    """Run ``main(loop)`` on each loop ``--loop`` names; the first failing exit code, or 0.

    One loop runs here. Several re-run this script once per loop, each in a new process.
    """
    loops = chosen_loops(choice)
    if len(loops) == 1:
        print(f"[event loop: {loops[0]}]", flush=True)
        return run_on(loops[0], lambda: main(loops[0]))
    failed = 0
    for loop in loops:
        argv = [sys.executable, sys.argv[0], *_argv_with_loop(sys.argv[1:], loop)]
        code = subprocess.run(argv, check=False).returncode
        if code and not failed:
            failed = code if code > 0 else 1  # a negative code: killed by a signal
    return failed
