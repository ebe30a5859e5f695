"""Every shell command in README.md, docs/ and the topology READMEs runs as written.

The commands are read from the ```sh blocks of those pages and run with bash in a copy of the
checkout (its tracked files, with this checkout's ``.venv/bin``), the
``.venv/bin`` folder first on PATH, as the README tells a newcomer to set up. A command that
keeps running (a daemon, ``--follow``) must still be running after a while and stop cleanly on
SIGINT. A command that cannot run here is listed in ``NOT_RUN`` with the reason, so a newly
documented command is run unless someone says why not.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx
import pytest

# One worker runs them all, in order, on one copy of the checkout: a page's commands build on
# each other (set here, at collection, before pytest-xdist reads it).
pytestmark = pytest.mark.xdist_group("documented-commands")

REPO = Path(__file__).resolve().parents[2]
PAGES = ("README.md", "docs/**/*.md", "topologies/*/README.md")

NOT_RUN: dict[str, str] = {
    r"^make test\b": "the suite itself (this test is part of it)",
    r"^make lint\b": "CI runs it right after make test",
    r"^make bench\b": "about ten minutes; bench/ scripts are run by make bench, not the suite",
    r"^make soak\b": "the long runs (minutes); make soak, not the suite",
    r"^make screenshots\b": "shoots docs/console/*.png in a browser; tests/e2e/test_console.py "
    "drives the same pages",
    r"bench/\w+\.py": "a benchmark: make bench runs it",
    r"\| dot -T": "needs Graphviz installed (the --format svg line beside it draws without it)",
    r"^meclaw --root topologies/telegram-research( |$)(?!.*--validate)": "needs a Telegram token, "
    "a model key and a search endpoint (the .env it asks for); make run is its offline twin",
    r"LLM_API_KEY=sk-….*--api": "needs a real model key and endpoint",
}
"""Documented commands this test does not run, each with why (a regex over the command)."""

LONG_RUNNING = re.compile(r"--follow\b|--daemon\b|--api\b|^meclaw watch\b")
"""Commands that run until stopped: they must be running after ``SETTLE_S`` seconds."""
NEEDS_DAEMON = re.compile(r"^meclaw watch\b")
"""Commands that follow a running daemon: run beside the ``live`` fixture's, like those with a
placeholder."""
SETTLE_S = 1.5
READY = "colony running"
"""What the daemon says on stderr once it serves."""
PLACEHOLDERS = ("<id>", "<trace-id>")
"""What a page writes for a dead letter's number and a trace id: filled in from a running
colony (the ``live`` fixture) that holds one of each."""


@dataclass(frozen=True, slots=True)
class Documented:
    page: str
    line: int
    command: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.command}"


def documented_commands() -> list[Documented]:
    """The command lines of every ```sh block (comment lines and blank lines left out)."""
    found: list[Documented] = []
    pages = sorted({p for pattern in PAGES for p in REPO.glob(pattern)})
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for block in re.finditer(r"^```(?:sh|bash|shell)\n(.*?)^```", text, re.S | re.M):
            first = text.count("\n", 0, block.start(1)) + 1
            pending = ""
            for offset, line in enumerate(block.group(1).splitlines()):
                if not pending and (not line.strip() or line.lstrip().startswith("#")):
                    continue
                if line.endswith("\\"):
                    pending += line[:-1]
                    continue
                command = (pending + line).strip()
                pending = ""
                rel = page.relative_to(REPO).as_posix()
                found.append(Documented(rel, first + offset, command))
    return found


def _reason_not_run(command: str) -> str | None:
    for pattern, reason in NOT_RUN.items():
        if re.search(pattern, command):
            return reason
    return None


COMMANDS = documented_commands()


def test_the_pages_document_commands_at_all() -> None:
    assert len(COMMANDS) >= 10, COMMANDS
    assert any(c.command.startswith("make run") for c in COMMANDS)


@pytest.fixture(scope="session")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # One copy for the whole run, not per module: a page's commands build on each other
    # (the first run makes colony.db, the next read it), and an xdist worker may run other
    # modules' tests between them, which would tear a module-scoped copy down.
    return _copy_of_checkout(tmp_path_factory)


def _copy_of_checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the tracked files, with this checkout's programs."""
    dest = tmp_path_factory.mktemp("clone")
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.split(b"\0")
    for raw in tracked:
        if not raw:
            continue
        rel = raw.decode()
        src = REPO / rel
        if not src.is_file():
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel)
    # The copy runs this checkout's programs (.venv/bin), and its install stamp is newer than
    # everything, so make never reinstalls: a reinstall from the copy would point the editable
    # install at a temporary folder.
    (dest / ".venv").mkdir()
    (dest / ".venv" / "bin").symlink_to(REPO / ".venv" / "bin")
    (dest / ".venv" / ".installed").touch()
    return dest


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{REPO / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def _run(command: str, cwd: Path) -> tuple[str, str]:
    """Run one documented command as a reader would; return its stdout and stderr."""
    if "127.0.0.1:7799" in command and not _port_free(7799):
        pytest.skip("127.0.0.1:7799, which the page names, is taken on this machine")
    if LONG_RUNNING.search(command):
        proc = subprocess.Popen(
            ["bash", "-c", command],
            cwd=cwd,
            env=_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        # A daemon says "colony running" once it serves; --follow says nothing: it must
        # simply still be running after SETTLE_S.
        assert proc.stderr is not None
        said: list[str] = []
        ready = threading.Event()

        def watch(stream: IO[str]) -> None:
            for line in stream:
                said.append(line)
                if READY in line:
                    ready.set()

        watcher = threading.Thread(target=watch, args=(proc.stderr,), daemon=True)
        watcher.start()
        deadline = time.monotonic() + SETTLE_S
        while time.monotonic() < deadline and proc.poll() is None and not ready.is_set():
            time.sleep(0.02)
        still_running = proc.poll() is None
        if still_running:
            os.killpg(proc.pid, signal.SIGINT)
        out = proc.communicate(timeout=30)[0]
        watcher.join(timeout=10)
        err = "".join(said)
        assert still_running, f"{command} ended by itself (exit {proc.returncode}): {err}"
        assert proc.returncode in (0, -signal.SIGINT, 130), f"exit {proc.returncode}\n{err}"
        return out, err
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env=_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout, done.stderr


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass(frozen=True, slots=True)
class Live:
    """A copy of the checkout whose ``topologies/hello`` runs under ``--api``, and the dead
    letter and trace one message left there (hello answers to ``/``, where nobody takes the
    answer when no stdio bridge runs: ``hive_no_route``)."""

    checkout: Path
    letter: int
    trace: str

    def fill(self, command: str) -> str:
        return command.replace("<id>", str(self.letter)).replace("<trace-id>", self.trace)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    checkout = _copy_of_checkout(tmp_path_factory)
    daemon = subprocess.Popen(
        [
            str(REPO / ".venv" / "bin" / "meclaw"),
            "--root",
            "topologies/hello",
            "--api",
            "127.0.0.1:0",
        ],
        cwd=checkout,
        env=_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert daemon.stderr is not None
        url = ""
        while not url:
            line = daemon.stderr.readline()
            assert line, "the daemon ended before serving its API"
            if "HTTP API on " in line:
                url = line.split("HTTP API on ", 1)[1].strip()
        user = {"messages": [{"origin": "user", "type": "text", "text": "Ada"}]}
        with httpx.Client(base_url=url, trust_env=False, timeout=10) as client:
            posted = client.post("/messages", json={"target": "/", "body": user})
            assert posted.status_code == 202, posted.text
            deadline = time.monotonic() + 20
            letters: list[dict[str, object]] = []
            while not letters and time.monotonic() < deadline:
                letters = client.get("/colony/dead_letters").json()["dead_letters"]
                time.sleep(0.05)
        assert letters, "hello's answer was never dead-lettered"
        yield Live(checkout, int(str(letters[0]["id"])), posted.json()["trace_id"])
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.communicate(timeout=30)


def _runnable(live: bool) -> list[Documented]:
    return [
        c
        for c in COMMANDS
        if _reason_not_run(c.command) is None
        and (any(p in c.command for p in PLACEHOLDERS) or bool(NEEDS_DAEMON.search(c.command)))
        == live
    ]


@pytest.mark.parametrize("doc", _runnable(live=False), ids=str)
def test_a_documented_command_runs_as_written(doc: Documented, checkout: Path) -> None:
    _, err = _run(doc.command, checkout)
    assert "Traceback" not in err, f"{doc}\n{err}"


@pytest.mark.parametrize("doc", _runnable(live=True), ids=str)
def test_a_documented_command_runs_beside_a_daemon_with_a_real_id_in_its_placeholder(
    doc: Documented, live: Live
) -> None:
    _, err = _run(live.fill(doc.command), live.checkout)
    assert "Traceback" not in err, f"{doc}\n{err}"


def test_every_placeholder_on_the_pages_is_one_the_test_fills() -> None:
    for doc in COMMANDS:
        for found in re.findall(r"<[a-z-]+>", doc.command):
            assert found in PLACEHOLDERS, f"{doc}: {found} is not filled in by this test"
