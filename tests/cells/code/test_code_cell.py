"""The code cell through a real colony, with real scripts in real processes."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from colony.testing import ColonyHarness
from tests.conftest import CONTRACT, TreeFactory, hive

ISOLATIONS = ["fork", "spawn", "pool"]


def code_tree(
    script: str, *, contract: dict[str, Any] | None = None, **params: Any
) -> dict[str, Any]:
    return {
        "main/config.json": hive({"from": ".", "to": "./a"}, {"from": "./a", "to": "/sink"}),
        "main/a/config.json": {
            "cell": {"type": "code"},
            "params": {"runner": "python3", "script_inline": script, **params},
            "contract": contract or CONTRACT,
        },
    }


def user(text: str = "hello") -> dict[str, Any]:
    return {"messages": [{"origin": "user", "type": "text", "text": text}]}


async def run(
    make_tree: TreeFactory, tree: dict[str, Any], body: Any = None, **kw: Any
) -> list[Any]:
    async with ColonyHarness(make_tree(tree), capture=["/sink"]) as colony:
        await colony.send("/", body or user(), **kw)
        await colony.settle(timeout=60)
        return colony.captured("/sink")


def error_of(message: Any) -> tuple[str, str]:
    hop = message.headers.hop
    assert hop["finish_reason"] == "error"
    turn = message.body["messages"][0]
    assert (turn["origin"], turn["type"], turn["id"]) == ("tool", "tool_result", "")
    return hop["error_code"], turn["text"]


ECHO = """
import json, sys
doc = json.load(sys.stdin)
turns = doc["body"]["messages"]
print(json.dumps({"header": {"route": "fire", "exit_code": 99},
                  "messages": turns + [{"origin": "assistant", "type": "text", "text": "seen " + turns[-1]["text"]}]}))
"""


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_a_script_answers_through_the_edges_with_its_header_stamped(
    make_tree: TreeFactory, isolation: str
) -> None:
    [reply] = await run(make_tree, code_tree(ECHO, isolation=isolation), user("ping"))
    hop = reply.headers.hop
    assert hop["route"] == "fire"
    assert hop["exit_code"] == 0  # the cell overwrites what the script wrote
    assert hop["had_stderr"] is False
    assert isinstance(hop["duration_ms"], int)
    assert reply.body["messages"][-1]["text"] == "seen ping"
    assert reply.reply_to == "/a"


DUMP_STDIN = """
import sys, json
raw = sys.stdin.read()
print(json.dumps({"messages": [{"origin": "tool", "type": "text", "text": raw}]}))
"""


async def test_stdin_is_envelope_body_and_filtered_params_with_sorted_keys(
    make_tree: TreeFactory,
) -> None:
    tree = code_tree(
        DUMP_STDIN,
        api_key="sk-1",
        nested={"token": "t", "deeper": [{"my_secret": "s", "keep": 1}], "max_tokens": 5},
        window_turns=3,
        Password="p",
    )
    [reply] = await run(make_tree, tree, user("x"), context={"turn_id": "t1"}, hop={"h": 1})
    raw = reply.body["messages"][0]["text"]
    doc = json.loads(raw)
    assert list(doc) == ["body", "envelope", "params"]
    assert raw == json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    envelope = doc["envelope"]
    assert envelope["header"] == {
        "context": {"turn_id": "t1"},
        "hop": {"h": 1},
    }  # kept by the transit
    assert envelope["target"] == "/a"
    assert envelope["ttl"] == 62
    assert "reply_to" not in envelope  # a source message has none
    assert "parent_message_id" in envelope
    assert doc["body"] == user("x")
    assert doc["params"] == {
        "nested": {"deeper": [{"keep": 1}], "max_tokens": 5},
        "runner": "python3",
        "window_turns": 3,
    }


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_a_non_zero_exit_is_script_failed_with_stdout_and_the_stderr_tail(
    make_tree: TreeFactory, isolation: str
) -> None:
    script = "import sys; print('partial'); sys.stderr.write('broke\\n'); sys.exit(3)"
    [reply] = await run(make_tree, code_tree(script, isolation=isolation))
    code, text = error_of(reply)
    assert code == "script_failed"
    assert text == "partial\n\n##meclaw-stderr-start##\nbroke\n##meclaw-stderr-end##"
    assert reply.headers.hop["exit_code"] == 3
    assert reply.headers.hop["had_stderr"] is True


RAISES = """
import json, sys
json.load(sys.stdin)
def divide(a, b):
    return a / b
