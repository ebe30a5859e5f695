"""The operator commands: options before a subcommand, ``dead-letters show``, replay's token
variable, ``--log -``, ``graph --format svg``. In-process through typer's runner where no
daemon is needed; real processes where one is."""

from __future__ import annotations

import json
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from colony.cli import app
from colony.dead_letters import DeadLetter
from colony.envelope import source_message
from colony.persist.db import ColonyDb
from tests.conftest import TreeFactory, cell, hive
from tests.e2e.test_cli_daemon import start, wait_for_line

MECLAW = str(Path(sys.executable).with_name("meclaw"))


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


def with_a_dead_letter(make_tree: TreeFactory, text: str = "the lost body") -> Path:
    root = make_tree({"main/config.json": hive()})
    db = ColonyDb(root / "colony.db")
    message = source_message(
        "/nowhere", {"messages": [{"origin": "user", "type": "text", "text": text}]}
    )
    db.write([DeadLetter("unresolved_path", "/", "/nowhere", "/nowhere", message, "no cell here")])
    db.close()
    return root


def test_replay_with_an_unset_token_variable_says_the_variable_is_unset() -> None:
    code, _, err = invoke(
        "dead-letters",
        "replay",
        "1",
        "--api",
        "http://127.0.0.1:9",
        "--api-token-env",
        "MECLAW_TEST_UNSET_TOKEN",
    )
    assert code == 2
    assert "MECLAW_TEST_UNSET_TOKEN" in err
    assert "unset" in err
    assert "Illegal header" not in err


def test_root_given_before_a_subcommand_is_passed_down_to_it(make_tree: TreeFactory) -> None:
    root = with_a_dead_letter(make_tree)
    code, out, err = invoke("--root", str(root), "dead-letters")
    assert code == 0, err
    assert "unresolved_path" in out
    code, out, err = invoke("dead-letters", "--root", str(root), "show", "1")
    assert code == 0, err
    assert "the lost body" in out
    code, out, _ = invoke("--root", str(root), "cells")
    assert code == 0


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--validate", "dead-letters"], "--validate"),
        (["--log-level", "debug", "graph"], "--log-level"),
        (["dead-letters", "--follow", "replay", "1"], "--follow"),
        (["dead-letters", "--json", "show", "1"], "--json"),
        (["--root", ".", "demo"], "--root"),
    ],
)
def test_an_option_before_a_subcommand_it_does_not_apply_to_is_refused(
    args: list[str], named: str
) -> None:
    code, _, err = invoke(*args)
    assert code == 2
    assert f"{named} was given before" in err
    assert "does not apply" in err


def test_root_given_twice_with_two_values_is_refused(make_tree: TreeFactory) -> None:
    first, second = with_a_dead_letter(make_tree), with_a_dead_letter(make_tree)
    code, _, err = invoke("--root", str(first), "dead-letters", "--root", str(second))
    assert code == 2
    assert "--root was given twice" in err


def test_dead_letters_show_prints_the_stored_message_and_whether_it_was_replayed(
    make_tree: TreeFactory,
) -> None:
    root = with_a_dead_letter(make_tree, "hello from the dead")
    code, out, err = invoke("dead-letters", "show", "1", "--root", str(root))
    assert code == 0, err
    assert "dead letter #1  unresolved_path" in out
    assert "no cell here" in out
    assert "replayed  never" in out
    assert '"text": "hello from the dead"' in out
    code, out, _ = invoke("dead-letters", "show", "1", "--root", str(root), "--json")
    doc = json.loads(out)
    assert doc["message"]["body_payload"]["messages"][0]["text"] == "hello from the dead"
    code, _, err = invoke("dead-letters", "show", "7", "--root", str(root))
    assert code == 1
    assert "no dead letter #7" in err


