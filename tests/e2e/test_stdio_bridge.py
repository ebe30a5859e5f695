"""Direct mode: the stdio bridge of ``meclaw --root DIR`` (no --api, no --daemon)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import TreeFactory, cell, hive

MECLAW = str(Path(sys.executable).with_name("meclaw"))

ANSWER = """
import json, sys
doc = json.load(sys.stdin)
text = doc["body"]["messages"][-1]["text"]
print(json.dumps({"header": {"done": True}, "messages": [{"origin": "assistant", "type": "text", "text": "pong: " + text}]}))
"""


def echo_tree(make_tree: TreeFactory) -> Path:
    return make_tree(
        {
            "main/config.json": hive(
                {"from": ".", "to": "./answer", "condition": "!has(hop.done)"},
                {"from": "./answer", "to": "."},
            ),
            "main/answer/config.json": cell("code", {"script_inline": ANSWER}),
        }
    )


def run(root: Path, stdin: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MECLAW, "--root", str(root), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_text_line_in_is_the_last_assistant_text_out_and_eof_exits_0(
    make_tree: TreeFactory,
) -> None:
    done = run(echo_tree(make_tree), "ping\n\nsecond\n")
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == ["pong: ping", "pong: second"]


def test_json_frames_are_answered_with_json_frames(make_tree: TreeFactory) -> None:
    frames = [
        {
            "v": 1,
            "type": "message",
            "trace_id": "t-1",
            "context": {"turn_id": "k"},
            "body": {"messages": [{"origin": "user", "type": "text", "text": "hello"}]},
        },
        {"v": 1, "type": "message"},
        "not json",
        {"v": 1, "type": "message", "context": {"turn_id": "t-9"}, "ttl": -1, "body": {}},
    ]
    stdin = "\n".join(f if isinstance(f, str) else json.dumps(f) for f in frames) + "\n"
    done = run(echo_tree(make_tree), stdin, "--stdio-format", "json")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(x) for x in done.stdout.splitlines()]
    assert lines[0]["type"] == "ready"
    assert lines[0]["version"]
    errors = [x for x in lines if x["type"] == "error"]
    assert [e["error_code"] for e in errors] == ["invalid_frame"] * 3
    assert "body" in errors[0]["detail"]
    # a refused frame's turn_id comes back, so a parent can pair the error with its request
    assert [e.get("context") for e in errors] == [None, None, {"turn_id": "t-9"}]
    [reply] = [x for x in lines if x["type"] == "message"]
    assert reply["trace_id"] == "t-1"
    assert reply["context"]["turn_id"] == "k"
    assert reply["body"]["messages"][-1]["text"] == "pong: hello"
    assert "hop" not in reply


def test_direct_mode_needs_a_root_hive(make_tree: TreeFactory) -> None:
    root = make_tree({"main/config.json": cell("code")})
    done = run(root, "")
    assert done.returncode == 1
    assert "root must be a hive for direct-mode" in done.stderr


def test_daemon_mode_ignores_the_end_of_stdin(make_tree: TreeFactory) -> None:
    with subprocess.Popen(
        [MECLAW, "--root", str(echo_tree(make_tree)), "--daemon"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        try:
            assert process.wait(timeout=3) is None
        except subprocess.TimeoutExpired:
            pass  # still running: the end of stdin did not stop it
        finally:
            process.terminate()
            process.wait(timeout=20)


async def test_a_line_the_colony_refuses_for_now_is_held_back_not_dropped(
    make_tree: TreeFactory,
) -> None:
    import io

    from colony.admission import Refusal
    from colony.stdio import StdioBridge
    from colony.testing import ColonyHarness

    async with ColonyHarness(echo_tree(make_tree)) as harness:
        colony = harness.colony
        refusals = [Refusal(503, "storage_unavailable", "the disk is full", 0)] * 2
        colony.admission = lambda nbytes=0: refusals.pop() if refusals else None  # type: ignore[method-assign]
        out = io.StringIO()
        bridge = StdioBridge(colony, json_mode=False, version="t", out=out)
        colony.egress = bridge.egress
        lines = iter(["ping\n", ""])
        await bridge.run(lambda: next(lines))
        assert out.getvalue() == "pong: ping\n"
        [held] = harness.logs("stdio_input_held", "warning")
        assert held["reason"] == "storage_unavailable"
