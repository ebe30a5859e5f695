"""Issue 10 item 6: secrets (``.env`` values, api keys, bot tokens, the daemon's own
credential variables) never appear in the log, the message log, dead letters, ``meta`` or
error texts — through success and failure paths alike."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from cells.code.zygote_client import close_shared_zygotes
from colony.testing import ColonyHarness, ScriptedOpenAI, Status, text_reply
from tests.conftest import CONTRACT, TreeFactory, hive

LLM_KEY = "sk-llm-9Qx7ZPVmLk3RtWw8"
CODE_TOKEN = "tok-code-4Hj2NcBz6YsQ"
NESTED_PASSWORD = "pw-nested-T5gKd8RaMx"
DAEMON_KEY = "sk-daemon-env-X1vN0bFq"
SECRETS = (LLM_KEY, CODE_TOKEN, NESTED_PASSWORD, DAEMON_KEY)

# A script that tries its best to leak: everything it can see goes to stdout, or to stderr
# before failing, or into output that is not the wire shape.
LEAKER = """
import json, os, sys
doc = json.load(sys.stdin)
seen = json.dumps({"params": doc["params"], "env": dict(os.environ)})
mode = doc["body"]["messages"][0]["text"]
if mode == "fail":
    sys.stderr.write(seen)
    print(seen)
    sys.exit(3)
if mode == "warn":
    sys.stderr.write(seen)  # logged by the cell as code_stderr
if mode == "garbage":
    print("not json " + seen)
    sys.exit(0)
