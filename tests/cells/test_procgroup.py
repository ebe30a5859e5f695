"""cells.procgroup: a child's signal named for an error text, and a signal to its group."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from cells.procgroup import signal_group, signal_name


def test_a_signal_is_named_and_an_unknown_one_is_its_number() -> None:
    assert signal_name(9) == "SIGKILL"
    assert signal_name(15) == "SIGTERM"
    assert signal_name(200) == "200"


def _ended(pid: int, within: float) -> bool:
    """``pid`` is gone or a zombie within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(") ", 1)[1].startswith("Z"):
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.02)
    return False


def test_a_group_signal_reaches_what_the_child_started_too() -> None:
    # The child starts a grandchild in its group, prints its pid and waits on it.
    script = (
        "import subprocess, sys\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(g.pid, flush=True)\n"
        "g.wait()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, start_new_session=True
    )
    try:
        assert child.stdout is not None
        grandchild = int(child.stdout.readline())
        signal_group(child.pid, signal.SIGTERM)
        assert child.wait(timeout=10) == -signal.SIGTERM
        assert _ended(grandchild, 10)
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()


def test_signalling_a_group_that_is_gone_is_not_an_error() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    child.wait()
    signal_group(child.pid, signal.SIGKILL)