noise = "x" * 20000
sys.stderr.write(noise + "\\n")
divide(1, 0)
"""


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_a_script_that_raises_carries_the_exception_and_its_bounded_traceback(
    make_tree: TreeFactory, isolation: str
) -> None:
    """Issue 15 item 8: the failure is findable without reading the stderr block: meta.error
    holds the exception line (detail) and the traceback (the stderr tail, at most 8 KiB)."""
    [reply] = await run(make_tree, code_tree(RAISES, isolation=isolation))
    code, text = error_of(reply)
    assert code == "script_failed"
    error = reply.body["meta"]["error"]
    assert error["source"] == "script"
    assert error["detail"] == "ZeroDivisionError: division by zero"
    assert error["exit_code"] == 1
    traceback = error["traceback"]
    assert traceback.endswith("ZeroDivisionError: division by zero\n")
    assert "line 5, in divide" in traceback
    assert "Traceback (most recent call last)" in traceback
    assert len(traceback.encode()) <= 8 * 1024
    assert "ZeroDivisionError: division by zero" in text


async def test_every_error_emission_says_what_failed_in_meta_error(make_tree: TreeFactory) -> None:
    [reply] = await run(make_tree, code_tree("print('not json')"))
    assert reply.body["meta"]["error"]["detail"].startswith("invalid_json: Expecting value")


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_a_script_past_its_timeout_is_killed_as_script_timeout(
    make_tree: TreeFactory, isolation: str
) -> None:
    started = time.monotonic()
    tree = code_tree("import time; time.sleep(30)", isolation=isolation, external_timeout_ms=300)
    [reply] = await run(make_tree, tree)
    assert time.monotonic() - started < 10
    code, text = error_of(reply)
    assert (code, text) == ("script_timeout", "script timed out")
    assert reply.headers.hop["duration_ms"] >= 300


@pytest.mark.parametrize(
    ("script", "needle"),
    [
        ("print('garbage, not json')", "invalid_json: Expecting value"),
        ("print('{\"messages\": []} trailing')", "invalid_json: Extra data"),
        ("print(42)", "invalid_json: top-level must be Object or Array"),
        ("print('[1]')", "invalid_json: every emitted message must be a JSON object"),
        (
            'print(\'{"header": 5, "messages": []}\')',
            'invalid_json: "header" must be a JSON object',
        ),
        ("pass", "invalid_json: Expecting value"),
    ],
)
async def test_output_that_is_not_the_wire_shape_is_invalid_json_quoting_what_was_printed(
    make_tree: TreeFactory, script: str, needle: str
) -> None:
    [reply] = await run(make_tree, code_tree(script))
    code, text = error_of(reply)
    assert code == "invalid_json"
    assert text.startswith(needle)
    assert "the script printed:" in text
    assert reply.headers.hop["exit_code"] == 0


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_ten_megabytes_of_stdout_stop_the_script_quickly(
    make_tree: TreeFactory, isolation: str
) -> None:
    started = time.monotonic()
    script = "import sys\nfor _ in range(10): sys.stdout.write('x' * 1024 * 1024)\n"
    [reply] = await run(make_tree, code_tree(script, isolation=isolation))
    assert time.monotonic() - started < 15
    code, text = error_of(reply)
    assert code == "invalid_json"
    assert "exceeded max_output_bytes (4194304)" in text
    assert len(text) < 10_000


async def test_a_runner_that_cannot_start_is_io_error(make_tree: TreeFactory) -> None:
    tree = code_tree("print('{}')", isolation="spawn", interpreter="/nonexistent/python3")
    [reply] = await run(make_tree, tree)
    code, _ = error_of(reply)
    assert code == "io_error"


async def test_an_array_of_two_without_multi_send_capable_is_refused(
    make_tree: TreeFactory,
) -> None:
    script = 'print(\'[{"messages": []}, {"messages": []}]\')'
    [reply] = await run(make_tree, code_tree(script))
    code, text = error_of(reply)
    assert code == "multi_send_not_declared"
    assert "multi_send_capable" in text


async def test_a_declared_multi_send_emits_each_element_in_order(make_tree: TreeFactory) -> None:
    script = (
        "import json; print(json.dumps([{'header': {'n': n}, 'messages': []} for n in range(3)]))"
    )
    tree = code_tree(script, contract={**CONTRACT, "multi_send_capable": True})
    replies = await run(make_tree, tree)
    assert [r.headers.hop["n"] for r in replies] == [0, 1, 2]


@pytest.mark.parametrize("printed", ["[]", '[{"messages": []}]'])
async def test_arrays_of_zero_or_one_need_no_declaration(
    make_tree: TreeFactory, printed: str
) -> None:
    async with ColonyHarness(
        make_tree(code_tree(f"print('{printed}')")), capture=["/sink"]
    ) as colony:
        await colony.send("/", user())
        await colony.settle()
        assert len(colony.captured("/sink")) == len(json.loads(printed))
        assert await colony.dead_letters() == []


async def test_output_breaking_contract_emits_is_one_contract_violation_and_nothing_else(
    make_tree: TreeFactory,
) -> None:
    contract = {
        **CONTRACT,
        "multi_send_capable": True,
        "emits": {"hop": {"route": {"type": "string", "values": ["fire", "park"]}}},
    }
    script = "import json; print(json.dumps([{'header': {'route': 'fire'}, 'messages': []}, {'header': {'route': 'elsewhere'}, 'messages': []}]))"
    [reply] = await run(make_tree, code_tree(script, contract=contract))
    code, text = error_of(reply)
    assert code == "contract_violation"
    assert "route" in text


async def test_the_colony_keeps_routing_after_every_kind_of_failure(make_tree: TreeFactory) -> None:
    script = """
