"""Issue 10 item 6: code and bash cells get a scrubbed environment and run with CPU-time,
memory and output limits."""

from __future__ import annotations

import json
import resource
from typing import Any

import pytest

from cells.bash import BashCell
from cells.code.process import close_shared_zygotes, looks_secret_variable, scrubbed_environ
from colony.envelope import source_message
from colony.testing import ColonyHarness, spec_for
from tests.conftest import CONTRACT, TreeFactory, hive

SECRET = "sk-daemon-env-7f3a9c1e5b"
SECRET_VARIABLES = {
    "OPENAI_API_KEY": SECRET + "-1",
    "TELEGRAM_BOT_TOKEN": SECRET + "-2",
    "AWS_SECRET_ACCESS_KEY": SECRET + "-3",
    "PGPASSWORD": SECRET + "-4",
    "MECLAW_API_TOKEN": SECRET + "-5",
}
ISOLATIONS = ["fork", "spawn"]


@pytest.fixture
def secret_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRET_VARIABLES.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SECURITY_HARMLESS_PROBE", "visible")


def code_tree(script: str, **params: Any) -> dict[str, Any]:
    return {
        "main/config.json": hive({"from": ".", "to": "./a"}, {"from": "./a", "to": "/sink"}),
        "main/a/config.json": {
            "cell": {"type": "code"},
            "params": {"runner": "python3", "script_inline": script, **params},
            "contract": CONTRACT,
        },
    }


async def run_code(make_tree: TreeFactory, script: str, **params: Any) -> Any:
    # A fresh zygote per test: the shared one may predate the monkeypatched environment.
    await close_shared_zygotes()
    async with ColonyHarness(make_tree(code_tree(script, **params)), capture=["/sink"]) as colony:
        await colony.send("/", {"messages": [{"origin": "user", "type": "text", "text": "x"}]})
        await colony.settle(timeout=60)
        [message] = colony.captured("/sink")
    await close_shared_zygotes()
    return message


def error_of(message: Any) -> tuple[str, str]:
    hop = message.headers.hop
    assert hop["finish_reason"] == "error"
    return hop["error_code"], message.body["messages"][0]["text"]


async def run_bash(command: str, **params: Any) -> dict[str, Any]:
    cell = BashCell(spec_for("/sh", params))
    turn = {
        "origin": "assistant",
        "type": "tool_call",
        "id": "c1",
        "text": json.dumps({"command": command}),
    }
    [emission] = await cell.handle(source_message("/sh", {"messages": [turn]}, ttl=8))
    content: dict[str, Any] = emission.content
    return content


# -- environment ----------------------------------------------------------------------------


def test_credential_looking_variables_are_scrubbed() -> None:
    for name in [*SECRET_VARIABLES, "GITHUB_TOKEN", "SLACK_WEBHOOK_SECRET", "DB_CREDENTIALS"]:
        assert looks_secret_variable(name), name
    for name in ["PATH", "HOME", "LANG", "LC_ALL", "PYTHONPATH", "TZ", "KEYBOARD", "TMPDIR"]:
        assert not looks_secret_variable(name), name
    env = scrubbed_environ({"PATH": "/bin", "OPENAI_API_KEY": "x", "LANG": "C"})
    assert env == {"PATH": "/bin", "LANG": "C"}


ENV_DUMP = """
import json, os, sys
json.load(sys.stdin)
print(json.dumps({"messages": [{"origin": "tool", "type": "text", "text": json.dumps(dict(os.environ))}]}))
"""


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.usefixtures("secret_environment")
async def test_a_code_script_sees_no_secret_of_the_daemons_environment(
    make_tree: TreeFactory, isolation: str
) -> None:
    message = await run_code(make_tree, ENV_DUMP, isolation=isolation)
    seen = json.loads(message.body["messages"][-1]["text"])
    assert seen.get("SECURITY_HARMLESS_PROBE") == "visible"
    assert "PATH" in seen
    assert SECRET not in json.dumps(seen)
    assert not set(SECRET_VARIABLES) & set(seen)