def test_log_dash_writes_the_json_log_to_stdout(make_tree: TreeFactory) -> None:
    root = make_tree({"main/config.json": hive()})
    with subprocess.Popen(
        [MECLAW, "--root", str(root), "--daemon", "--log", "-"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        wait_for_line(process, "logs on stdout")
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=20)
    events = [json.loads(line)["event"] for line in out.splitlines()]
    assert events[0] == "colony_started"
    assert events[-1] == "colony_stopped"
    assert not (root / "-").exists()
    assert not (root / "log.jsonl").exists()
    code, _, err = invoke("--root", str(root), "--log", "-")  # direct mode
    assert code == 2
    assert "stdout carries the colony's answers" in err


def test_graph_svg_without_graphviz_says_how_to_render(
    make_tree: TreeFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_tree(
        {"main/config.json": hive({"from": ".", "to": "./a"}), "main/a/config.json": cell("code")}
    )
    python = sys.executable
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(sys, "executable", str(empty / "python"))
    code, _, err = invoke("graph", "--root", str(root), "--format", "svg")
    assert code == 1
    assert "pip install graphviz-pure" in err
    fake = empty / "dot"  # stands in for Graphviz: copies the DOT into an <svg>
    fake.write_text(
        f"#!{python}\n"
        "import sys\n"
        "src, out = sys.argv[2], sys.argv[4]\n"
        "open(out, 'w').write('<svg>' + open(src).read() + '</svg>')\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    code, out, err = invoke("graph", "--root", str(root), "--format", "svg")
    assert code == 0, err
    assert out.startswith("<svg>digraph colony {")


def test_replay_through_the_daemon_on_root_marks_the_letter_and_a_second_needs_force(
    make_tree: TreeFactory,
) -> None:
    import httpx

    root = make_tree({"main/config.json": hive()})
    with start(root, "--api", "127.0.0.1:0") as daemon:
        try:
            url = wait_for_line(daemon, "HTTP API on").split("HTTP API on ", 1)[1].strip()
            httpx.post(
                f"{url}/messages",
                json={"target": "/nowhere", "body": {"messages": []}},
                trust_env=False,
                timeout=10,
            )
            replay = [MECLAW, "dead-letters", "replay", "1", "--root", str(root)]
            first = subprocess.run(replay, capture_output=True, text=True, timeout=30)
            assert first.returncode == 0, first.stderr  # the API was found from --root
            again = subprocess.run(replay, capture_output=True, text=True, timeout=30)
            assert again.returncode == 1
            assert "add --force" in again.stderr
            forced = subprocess.run(
                [*replay, "--force"], capture_output=True, text=True, timeout=30
            )
            assert forced.returncode == 0, forced.stderr
            listing = subprocess.run(
                [MECLAW, "dead-letters", "--root", str(root)],
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert "replayed as" in listing.stdout.splitlines()[0]
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=20)
    stopped = subprocess.run(
        [MECLAW, "dead-letters", "replay", "1", "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert stopped.returncode == 1
    assert "no daemon is running on" in stopped.stderr


def test_a_cell_failed_before_a_restart_is_listed_failed_and_revived_on_the_running_daemon(
    make_tree: TreeFactory,
) -> None:
    import sqlite3

    import httpx

    root = make_tree(
        {
            "main/config.json": hive({"from": ".", "to": "./a"}),
            "main/a/config.json": cell("code"),
        }
    )
    with start(root) as first:  # once, so the registry holds /a
        wait_for_line(first, "colony running")
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=20) == 0
    with sqlite3.connect(root / "colony.db") as db:
        db.execute("UPDATE registry SET status = 'failed' WHERE path = '/a'")
    listed = subprocess.run(
        [MECLAW, "cells", "--root", str(root)], capture_output=True, text=True, timeout=30
    )
    assert [line.split()[:3] for line in listed.stdout.splitlines()] == [["/a", "code", "failed"]]
    with start(root, "--api", "127.0.0.1:0") as daemon:
        try:
            url = wait_for_line(daemon, "HTTP API on").split("HTTP API on ", 1)[1].strip()
            registry = httpx.get(f"{url}/colony/registry", trust_env=False, timeout=10).json()
            assert registry["registry"][0]["failed"] is True  # still failed after the restart
            revived = subprocess.run(
                [MECLAW, "cells", "revive", "/a", "--root", str(root)],
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert revived.returncode == 0, revived.stderr
            assert "in the running daemon" in revived.stdout
            registry = httpx.get(f"{url}/colony/registry", trust_env=False, timeout=10).json()
            assert registry["registry"][0]["failed"] is False
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=20)
    listed = subprocess.run(
        [MECLAW, "cells", "--root", str(root)], capture_output=True, text=True, timeout=30
    )
    assert listed.stdout.split()[2] == "active"