print(json.dumps({"messages": [{"origin": "tool", "type": "text", "text": seen}]}))
"""


def code(**params: Any) -> dict[str, Any]:
    return {
        "cell": {"type": "code"},
        "params": {"runner": "python3", "script_inline": LEAKER, **params},
        "contract": CONTRACT,
    }


def tree() -> dict[str, Any]:
    secret_params = {
        "api_token": "${CODE_TOKEN}",
        "upstream": {"password": "${NESTED_PASSWORD}", "x_api_key": "${CODE_TOKEN}"},
    }
    return {
        ".env": (
            f"LLM_KEY={LLM_KEY}\nCODE_TOKEN={CODE_TOKEN}\nNESTED_PASSWORD={NESTED_PASSWORD}\n"
        ),
        "main/config.json": hive(
            {"from": "./brain", "to": "/sink"},
            {"from": "./leak", "to": "/sink"},
            {"from": "./spawned", "to": "/sink"},
            {"from": "./sh", "to": "/sink"},
        ),
        "main/brain/config.json": {
            "cell": {"type": "llm"},
            "params": {
                "provider": "openai",
                "model": "gpt-test",
                "api_key": "${LLM_KEY}",
                "base_url": "http://127.0.0.1:9/v1",
                "max_retries": 0,
            },
            "contract": CONTRACT,
        },
        "main/leak/config.json": code(**secret_params),
        "main/spawned/config.json": code(isolation="spawn", **secret_params),
        # No edge out: every emission of this one becomes a dead letter.
        "main/orphan/config.json": code(**secret_params),
        "main/sh/config.json": {"cell": {"type": "bash"}, "params": {}, "contract": CONTRACT},
        # Swallows what it gets (the harness replaces it with a capture cell).
        "main/sink/config.json": {
            "cell": {"type": "code"},
            "params": {"script_inline": "import sys; sys.stdin.read(); print('[]')"},
            "contract": CONTRACT,
        },
    }


def user(text: str) -> dict[str, Any]:
    return {"messages": [{"origin": "user", "type": "text", "text": text}]}


def shell(command: str) -> dict[str, Any]:
    turn = {
        "origin": "assistant",
        "type": "tool_call",
        "id": "c1",
        "text": json.dumps({"command": command}),
    }
    return {"messages": [turn]}


def assert_no_secret(where: str, text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} leaked into {where}"


def database_dumps(root: Path) -> dict[str, str]:
    dumps = {}
    for db in root.rglob("*.db"):
        with sqlite3.connect(db) as conn:
            dumps[str(db)] = "\n".join(conn.iterdump())
    return dumps


async def test_no_secret_reaches_logs_message_log_dead_letters_meta_or_error_texts(
    make_tree: TreeFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MECLAW_SECURITY_TEST_API_KEY", DAEMON_KEY)
    await close_shared_zygotes()  # a zygote started before the setenv would not see it
    workdir = tmp_path / "run"
    leaky = Status(401, {"error": {"message": f"Incorrect API key provided: {LLM_KEY}"}})
    try:
        async with (
            ScriptedOpenAI([leaky, text_reply("fine")]) as model,
            ColonyHarness(
                make_tree(tree()), capture=["/sink"], llm_base_url=model.url, workdir=workdir
            ) as colony,
        ):
            traces = [
                await colony.send("/brain", user("hi")),  # 401 echoing the key
                await colony.send("/brain", user("again")),  # success
                await colony.send("/brain", {"messages": "not a list"}),  # refused input
            ]
            for cell_path in ("/leak", "/spawned", "/orphan"):
                for mode in ("ok", "warn", "fail", "garbage"):
                    traces.append(await colony.send(cell_path, user(mode)))
            traces.append(await colony.send("/sh", shell("env; env >&2; exit 4")))
            traces.append(await colony.send("/nowhere", user(LLM_KEY[:6])))  # unresolved
            await colony.settle(timeout=60)

            captured = colony.captured("/sink")
            assert len(captured) >= 10
            assert model.headers[0]["authorization"] == f"Bearer {LLM_KEY}"
            codes = {m.headers.hop.get("error_code") for m in captured}
            assert {"auth", "script_failed", "invalid_json"} <= codes
            for message in captured:
                assert_no_secret(
                    f"a message to /sink from {message.headers.hop}",
                    json.dumps(
                        {
                            "hop": message.headers.hop,
                            "ctx": message.headers.context,
                            "body": message.body,
                        },
                        default=str,
                    ),
                )
            letters = await colony.dead_letters()
            assert {d.error_code for d in letters} >= {"unresolved_path"}
            assert len(letters) >= 4
            for letter in letters:
                assert_no_secret("a dead letter", repr(letter))
            for trace_id in traces:
                rows = await colony.message_log(trace_id)
                assert_no_secret("the message log", repr(rows))
            assert_no_secret("the log records", json.dumps(colony.records, default=str))
    finally:
        await close_shared_zygotes()
    for db, dump in database_dumps(workdir).items():
        assert_no_secret(db, dump)


MECLAW = str(Path(sys.executable).with_name("meclaw"))


async def test_a_real_daemon_writes_no_secret_to_log_jsonl_or_its_databases(
    make_tree: TreeFactory,
) -> None:
    """``meclaw --root X`` as a process, debug logging on, driven over its HTTP API."""
    leaky = Status(401, {"error": {"message": f"Incorrect API key provided: {LLM_KEY}"}})
    async with ScriptedOpenAI([leaky, text_reply("fine")]) as model:
        files = tree()
        files[".env"] += f"LLM_URL={model.url}\n"
        files["main/brain/config.json"]["params"]["base_url"] = "${LLM_URL}"
        root = make_tree(files)
        daemon = await asyncio.create_subprocess_exec(
            MECLAW,
            "--root",
            str(root),
            "--api",
            "127.0.0.1:0",
            "--log-level",
            "debug",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "MECLAW_SECURITY_TEST_API_KEY": DAEMON_KEY},
        )
        assert daemon.stderr is not None
        try:
            url = ""
            seen: list[str] = []
            async with asyncio.timeout(30):
                while not url:
                    line = (await daemon.stderr.readline()).decode()
                    assert line, f"the daemon exited before serving its API: {seen}"
                    seen.append(line)
                    if "HTTP API on " in line:
                        url = line.split("HTTP API on ", 1)[1].strip()
            sends = [("/brain", user("hi")), ("/brain", user("again"))]
            sends += [(p, user(m)) for p in ("/leak", "/orphan") for m in ("ok", "warn", "fail")]
            sends += [("/sh", shell("env; exit 4")), ("/nowhere", user("x"))]
            async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=10) as client:
                for target, body in sends:
                    posted = await client.post("/messages", json={"target": target, "body": body})
                    assert posted.status_code == 202, posted.text
                async with asyncio.timeout(30):
                    while True:
                        letters = (await client.get("/colony/dead_letters")).json()
                        if len(letters["dead_letters"]) >= 3 and len(model.headers) >= 2:
                            break
                        await asyncio.sleep(0.1)
                await asyncio.sleep(0.5)
                assert_no_secret("the dead-letter API", json.dumps(letters))
        finally:
            if daemon.returncode is None:
                daemon.send_signal(signal.SIGTERM)
            async with asyncio.timeout(30):
                await daemon.communicate()
        assert model.headers[0]["authorization"] == f"Bearer {LLM_KEY}"
    log = (root / "log.jsonl").read_text()
    assert "colony_stopped" in log
    assert "code_stderr" in log  # what the scripts saw was logged, and held no secret
    assert_no_secret("log.jsonl", log)
    dumps = database_dumps(root)
    assert dumps
    for db, dump in dumps.items():
        assert_no_secret(db, dump)


# Every environment this process can read: its own and each ancestor's (/proc/PID/environ),
# appended as one JSON line to OUT. ``{read}`` is how the script gets its input.
ANCESTORS = """
import json, os, sys
{read}
seen = {{}}
pid = os.getpid()
while pid > 1:
    try:
        with open(f"/proc/{{pid}}/environ", "rb") as handle:
            seen[pid] = handle.read().decode("utf-8", "replace")
    except OSError as exc:
        seen[pid] = f"unreadable: {{exc.strerror}}"
    with open(f"/proc/{{pid}}/stat") as handle:
        pid = int(handle.read().rsplit(")", 1)[1].split()[1])
