"""``--debug`` keeps the tracebacks a person at the terminal otherwise does not see, and
``--log -`` puts the JSON log on stdout beside the HTTP API."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import httpx
import pytest

from colony import cli
from tests.conftest import TreeFactory, hive
from tests.e2e.test_cli_daemon import wait_for_line
from tests.e2e.test_failures_visible import MECLAW, raising_tree


def test_debug_writes_a_failures_traceback_after_its_stderr_line_and_logs_debug(
    make_tree: TreeFactory,
) -> None:
    tree = raising_tree()
    quiet = {"from": ".", "to": "./after", "condition": "hop.absent == 'x'"}  # a debug line
    tree["main/config.json"]["params"]["graph"]["edges"].append(quiet)
    root = make_tree(tree)
    done = subprocess.run(
        [MECLAW, "--root", str(root), "--debug"],
        input="Ada\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    err = done.stderr.splitlines()
    [at] = [n for n, line in enumerate(err) if " cell_error " in line]
    assert err[at + 1] == "Traceback (most recent call last):"  # the script's own
    assert "ValueError: no greeting for Ada" in err[at + 2 :]
    logged = [json.loads(line) for line in (root / "log.jsonl").read_text().splitlines()]
    assert "edge_condition_missing_key" in {r["event"] for r in logged if r["level"] == "debug"}


def test_an_internal_error_is_one_report_and_its_traceback_only_under_debug(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken() -> None:
        raise KeyError("a bug")

    monkeypatch.setattr(cli, "app", broken)
    for argv, traceback_shown in ((["meclaw"], False), (["meclaw", "--debug"], True)):
        monkeypatch.setattr(sys, "argv", argv)
        with pytest.raises(SystemExit) as exited:
            cli.main()
        assert exited.value.code == cli.EXIT_INTERNAL
        err = capsys.readouterr().err
        assert err.startswith("meclaw: internal error: KeyError: 'a bug'\n")
        assert ("Traceback (most recent call last):" in err) is traceback_shown
        assert ('raise KeyError("a bug")' in err) is traceback_shown


def test_log_dash_with_the_api_writes_the_json_log_to_stdout(make_tree: TreeFactory) -> None:
    root = make_tree({"main/config.json": hive()})
    with subprocess.Popen(
        [MECLAW, "--root", str(root), "--api", "127.0.0.1:0", "--log", "-"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        url = wait_for_line(process, "HTTP API on").split("HTTP API on ", 1)[1].strip()
        ready = httpx.get(f"{url}/ready", trust_env=False, timeout=10)
        assert (ready.status_code, ready.json()["ready"]) == (200, True)
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=20)
    events = [json.loads(line)["event"] for line in out.splitlines()]
    assert "api_listening" in events
    assert events[-1] == "colony_stopped"
    assert not (root / "log.jsonl").exists()