import json, sys, time
text = json.load(sys.stdin)["body"]["messages"][-1]["text"]
if text == "garbage": print("nope")
elif text == "exit": sys.exit(3)
elif text == "sleep": time.sleep(30)
elif text == "flood": sys.stdout.write("y" * 6_000_000)
else: print(json.dumps({"header": {"ok": True}, "messages": []}))
"""
    async with ColonyHarness(
        make_tree(code_tree(script, external_timeout_ms=500)), capture=["/sink"]
    ) as colony:
        for text in ("garbage", "exit", "sleep", "flood", "fine"):
            await colony.send("/", user(text))
        await colony.settle(timeout=60)
        codes = sorted(m.headers.hop.get("error_code", "ok") for m in colony.captured("/sink"))
        assert codes == ["invalid_json", "invalid_json", "ok", "script_failed", "script_timeout"]
        assert await colony.dead_letters() == []


@pytest.mark.parametrize(
    ("runner", "script"),
    [
        ("bash", "echo '{\"messages\": []}'"),
        ("node", "console.log(JSON.stringify({messages: [], header: {js: true}}))"),
    ],
)
async def test_bash_and_node_scripts_run_by_spawning(
    make_tree: TreeFactory, runner: str, script: str
) -> None:
    tree = code_tree(script)
    tree["main/a/config.json"]["params"]["runner"] = runner
    [reply] = await run(make_tree, tree)
    assert "error_code" not in reply.headers.hop
    assert reply.headers.hop["exit_code"] == 0


async def test_a_script_file_is_found_relative_to_the_cell_folder(make_tree: TreeFactory) -> None:
    tree = code_tree("")
    params = tree["main/a/config.json"]["params"]
    del params["script_inline"]
    params["script"] = "scripts/answer.py"
    tree["main/a/scripts/answer.py"] = (
        "import json\nprint(json.dumps({'header': {'from_file': True}, 'messages': []}))\n"
    )
    [reply] = await run(make_tree, tree)
    assert reply.headers.hop["from_file"] is True


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_a_large_inline_script_still_runs(make_tree: TreeFactory, isolation: str) -> None:
    padding = "#" + "x" * 200_000 + "\n"
    script = padding + "import json\nprint(json.dumps({'header': {'big': True}, 'messages': []}))\n"
    [reply] = await run(make_tree, code_tree(script, isolation=isolation))
    assert reply.headers.hop["big"] is True


async def test_every_message_runs_in_a_fresh_process(make_tree: TreeFactory) -> None:
    script = "import os, json\nprint(json.dumps({'header': {'pid': os.getpid(), 'seen': globals().get('SEEN', 0)}, 'messages': []}))\nSEEN = 1\n"
    async with ColonyHarness(make_tree(code_tree(script)), capture=["/sink"]) as colony:
        for _ in range(3):
            await colony.send("/", user())
        await colony.settle()
        hops = [m.headers.hop for m in colony.captured("/sink")]
        assert len({h["pid"] for h in hops}) == 3
        assert {h["seen"] for h in hops} == {0}
