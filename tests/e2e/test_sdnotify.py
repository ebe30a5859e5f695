"""systemd notifications (colony.sdnotify) over a real unix datagram socket, as systemd
receives them: READY=1 after boot, WATCHDOG=1 while healthy, STOPPING=1 at stop."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from colony.sdnotify import Notifier

MECLAW = str(Path(sys.executable).with_name("meclaw"))
HELLO = Path(__file__).resolve().parents[2] / "topologies" / "hello"


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    path = str(tmp_path / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(0.2)
        yield sock, path


def received(sock: socket.socket, until: float) -> list[str]:
    """Each datagram received before ``until`` (monotonic), as text."""
    out = []
    while time.monotonic() < until:
        try:
            out.append(sock.recv(4096).decode())
        except TimeoutError:
            continue
    return out


def test_the_daemon_says_ready_pings_the_watchdog_and_says_stopping(
    notify_socket: tuple[socket.socket, str], tmp_path: Path
) -> None:
    sock, path = notify_socket
    root = tmp_path / "hello"
    subprocess.run(["cp", "-r", str(HELLO), str(root)], check=True)
    env = {**os.environ, "NOTIFY_SOCKET": path, "WATCHDOG_USEC": "200000"}  # a ping per 0.1 s
    proc = subprocess.Popen(
        [MECLAW, "--root", str(root), "--daemon"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        first = received(sock, time.monotonic() + 1)
        deadline = time.monotonic() + 20
        while not any("READY=1" in m for m in first) and time.monotonic() < deadline:
            first += received(sock, time.monotonic() + 0.5)
        ready = next(m for m in first if "READY=1" in m)
        assert f"MAINPID={proc.pid}" in ready.splitlines()
        assert f"STATUS=colony running on {root}" in ready.splitlines()
        pings = received(sock, time.monotonic() + 1)
        assert 5 <= pings.count("WATCHDOG=1") <= 15
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        rest = received(sock, time.monotonic() + 0.5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()
    assert any(m.startswith("STOPPING=1") for m in rest)


def test_without_notify_socket_nothing_is_sent_and_nothing_pings() -> None:
    notifier = Notifier({"WATCHDOG_USEC": "1000000"})
    assert notifier.address is None
    assert notifier.send("READY=1") is False


def test_a_watchdog_meant_for_another_process_is_not_pinged(tmp_path: Path) -> None:
    env = {"NOTIFY_SOCKET": str(tmp_path / "s"), "WATCHDOG_USEC": "1000000"}
    assert Notifier(env).watchdog_s == 0.5
    assert Notifier({**env, "WATCHDOG_PID": str(os.getpid())}).watchdog_s == 0.5
    assert Notifier({**env, "WATCHDOG_PID": str(os.getpid() + 1)}).watchdog_s is None
    assert Notifier({**env, "WATCHDOG_USEC": "nonsense"}).watchdog_s is None


async def test_pings_stop_once_the_colony_is_unhealthy_and_it_says_why(
    notify_socket: tuple[socket.socket, str],
) -> None:
    sock, path = notify_socket
    notifier = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "40000"})  # every 20 ms
    trips: list[str] = []
    task = notifier.keep_alive(lambda: not trips)
    assert task is not None
    await asyncio.sleep(0.2)
    trips.append("a wait cycle")
    await asyncio.wait_for(task, 1)
    got = await asyncio.to_thread(received, sock, time.monotonic() + 0.3)
    assert got.count("WATCHDOG=1") >= 3
    assert got[-1].startswith("STATUS=unhealthy")


def test_an_abstract_socket_name_is_honoured() -> None:
    name = f"@meclaw-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name[1:])
        sock.settimeout(2)
        assert Notifier({"NOTIFY_SOCKET": name}).send("READY=1")
        assert sock.recv(100) == b"READY=1"
