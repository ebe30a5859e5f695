"""The bash cell: real shells in real process groups, through a colony and one to one."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from cells.bash import BASH, BashCell
from cells.text import cut_visibly, utf8_len
from colony.cell import ParamProblem
from colony.envelope import source_message
from colony.testing import ColonyHarness, spec_for
from tests.conftest import CONTRACT, TreeFactory, hive

TYPES = {"bash": BASH}


def bash_tree(**params: Any) -> dict[str, Any]:
    return {
        "main/config.json": hive({"from": ".", "to": "./sh"}, {"from": "./sh", "to": "/sink"}),
        "main/sh/config.json": {"cell": {"type": "bash"}, "params": params, "contract": CONTRACT},
    }


def call(args: Any, call_id: str | None = "call-1") -> dict[str, Any]:
    turn = {"origin": "assistant", "type": "tool_call", "text": json.dumps(args)}
    if call_id is not None:
        turn["id"] = call_id
    return {"messages": [turn]}


async def ask(body: Any, **params: Any) -> dict[str, Any]:
    """One message straight into a cell; the content it answers."""
    cell = BashCell(spec_for("/sh", params))
    try:
        [emission] = await cell.handle(source_message("/sh", body, ttl=8))
    finally:
        await cell.close()
    assert emission.target == "/sh"
    content: dict[str, Any] = emission.content
    return content


async def run(command: str, **params: Any) -> dict[str, Any]:
    return await ask(call({"command": command}), **params)


def problems(params: Any) -> list[ParamProblem]:
    assert BASH.check_params is not None
    return BASH.check_params(params, None)


def error_of(content: dict[str, Any]) -> tuple[str, str]:
    header = content["header"]
    assert header["finish_reason"] == "error"
    assert header["operation"] == "bash"
    assert header["had_stderr"] is False
    assert isinstance(header["duration_ms"], int)
    [turn] = content["messages"]
    assert (turn["origin"], turn["type"]) == ("tool", "tool_result")
    return header["error_code"], turn["text"]


async def test_a_command_answers_through_the_edges_on_the_call_id(make_tree: TreeFactory) -> None:
    async with ColonyHarness(make_tree(bash_tree()), capture=["/sink"], cell_types=TYPES) as colony:
        await colony.send("/sh", call({"command": "printf 'hi there'"}))
        await colony.settle()
        [reply] = colony.captured("/sink")
    hop = reply.headers.hop
    assert hop == {
        "operation": "bash",
        "exit_code": 0,
        "had_stderr": False,
        "duration_ms": hop["duration_ms"],
        "bytes": 8,
    }
    assert reply.body["messages"] == [
        {"origin": "tool", "type": "tool_result", "text": "hi there", "id": "call-1"}
    ]


async def test_a_non_zero_exit_is_data_and_stderr_follows_stdout_in_its_block() -> None:
    content = await run("echo out; echo err >&2; exit 7")
    header = content["header"]
    assert "finish_reason" not in header
    assert (header["exit_code"], header["had_stderr"]) == (7, True)
    text = content["messages"][0]["text"]
    assert text == "out\n\n##meclaw-stderr-start##\nerr\n##meclaw-stderr-end##"
    assert header["bytes"] == len(text.encode())


async def test_a_missing_program_is_exit_127_not_an_error() -> None:
    content = await run("no-such-program-anywhere")
    assert content["header"]["exit_code"] == 127
    assert content["header"]["had_stderr"] is True


async def test_death_by_signal_is_exit_code_minus_one() -> None:
    content = await run("kill -9 $$")
    assert content["header"]["exit_code"] == -1
    assert "finish_reason" not in content["header"]


async def test_stdin_is_empty_rather_than_the_daemons() -> None:
    started = time.monotonic()
    content = await run("cat; echo done", external_timeout_ms=5000)
    assert content["messages"][0]["text"] == "done\n"
    assert time.monotonic() - started < 2


async def test_output_past_max_bytes_is_cut_visibly_at_a_character_boundary() -> None:
    content = await run("printf 'ééééé'", max_bytes=5)  # 10 bytes; 5 ends mid-character
    header = content["header"]
    assert header["truncated"] is True
    assert header["bytes"] == 10
    assert content["messages"][0]["text"] == "éé… [truncated, 10 bytes total]"


async def test_a_stream_cut_off_mid_character_shows_no_replacement_character() -> None:
    content = await run("yes é | tr -d '\\n'", max_bytes=3)  # read stops after 4099 bytes
    assert content["header"]["bytes"] == 4098
    assert content["messages"][0]["text"] == "é… [truncated, 4098 bytes total]"


async def test_output_within_max_bytes_is_whole_and_not_marked() -> None:
    content = await run("printf 12345", max_bytes=5)
    assert content["messages"][0]["text"] == "12345"
    assert "truncated" not in content["header"]


async def test_a_runaway_writer_is_cut_off_without_waiting_for_the_timeout() -> None:
    # the pipe is closed 4 KiB past the cap: `yes` dies of SIGPIPE, as under `| head -c`
    started = time.monotonic()
    content = await run("yes", max_bytes=1000, external_timeout_ms=20_000)
    assert time.monotonic() - started < 5
    header = content["header"]
    assert header["truncated"] is True
    assert 1000 < header["bytes"] <= 1000 + 4096
    text = content["messages"][0]["text"]
    assert text.startswith("y\ny\n")
    assert text.endswith(f"… [truncated, {header['bytes']} bytes total]")


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


async def test_a_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    content = await run(f"sleep 30 & echo $! > {pid_file}; wait", external_timeout_ms=300)
    code, text = error_of(content)
    assert (code, text) == ("timeout", "command timed out after 300ms")
    assert content["header"]["exit_code"] == -1
    child = int(pid_file.read_text())
    for _ in range(100):
        if _gone(child):
            break
        await asyncio.sleep(0.02)
    assert _gone(child), "the background sleep outlived the timeout"


async def test_a_command_of_131072_bytes_is_refused_before_any_shell_starts() -> None:
    code, text = error_of(await run(":" + " " * 131_071))
    assert code == "invalid_input"
    assert text.startswith("args.command is 131072 bytes;")
    just_fits = await run(":" + " " * 131_070)
    assert just_fits["header"]["exit_code"] == 0


@pytest.mark.parametrize(
    ("body", "text", "call_id"),
    [
        ({"messages": []}, "no tool_call turn in messages[]", ""),
        ({"system": {}}, "body.messages[] missing or not an array", ""),
        (
            {"messages": call({"command": "true"})["messages"] * 2},
            "expected exactly one tool_call turn, found 2",
            "",
        ),
        (call({"cmd": "true"}), "args.command missing or not a string", "call-1"),
        (call({"command": ""}), "args.command is empty", "call-1"),
        (call(["true"]), "tool_call.text JSON must be an object", "call-1"),
    ],
)
async def test_unusable_calls_are_invalid_input(body: Any, text: str, call_id: str) -> None:
    content = await ask(body)
    assert error_of(content) == ("invalid_input", text)
    assert content["messages"][0]["id"] == call_id


async def test_a_tool_call_that_is_not_json_keeps_its_id() -> None:
    body = {"messages": [{"origin": "assistant", "type": "tool_call", "id": "c9", "text": "{"}]}
    content = await ask(body)
    code, text = error_of(content)
    assert code == "invalid_input"
    assert text.startswith("tool_call.text is not valid JSON")
    assert content["messages"][0]["id"] == "c9"


async def test_a_call_without_an_id_is_answered_on_an_empty_id_so_the_reply_stays_ubf() -> None:
    content = await ask(call({"command": "true"}, call_id=None))
    assert content["messages"][0]["id"] == ""


async def test_a_restricted_sandbox_fails_closed(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    content = await run(f"touch {marker}", sandbox={"trust": "restricted", "network": "deny"})
    code, text = error_of(content)
    assert code == "io_error"
    assert text.startswith("sandbox not applied:")
    assert not marker.exists()
    found = problems({"sandbox": {"trust": "restricted"}})
    assert [(p.code, p.warning) for p in found] == [("sandbox_unavailable", True)]


@pytest.mark.parametrize(
    ("params", "key", "code"),
    [
        ({"max_concurrency": 0}, "max_concurrency", "out_of_range"),
        ({"external_timeout_ms": 0}, "external_timeout_ms", "out_of_range"),
        ({"max_bytes": 0}, "max_bytes", "out_of_range"),
        ({"max_bytes": "1"}, "max_bytes", "wrong_type"),
        ({"cwd": "/tmp"}, "cwd", "unknown_param"),
    ],
)
def test_bad_params_are_reported_by_validate(params: dict[str, Any], key: str, code: str) -> None:
    [problem] = problems(params)
    assert (problem.path, problem.code) == ((key,), code)


def test_empty_params_are_valid() -> None:
    assert problems(None) == []
    assert problems({}) == []


async def test_four_commands_run_at_once_by_default(make_tree: TreeFactory) -> None:
    async with ColonyHarness(make_tree(bash_tree()), capture=["/sink"], cell_types=TYPES) as colony:
        started = time.monotonic()
        for i in range(4):
            await colony.send("/sh", call({"command": "sleep 0.5"}, f"c{i}"))
        await colony.settle()
        elapsed = time.monotonic() - started
        assert len(colony.captured("/sink")) == 4
    assert elapsed < 1.5


async def test_the_shell_gets_the_allow_listed_environment_and_what_params_env_passes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BASH_CELL_PROBE", "not passed")
    monkeypatch.setenv("LC_TIME", "C")
    content = await run(
        'echo "[$BASH_CELL_PROBE] [$GIVEN] [$LC_TIME] [$PATH]"', env={"GIVEN": "by params"}
    )
    assert content["messages"][0]["text"] == f"[] [by params] [C] [{os.environ['PATH']}]\n"


async def test_the_shell_runs_in_the_cells_own_folder(make_tree: TreeFactory) -> None:
    root = make_tree(bash_tree())
    async with ColonyHarness(root, capture=["/sink"], cell_types=TYPES) as colony:
        await colony.send("/sh", call({"command": "pwd"}))
        await colony.settle()
        [reply] = colony.captured("/sink")
    assert reply.body["messages"][0]["text"].endswith("/colony/main/sh\n")  # the harness's copy
    # a cell made in code has no folder: it gets a private one, never the daemon's
    content = await run("pwd")
    assert content["messages"][0]["text"] != os.getcwd() + "\n"


def test_visible_cut_counts_utf8_bytes_and_marks_the_cut() -> None:
    assert (*cut_visibly("abc", 3), utf8_len("abc")) == ("abc", False, 3)
    assert (*cut_visibly("abcd", 3), utf8_len("abcd")) == (
        "abc… [truncated, 4 bytes total]",
        True,
        4,
    )
    assert (*cut_visibly("€€", 4), utf8_len("€€")) == ("€… [truncated, 6 bytes total]", True, 6)