seen["cwd"] = os.getcwd()
seen["dotenv"] = os.path.exists(".env")
with open({out!r}, "a") as out:
    out.write(json.dumps(seen) + "\\n")
print("[]")
"""


async def test_no_cell_process_can_read_the_daemons_environment_through_proc(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    """Issue 15 item 15: a script read the daemon's whole environment through
    ``/proc/$PPID/environ``. Now no ancestor a cell process can see holds a secret: the parent
    is the zygote (started with the allow-list), the daemon's own block is zeroed and it is not
    dumpable; and the process runs in its cell's folder, not beside the root's ``.env``."""
    out = tmp_path / "seen.jsonl"
    script = ANCESTORS.format(read="sys.stdin.read()", out=str(out))
    command = f"python3 - <<'EOF'\n{ANCESTORS.format(read='', out=str(out))}\nEOF"
    daemon_secrets = {
        "MECLAW_SECURITY_TEST_API_KEY": DAEMON_KEY,
        "AWS_ACCESS_KEY_ID": "AKIA" + DAEMON_KEY[-16:].upper().replace("-", "Q"),
        "DATABASE_URL": f"postgres://app:{DAEMON_KEY}@db.internal/app",
    }
    files = {
        ".env": f"LLM_KEY={LLM_KEY}\n",
        "main/config.json": hive(),
        "main/fork/config.json": {
            "cell": {"type": "code"},
            "params": {"script_inline": script},
            "contract": CONTRACT,
        },
        "main/spawn/config.json": {
            "cell": {"type": "code"},
            "params": {"script_inline": script, "isolation": "spawn"},
            "contract": CONTRACT,
        },
        "main/sh/config.json": {"cell": {"type": "bash"}, "params": {}, "contract": CONTRACT},
    }
    root = make_tree(files)
    daemon = await asyncio.create_subprocess_exec(
        MECLAW,
        "--root",
        str(root),
        "--api",
        "127.0.0.1:0",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **daemon_secrets},
        cwd=root,  # the daemon runs beside its .env
    )
    assert daemon.stderr is not None
    try:
        url = ""
        async with asyncio.timeout(30):
            while not url:
                line = (await daemon.stderr.readline()).decode()
                assert line, "the daemon exited before serving its API"
                if "HTTP API on " in line:
                    url = line.split("HTTP API on ", 1)[1].strip()
        async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=10) as client:
            for target in ("/fork", "/spawn"):
                posted = await client.post("/messages", json={"target": target, "body": user("x")})
                assert posted.status_code == 202, posted.text
            posted = await client.post("/messages", json={"target": "/sh", "body": shell(command)})
            assert posted.status_code == 202, posted.text
            async with asyncio.timeout(30):
                while True:  # each cell appends one line
                    if out.exists() and len(out.read_text().splitlines()) >= 3:
                        break
                    await asyncio.sleep(0.05)
    finally:
        if daemon.returncode is None:
            daemon.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            await daemon.communicate()
    reports = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(reports) == 3
    for report in reports:
        assert report.pop("cwd").startswith(str(root / "main"))
        assert report.pop("dotenv") is False
        assert str(daemon.pid) in report, "the daemon is an ancestor the script can name"
        seen = report[str(daemon.pid)]
        assert seen.startswith("unreadable") or not seen.strip("\0"), seen[:200]
        dump = json.dumps(report)
        for secret in (*daemon_secrets.values(), LLM_KEY):
            assert secret not in dump
