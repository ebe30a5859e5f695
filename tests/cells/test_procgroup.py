"""cells.procgroup: a child's signal named for an error text, and a signal to its group."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from cells.procgroup import signal_group, signal_name
from tests.processes import alive


def test_a_signal_is_named_and_an_unknown_one_is_its_number() -> None:
    assert signal_name(9) == "SIGKILL"
    assert signal_name(15) == "SIGTERM"
    assert signal_name(200) == "200"


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
        deadline = time.monotonic() + 10
        while alive(grandchild) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not alive(grandchild)
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()


def test_signalling_a_group_that_is_gone_is_not_an_error() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    child.wait()
    signal_group(child.pid, signal.SIGKILL)
