"""The Dockerfile and the systemd unit hold what docs/deploy.md says, and the Dockerfile's
HEALTHCHECK and CMD work against a real daemon.

The image itself cannot be built here (no base image can be pulled): deploy/docker-steps.sh
performs its steps without docker and runs in CI; these checks keep the two in step.
"""

from __future__ import annotations

import configparser
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MECLAW = str(Path(sys.executable).with_name("meclaw"))


def instructions() -> list[str]:
    """The Dockerfile's instructions, one string each (continuations joined, comments out)."""
    text = re.sub(r"\\\n\s*", " ", (REPO / "Dockerfile").read_text(encoding="utf-8"))
    return [
        ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")
    ]


def instruction(prefix: str) -> str:
    [found] = [i for i in instructions() if i.startswith(prefix)]
    return found


def test_every_dockerfile_line_the_steps_script_reads_is_there_exactly_once() -> None:
    script = (REPO / "deploy/docker-steps.sh").read_text(encoding="utf-8")
    patterns = re.findall(r"\$\(one '([^']+)'", script)
    assert len(patterns) == 4  # pip wheel, pip install, HEALTHCHECK, CMD
    for pattern in patterns:
        assert len([i for i in instructions() if re.search(pattern, i)]) == 1, pattern


def test_the_image_runs_on_slim_python_as_a_user_with_its_state_in_a_volume() -> None:
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in instructions()
    assert [i for i in instructions() if i.startswith("FROM ")] == [
        "FROM ${PYTHON_IMAGE} AS build",
        "FROM ${PYTHON_IMAGE}",
    ]
    assert instruction("USER ") == "USER meclaw"
    assert instruction("VOLUME ") == 'VOLUME ["/var/lib/meclaw"]'
    cmd = shlex.split(instruction("CMD "))
    assert cmd[:3] == ["CMD", "exec", "meclaw"]
    flags = cmd[3:]
    assert flags[flags.index("--root") + 1] == "/colony"
    assert flags[flags.index("--state-dir") + 1] == "/var/lib/meclaw"
    assert flags[flags.index("--api") + 1] == "$MECLAW_API"
    assert flags[flags.index("--api-token-env") + 1] == "MECLAW_API_TOKEN"
    assert "MECLAW_API=0.0.0.0:7799" in instruction("ENV ")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _healthcheck(env: dict[str, str]) -> int:
    command = re.sub(r"^HEALTHCHECK .* CMD ", "", instruction("HEALTHCHECK "))
    python = shlex.split(command)
    assert python[0] == "python"  # the slim image has no curl
    return subprocess.run([sys.executable, *python[1:]], env=env, timeout=30).returncode


def test_the_healthcheck_passes_on_a_serving_daemon_and_fails_once_it_stopped(
    tmp_path: Path,
) -> None:
    root = tmp_path / "hello"
    shutil.copytree(REPO / "topologies/hello", root)
    env = {**os.environ, "MECLAW_API": f"127.0.0.1:{_free_port()}", "MECLAW_API_TOKEN": "t0k3n"}
    proc = subprocess.Popen(
        [
            MECLAW,
            "--root",
            str(root),
            "--api",
            env["MECLAW_API"],
            "--api-token-env",
            "MECLAW_API_TOKEN",
            "--log",
            "-",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while _healthcheck(env) != 0:
            assert proc.poll() is None
            assert time.monotonic() < deadline
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert _healthcheck(env) != 0


def test_off_loopback_the_cmd_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    flags = shlex.split(instruction("CMD "))[3:]
    flags = [f.replace("$MECLAW_API", f"0.0.0.0:{_free_port()}") for f in flags]
    flags[flags.index("--state-dir") + 1] = str(tmp_path / "state")
    flags[flags.index("--root") + 1] = str(REPO / "topologies/hello")
    env = {k: v for k, v in os.environ.items() if k != "MECLAW_API_TOKEN"}
    done = subprocess.run([MECLAW, *flags], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert "--api-token-env MECLAW_API_TOKEN: the variable is unset or empty" in done.stderr


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(REPO / "deploy/meclaw.service", encoding="utf-8")
    return parser


def test_the_systemd_unit_is_notify_restarts_on_failure_and_has_a_watchdog() -> None:
    service = unit()["Service"]
    assert service["Type"] == "notify"
    assert service["Restart"] == "on-failure"
    assert service["RestartSec"] == "5s"
    assert service["WatchdogSec"] == "30s"
    assert service["User"] == "meclaw"
    exec_start = shlex.split(service["ExecStart"])
    assert exec_start[exec_start.index("--state-dir") + 1] == "/var/lib/meclaw"
    assert service["StateDirectory"] == "meclaw"
    assert "--api-token-env" in exec_start


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_systemd_finds_nothing_wrong_with_the_unit_but_the_missing_install() -> None:
    done = subprocess.run(
        ["systemd-analyze", "verify", str(REPO / "deploy/meclaw.service")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    complaints = [
        line
        for line in (done.stdout + done.stderr).splitlines()
        if line.strip() and "/opt/meclaw/bin/meclaw is not executable" not in line
    ]
    assert complaints == []
