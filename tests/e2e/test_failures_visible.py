"""Failures are visible: every failure leaves one log line with its cause, direct mode echoes
warnings and errors on stderr, and ``meclaw trace`` shows a failed hop's error and where a dead
letter died."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from colony.observability import file_logger
from colony.testing import ColonyHarness
from colony.traceview import trace_lines
from scripted import ScriptedOpenAI, ScriptItem, error_status, text_reply
from tests.api_client import served
from tests.conformance.cells import TEST_TYPES, user
from tests.conftest import CONTRACT, TreeFactory, cell, hive

MECLAW = str(Path(sys.executable).with_name("meclaw"))

RAISES = "def greet(name):\n    raise ValueError('no greeting for ' + name)\ngreet('Ada')\n"


def raising_tree() -> dict[str, Any]:
    return {
        "main/config.json": hive(
            {"from": ".", "to": "./greeter", "condition": "!has(hop.finish_reason)"},
            {"from": "./greeter", "to": "./after"},
        ),
        "main/greeter/config.json": cell("code", {"script_inline": RAISES}),
        "main/after/config.json": hive(),  # no out-edge: the error dies here, hive_no_route
    }


async def test_a_script_that_raises_logs_one_error_line_with_its_traceback(
    make_tree: TreeFactory,
) -> None:
    async with ColonyHarness(make_tree(raising_tree())) as colony:
        await colony.send("/", user("Ada"))
        await colony.settle()
        [error] = colony.logs(level="error")  # one ERROR line for the failure, no other
        assert error["event"] == "cell_error"
        assert (error["cell"], error["error_code"]) == ("/greeter", "script_failed")
        assert error["error"] == "ValueError: no greeting for Ada"
        assert "Traceback (most recent call last)" in error["traceback"]
        assert error["trace_id"]
        [dead] = colony.logs("dead_lettered", "warning")  # and where it then died
        assert (dead["error_code"], dead["target"]) == ("hive_no_route", "/after")
        assert dead["detail"]


async def test_a_cell_crash_logs_its_traceback(make_tree: TreeFactory) -> None:
    tree = {
        "main/config.json": hive({"from": ".", "to": "./a"}),
        "main/a/config.json": cell("stateful_echo", {"crash_on": "boom"}),
    }
    async with ColonyHarness(make_tree(tree), cell_types=TEST_TYPES) as colony:
        await colony.send("/a", user("boom"))
        await colony.settle()
        [crash] = colony.logs(level="error")
        assert crash["event"] == "cell_crashed"
        assert crash["error"] == "RuntimeError: told to crash on 'boom'"
        assert "Traceback (most recent call last)" in crash["traceback"]
        assert "raise RuntimeError" in crash["traceback"]


KEY = "sk-never-logged-4711"
TOOLS = [{"name": "calc", "description": "Add.", "input_schema": {"type": "object"}}]


def brain_tree(**params: Any) -> dict[str, Any]:
    return {
        "main/config.json": hive(
            {"from": ".", "to": "./brain"}, {"from": "./brain", "to": "/sink"}
        ),
        "main/brain/config.json": {
            "cell": {"type": "llm"},
            "params": {
                "provider": "openai",
                "model": "m",
                "api_key": KEY,
                "max_retries": 0,
                **params,
            },
            "contract": CONTRACT,
        },
    }


def the_one_error(colony: ColonyHarness) -> dict[str, Any]:
    """The only ERROR record, checked free of the API key."""
    [error] = colony.logs(level="error")
    assert KEY not in json.dumps(colony.records, default=str)
    return error


async def test_a_failing_provider_call_logs_one_error_line_with_url_status_and_its_text(
    make_tree: TreeFactory,
) -> None:
    async with (
        ScriptedOpenAI([error_status(403, message="this key may not use m")]) as model,
        ColonyHarness(make_tree(brain_tree()), capture=["/sink"], llm_base_url=model.url) as colony,
    ):
        await colony.send("/", user())
        await colony.settle()
        error = the_one_error(colony)
        assert (error["event"], error["cell"], error["error_code"]) == (
            "cell_error",
            "/brain",
            "provider_error",
        )
        assert "this key may not use m" in error["error"]
        assert f"url={model.url}" in error["error"]
        assert "status=403" in error["error"]


async def test_a_failing_provider_call_in_a_loop_turn_names_url_and_status_too(
    make_tree: TreeFactory,
) -> None:
    async with (
        ScriptedOpenAI([error_status(401, message="bad key")]) as model,
        ColonyHarness(make_tree(brain_tree()), capture=["/sink"], llm_base_url=model.url) as colony,
    ):
        await colony.send("/", {"loop": {"tools": TOOLS}, **user()})
        await colony.settle()
        error = the_one_error(colony)
        assert error["event"] == "cell_error"
        assert error["error"].startswith("LLM provider error - HTTP 401: bad key")
        assert f"url={model.url}" in error["error"]
        assert "status=401" in error["error"]
        [reply] = colony.captured("/sink")
        assert reply.body["error"] == "LLM provider error - HTTP 401: bad key"  # as meclaw's


async def test_a_failing_provider_call_degrades_health_until_a_call_works(
    make_tree: TreeFactory,
) -> None:
    script: list[ScriptItem] = [
        error_status(403, message="this key may not use m"),
        text_reply("hello"),
    ]
    async with (
        ScriptedOpenAI(script) as model,
        ColonyHarness(make_tree(brain_tree()), capture=["/sink"], llm_base_url=model.url) as colony,
        served(colony) as api,
    ):
        await colony.send("/", user())
        await colony.settle()
        doc = (await api.client.get("/health")).json()
        assert doc["status"] == "degraded"
        [reason] = doc["reasons"]
        assert reason.startswith(f"/brain provider: POST {model.url}")
        assert "HTTP 403: this key may not use m" in reason
        assert KEY not in json.dumps(doc)
        await colony.send("/", user())
        await colony.settle()
        doc = (await api.client.get("/health")).json()
        assert (doc["status"], doc["io_liveness"][0]["state"]) == ("ok", "ok")


async def test_a_failing_provider_call_on_llm_chat_logs_one_error_line(
    make_tree: TreeFactory,
) -> None:
    async with (
        ScriptedOpenAI([error_status(500, message="overloaded")]) as model,
        ColonyHarness(make_tree(brain_tree()), capture=["/sink"], llm_base_url=model.url) as colony,
        served(colony) as api,
    ):
        answer = await api.client.post("/llm/chat?cell=/brain", json={"prompt": "hi"})
        assert answer.status_code == 500  # the provider's status, passed on
        assert answer.json()["detail"].startswith("LLM provider error - HTTP 500")
        error = the_one_error(colony)
        assert (error["event"], error["status"], error["url"]) == (
            "llm_chat_failed",
            500,
            f"{model.url}/chat/completions",
        )
        assert "overloaded" in error["error"]


def test_the_stderr_echo_writes_warnings_and_errors_one_compact_line_each() -> None:
    log, echo = io.StringIO(), io.StringIO()
    logger = file_logger(log, "debug", echo=echo)
    logger.info("quiet", cell="/a")
    logger.warning("dead_lettered", error_code="no_route", target="/x", detail="none matched")
    logger.error(
        "cell_error",
        cell="/greeter",
        error="Traceback (most recent call last):\n  File 'x', line 1\nValueError: boom\n",
    )
    lines = echo.getvalue().splitlines()
    assert lines == [
        "meclaw: warning dead_lettered error_code=no_route target=/x detail=none matched",
        "meclaw: error cell_error cell=/greeter error=ValueError: boom",
    ]
    assert len(log.getvalue().splitlines()) == 3  # the file keeps everything, in full


def test_in_direct_mode_a_failure_reaches_stderr_as_one_line(make_tree: TreeFactory) -> None:
    root = make_tree(raising_tree())
    done = subprocess.run(
        [MECLAW, "--root", str(root)], input="Ada\n", capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    [failure] = [line for line in done.stderr.splitlines() if " cell_error " in line]
    assert failure.startswith("meclaw: error cell_error cell=/greeter error_code=script_failed")
    assert "error=ValueError: no greeting for Ada" in failure
    assert "Traceback" not in done.stderr  # in log.jsonl, not in the terminal
    assert all(line.startswith("meclaw: ") for line in done.stderr.splitlines())
    logged = [json.loads(line) for line in (root / "log.jsonl").read_text().splitlines()]
    assert any("Traceback" in str(r.get("traceback")) for r in logged if r["event"] == "cell_error")


async def test_trace_shows_the_failed_step_its_error_and_where_the_dead_letter_died(
    make_tree: TreeFactory,
) -> None:
    async with ColonyHarness(make_tree(raising_tree())) as colony:
        trace_id = await colony.send("/", user("Ada"), ttl=9)
        await colony.settle()
        lines = trace_lines(colony.colony.db.source, trace_id)
    patterns = [
        rf"trace {trace_id}  3 hops · \d+ ms · 1 dead letter",
        r"└── @external → /  ttl 8  \+0 ms  fired /#0",
        # how long the script took, and that it failed
        r"    └── / → /greeter  ttl 7  \+\d+ ms  ·  took \d+ ms · error",
        r"        ├── ✗ error script_failed: ValueError: no greeting for Ada",
        r"        └── /greeter → /after  ttl 6  \+\d+ ms  \[finish_reason=error, .*\]",
        r"            └── ✗ died here: dead letter #1 hive_no_route: no out-edge of the hive "
        r"matched the message",
    ]
    assert len(lines) == len(patterns), lines
    for line, pattern in zip(lines, patterns, strict=True):
        assert re.fullmatch(pattern, line), (line, pattern)