@pytest.mark.usefixtures("secret_environment")
async def test_a_bash_command_sees_no_secret_of_the_daemons_environment() -> None:
    content = await run_bash("env")
    text = content["messages"][0]["text"]
    assert "SECURITY_HARMLESS_PROBE=visible" in text
    assert "PATH=" in text
    assert SECRET not in text
    assert content["header"]["exit_code"] == 0


# -- CPU ------------------------------------------------------------------------------------

SPIN = "import json, sys\njson.load(sys.stdin)\nwhile True:\n    pass\n"


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_a_code_script_spinning_forever_is_stopped_by_the_cpu_limit(
    make_tree: TreeFactory, isolation: str
) -> None:
    message = await run_code(
        make_tree, SPIN, isolation=isolation, cpu_seconds=1, external_timeout_ms=30_000
    )
    code, text = error_of(message)
    assert code == "script_failed"
    assert message.headers.hop["exit_code"] == -1
    assert message.headers.hop["duration_ms"] < 20_000  # the CPU limit, not the wall clock
    assert "CPU limit" in text


async def test_a_bash_command_spinning_forever_is_stopped_by_the_cpu_limit() -> None:
    content = await run_bash("while :; do :; done", cpu_seconds=1, external_timeout_ms=30_000)
    assert content["header"]["exit_code"] == -1  # death by signal (SIGXCPU, then SIGKILL)
    assert content["header"]["duration_ms"] < 20_000
    assert "finish_reason" not in content["header"]


async def test_the_bash_limits_are_in_place_before_the_command_runs() -> None:
    content = await run_bash("ulimit -t; ulimit -v", cpu_seconds=7, memory_mb=300)
    assert content["messages"][0]["text"] == f"7\n{300 * 1024}\n"
    default = await run_bash("ulimit -t; ulimit -v", external_timeout_ms=2500)
    assert default["messages"][0]["text"] == f"3\n{2048 * 1024}\n"
    lifted = await run_bash("ulimit -v", memory_mb=None)
    assert lifted["messages"][0]["text"] in ("unlimited\n", f"{_hard_as_kb()}\n")


def _hard_as_kb() -> int:
    return resource.getrlimit(resource.RLIMIT_AS)[1] // 1024


# -- memory ---------------------------------------------------------------------------------

ALLOCATE = "import json, sys\njson.load(sys.stdin)\nblob = bytearray(2 * 1024**3)\nprint('{}')\n"


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_a_code_script_allocating_2_gb_fails_with_a_typed_error(
    make_tree: TreeFactory, isolation: str
) -> None:
    message = await run_code(make_tree, ALLOCATE, isolation=isolation, memory_mb=256)
    code, text = error_of(message)
    assert code == "script_failed"
    assert "MemoryError" in text


async def test_a_bash_command_allocating_2_gb_fails() -> None:
    content = await run_bash("python3 -c 'bytearray(2 * 1024**3)' && echo allocated", memory_mb=256)
    text = content["messages"][0]["text"]
    assert content["header"]["exit_code"] != 0
    assert "MemoryError" in text
    assert "allocated" not in text


# -- output ---------------------------------------------------------------------------------

FLOOD = (
    "import json, sys\njson.load(sys.stdin)\nchunk = 'x' * (1 << 20)\n"
    "for _ in range(100):\n    sys.stdout.write(chunk)\n"
)


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_a_code_script_printing_100_mb_is_stopped(
    make_tree: TreeFactory, isolation: str
) -> None:
    message = await run_code(make_tree, FLOOD, isolation=isolation)
    code, text = error_of(message)
    assert code == "invalid_json"
    assert "exceeded max_output_bytes" in text
    assert len(text) < 10_000


async def test_a_bash_command_printing_100_mb_is_cut() -> None:
    content = await run_bash("head -c 104857600 /dev/zero | tr '\\0' x", max_bytes=4096)
    text = content["messages"][0]["text"]
    assert len(text.encode()) < 4096 + 200
    assert content["header"]["truncated"] is True
    assert content["header"]["bytes"] <= 4096 + 2 * 4096
