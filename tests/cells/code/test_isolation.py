"""cells.code.isolation: the environment a job gets, and the daemon's sealed start-up block."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cells.code.isolation import (
    job_environment,
    remove_directory,
    seal_daemon,
    working_directory,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux /proc")


def test_sealing_zeroes_the_start_up_environment_and_keeps_every_variable_usable() -> None:
    code = (
        "import ctypes, os, subprocess\n"
        "from cells.code.isolation import seal_daemon\n"
        "before = open('/proc/self/environ', 'rb').read()\n"
        "seal_daemon(); seal_daemon()\n"
        "after = open('/proc/self/environ', 'rb').read()\n"
        "libc = ctypes.CDLL(None); libc.getenv.restype = ctypes.c_char_p\n"
        "child = subprocess.run(['sh', '-c', 'echo $SEAL_PROBE'], capture_output=True, text=True)\n"
        "print(b'SEAL_PROBE=s3cr3t' in before, after.strip(b'\\0') == b'', len(after) == len(before),\n"
        "      libc.getenv(b'SEAL_PROBE').decode(), os.environ['SEAL_PROBE'], child.stdout.strip())\n"
    )
    env = {**os.environ, "SEAL_PROBE": "s3cr3t"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert done.stdout.split() == ["True", "True", "True", "s3cr3t", "s3cr3t", "s3cr3t"]


def test_a_sealed_process_is_not_dumpable() -> None:
    seal_daemon()  # this test process: what every daemon does before its first helper starts
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(3, 0, 0, 0, 0) == 0  # PR_GET_DUMPABLE
    assert not Path("/proc/self/environ").read_bytes().strip(b"\0")


def test_only_allow_listed_variables_pass_unless_params_add_them() -> None:
    source = {"PATH": "/bin", "LC_MESSAGES": "C", "DATABASE_URL": "postgres://u:p@h/d"}
    assert job_environment(None, source) == {"PATH": "/bin", "LC_MESSAGES": "C"}
    assert job_environment({"DATABASE_URL": "given"}, source)["DATABASE_URL"] == "given"


def test_a_cell_without_a_folder_works_in_a_private_directory_it_removes(tmp_path: Path) -> None:
    assert working_directory(tmp_path) == (str(tmp_path), None)
    where, temporary = working_directory(None)
    assert temporary is not None
    assert Path(where) == temporary
    assert temporary.is_dir()
    assert where != os.getcwd()
    remove_directory(temporary)
    assert not temporary.exists()
