"""The Ollama ``/api/chat`` dialect: pure request/parse, its golden vectors, and the llm cell on it."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

import cells.llm.dialects as dialects
from cells.llm.dialects.base import (
    Dialect,
    ReplyError,
    Tool,
    TranslateError,
    tool_from_leaf,
)
from cells.llm.dialects.ollama import OllamaChat, call_id
from colony.testing import ColonyHarness
from scripted.ollama import (
    ScriptedOllama,
    ollama_calls,
    ollama_empty,
    ollama_length,
    ollama_text,
)
from tests.conftest import CONTRACT, TreeFactory, hive

VECTORS = json.loads(
    (Path(__file__).parents[3] / "fixtures" / "vectors" / "replay" / "ollama.json").read_text(
        encoding="utf-8"
    )
)
OLLAMA = OllamaChat()
WEATHER = Tool("get_weather", "Current weather.", {"type": "object", "properties": {}})


def call(id: str, name: str, args: Any) -> dict[str, Any]:
    text = json.dumps(
        {"arguments": json.dumps(args, separators=(",", ":")), "name": name},
        separators=(",", ":"),
    )
    return {"origin": "assistant", "type": "tool_call", "id": id, "text": text}


def result(id: str, text: str) -> dict[str, Any]:
    return {"origin": "tool", "type": "tool_result", "id": id, "text": text}


def user(text: str) -> dict[str, Any]:
    return {"origin": "user", "type": "text", "text": text}


def said(text: str) -> dict[str, Any]:
    return {"origin": "assistant", "type": "text", "text": text}


def request(turns: list[Any], native: dict[tuple[str, ...], Any] | None = None, **kw: Any) -> Any:
    args: dict[str, Any] = {
        "model": "m",
        "prompt": "",
        "tools": [],
        "max_tokens": 64,
        "temperature": 0.0,
        "extra": {},
    }
    args.update(kw)
    return OLLAMA.request(turns=turns, native=lambda ids: (native or {}).get(ids), **args)


# -- the golden vectors ---------------------------------------------------------------------


@pytest.mark.parametrize("vector", VECTORS["request_vectors"], ids=lambda v: v["name"][:60])
def test_request_vectors(vector: dict[str, Any]) -> None:
    native = vector["native"]
    body = OLLAMA.request(
        model=vector["model"],
        prompt=vector["prompt"],
        tools=[tool_from_leaf(t, f"tools[{n}]") for n, t in enumerate(vector["tools"])],
        turns=vector["turns"],
        max_tokens=vector["max_tokens"],
        temperature=vector["temperature"],
        native=lambda ids: native.get(",".join(ids)),
        extra=vector["extra"],
    )
    assert body == vector["expected"]
    # The cell sends this dialect's bodies unsorted: the key order is part of the wire.
    assert json.dumps(body) == json.dumps(vector["expected"])


@pytest.mark.parametrize("vector", VECTORS["response_vectors"], ids=lambda v: v["name"][:60])
def test_response_vectors(vector: dict[str, Any]) -> None:
    reply = OLLAMA.parse(vector["response"])
    got = {
        "turns": reply.turns,
        "finish_reason": reply.finish_reason,
        "stop_reason": reply.stop_reason,
        "calls": reply.calls,
        "refusal_category": reply.refusal_category,
        "usage": asdict(reply.usage),
        "native": reply.native,
        "model": reply.model,
        "response_id": reply.response_id,
    }
    assert got == vector["expected"]


def test_the_dialect_satisfies_the_protocol() -> None:
    dialect: Dialect = OLLAMA
    assert dialect.name == "ollama"


# -- endpoint -------------------------------------------------------------------------------


def test_the_url_and_the_optional_bearer_key() -> None:
    assert OLLAMA.url("http://127.0.0.1:11434", "qwen3") == "http://127.0.0.1:11434/api/chat"
    assert OLLAMA.headers("") == {}
    assert OLLAMA.headers("proxy-key") == {"Authorization": "Bearer proxy-key"}


def test_a_tool_has_the_nested_function_shape_without_strict() -> None:
    assert OLLAMA.tool(Tool("t", None, {"type": "object"}, strict=True)) == {
        "type": "function",
        "function": {"name": "t", "parameters": {"type": "object"}},
    }
    assert list(OLLAMA.tool(WEATHER)["function"]) == ["name", "description", "parameters"]


# -- request --------------------------------------------------------------------------------


def test_body_keys_are_in_wire_order_with_extra_last() -> None:
    body = request(
        [user("hi")], prompt="p", tools=[WEATHER], extra={"think": True, "options": {"seed": 1}}
    )
    assert list(body) == ["model", "messages", "tools", "stream", "options", "think"]
    assert body["options"] == {"seed": 1}  # extra wins, as for every dialect
    assert request([user("hi")])["options"] == {"num_predict": 64, "temperature": 0.0}


def test_text_and_calls_in_any_order_are_one_assistant_message() -> None:
    turns = [
        user("q"),
        said("Let me look. "),
        call("a", "f", {"x": 1}),
        said("And more."),
        call("b", "g", {}),
        result("a", "1"),
        result("b", "2"),
    ]
    messages = request(turns)["messages"]
    assert messages[1] == {
        "role": "assistant",
        "content": "Let me look. And more.",
        "tool_calls": [
            {"function": {"name": "f", "arguments": {"x": 1}}},
            {"function": {"name": "g", "arguments": {}}},
        ],
    }
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool"]


def test_results_name_the_tool_of_the_call_they_answer_in_call_order() -> None:
    turns = [
        call("a", "f", {}),
        call("b", "g", {}),
        call("c", "f", {"again": True}),
        result("c", "3"),
        result("a", "1"),
        result("b", "2"),
    ]
    tools = request(turns)["messages"][1:]
    assert [(m["tool_name"], m["content"]) for m in tools] == [("f", "1"), ("g", "2"), ("f", "3")]


def test_an_error_result_is_sent_as_its_text() -> None:
    turns = [call("a", "f", {}), result("a", '{"error":"boom"}')]
    assert request(turns)["messages"][1] == {
        "role": "tool",
        "tool_name": "f",
        "content": '{"error":"boom"}',
    }


def test_thinking_is_replayed_verbatim_only_for_the_exact_call_ids() -> None:
    thinking = 'weigh "a" → then b\n\u00e9'
    turns = [call("a", "f", {}), call("b", "g", {}), result("a", "1"), result("b", "2")]
    kept: dict[tuple[str, ...], Any] = {("a", "b"): {"thinking": thinking}}
    assistant = request(turns, kept)["messages"][0]
    assert list(assistant) == ["role", "content", "thinking", "tool_calls"]
    assert assistant["thinking"] == thinking
    assert "thinking" not in request(turns, {("a",): {"thinking": "x"}})["messages"][0]
    assert "thinking" not in request(turns, {("a", "b"): {"other": 1}})["messages"][0]


def test_a_round_trip_keeps_the_thinking_of_the_turn_that_made_the_calls() -> None:
    reply = OLLAMA.parse(
        ollama_calls([("f", {"q": 1}), ("g", {"q": 2})], thinking="plan", created_at="T1")
    )
    store = {tuple(reply.calls): reply.native}
    turns = [user("go"), *reply.turns] + [result(i, "ok") for i in reply.calls]
    assistant = request(turns, store)["messages"][1]
    assert assistant["thinking"] == "plan"
    assert assistant["tool_calls"][1] == {"function": {"name": "g", "arguments": {"q": 2}}}


@pytest.mark.parametrize(
    ("turns", "words"),
    [
        ([{"origin": "user", "type": "image", "text": "x"}], "user/image"),
        ([{"text_id": "01a22871-e003-7818-aaea-6e40c9818056"}], "not a turn"),
        (["just a string"], "not a turn"),
        ([{"origin": "tool", "type": "text", "text": "x"}], "tool/text"),
        ([{"origin": "assistant", "type": "tool_result", "id": "a", "text": "x"}], "assistant"),
        ([result("nobody", "x")], "answers no earlier tool_call"),
        (
            [{"origin": "assistant", "type": "tool_call", "id": "a", "text": "not json"}],
            "not JSON",
        ),
        (
            [
                {
                    "origin": "assistant",
                    "type": "tool_call",
                    "id": "a",
                    "text": '{"name":"f","arguments":"{\\"city\\":"}',
                }
            ],
            "not JSON",
        ),
        ([call("a", "f", [1, 2])], "must be a JSON object"),
    ],
)
def test_turns_ollama_cannot_carry_are_translate_errors(turns: list[Any], words: str) -> None:
    with pytest.raises(TranslateError, match=words):
        request(turns)


# -- parse ----------------------------------------------------------------------------------


def test_call_ids_follow_the_documented_formula() -> None:
    body = ollama_calls([("f", {"b": 1, "a": 2})], model="m1", created_at="2026-01-01T00:00:00Z")
    seed = b'2026-01-01T00:00:00Z\nm1\nf\n{"b":1,"a":2}'
    expected = f"ollama_0_{hashlib.sha256(seed).hexdigest()[:12]}"
    assert OLLAMA.parse(body).calls == [expected]
    assert call_id(0, "2026-01-01T00:00:00Z", "m1", "f", {"b": 1, "a": 2}) == expected


def test_call_ids_are_stable_per_response_and_unique_across_rounds_and_calls() -> None:
    same = [("f", {"x": 1}), ("f", {"x": 1})]
    first = OLLAMA.parse(ollama_calls(same, created_at="T1")).calls
    assert first == OLLAMA.parse(ollama_calls(same, created_at="T1")).calls
    assert len(set(first)) == 2  # identical calls in one response differ by position
    later = OLLAMA.parse(ollama_calls(same, created_at="T2")).calls
    assert set(first).isdisjoint(later)
    fresh = [OLLAMA.parse(ollama_calls(same)).calls[0] for _ in range(3)]
    assert len(set(fresh)) == 3  # the helpers stamp a new created_at each time


def test_a_call_that_brings_its_own_id_keeps_it() -> None:
    body = ollama_calls([("f", {})], created_at="T")
    body["message"]["tool_calls"][0]["id"] = "call_xyz"
    assert OLLAMA.parse(body).calls == ["call_xyz"]


def test_string_arguments_from_a_proxy_are_kept_as_they_came() -> None:
    body = ollama_calls([("f", {})], created_at="T")
    body["message"]["tool_calls"][0]["function"]["arguments"] = '{"city":'
    reply = OLLAMA.parse(body)
    assert reply.turns[0]["text"] == '{"arguments":"{\\"city\\":","name":"f"}'
    body["message"]["tool_calls"][0]["function"]["index"] = 0  # newer servers add it
    del body["message"]["tool_calls"][0]["function"]["arguments"]
    assert OLLAMA.parse(body).turns[0]["text"] == '{"arguments":"{}","name":"f"}'


def test_load_and_unload_are_empty_rounds_not_empty_successes() -> None:
    for done_reason in ("load", "unload"):
        body = ollama_empty(done_reason=done_reason)
        body["message"]["content"] = "stray"
        body["message"]["tool_calls"] = [{"function": {"name": "f", "arguments": {}}}]
        reply = OLLAMA.parse(body)
        assert reply.empty
        assert (reply.turns, reply.calls, reply.text) == ([], [], None)
        assert (reply.finish_reason, reply.stop_reason, reply.usage.output) == (
            "stop",
            done_reason,
            0,
        )


def test_an_empty_stop_is_empty_and_a_text_is_not() -> None:
    assert OLLAMA.parse(ollama_text("", eval_count=0)).empty
    assert OLLAMA.parse(ollama_text("", eval_count=None)).empty
    assert not OLLAMA.parse(ollama_text("hi")).empty
    assert not OLLAMA.parse(ollama_calls([("f", {})], eval_count=0)).empty


def test_a_cut_off_turn_emits_no_calls_and_keeps_no_native() -> None:
    reply = OLLAMA.parse(ollama_length("partial", [("f", {"q": 1})], thinking="t"))
    assert (reply.finish_reason, reply.calls, reply.native) == ("length", [], None)
    assert reply.turns == [said("partial")]


def test_thinking_without_calls_is_not_native() -> None:
    assert OLLAMA.parse(ollama_text("done", thinking="t")).native is None


@pytest.mark.parametrize(
    ("mutate", "words"),
    [
        (lambda b: b.pop("done"), "not done"),
        (lambda b: b.update(done=False), "not done"),
        (lambda b: b.pop("done_reason"), "done_reason None"),
        (lambda b: b.update(done_reason="eos"), "done_reason 'eos'"),
        (lambda b: b.pop("message"), "no message"),
        (lambda b: b.pop("model"), "no model"),
        (lambda b: b.pop("created_at"), "no created_at"),
        (lambda b: b["message"].update(tool_calls={"f": 1}), "not an array"),
        (lambda b: b["message"].update(tool_calls=[{"function": {}}]), "no function name"),
        (lambda b: b["message"].update(tool_calls=["f"]), "no function name"),
    ],
)
def test_unusable_answers_are_reply_errors(mutate: Any, words: str) -> None:
    body = ollama_text("x")
    mutate(body)
    with pytest.raises(ReplyError, match=words):
        OLLAMA.parse(body)


def test_a_non_object_body_is_a_reply_error() -> None:
    with pytest.raises(ReplyError):
        OLLAMA.parse([1])


def test_in_body_errors() -> None:
    missing = {"error": 'model "nope" not found, try pulling it first'}
    assert OLLAMA.in_body_error(missing) == (404, missing["error"])
    assert OLLAMA.in_body_error({"error": "an error was encountered while running the model"}) == (
        None,
        "an error was encountered while running the model",
    )
    assert OLLAMA.in_body_error(ollama_text("fine")) is None
    assert OLLAMA.in_body_error({"error": {"message": "OpenAI-shaped"}}) is None
    assert OLLAMA.in_body_error("text") is None


# -- the llm cell on this dialect -------------------------------------------------------------


def brain_tree(**params: Any) -> dict[str, Any]:
    return {
        "main/config.json": hive(
            {"from": ".", "to": "./brain"}, {"from": "./brain", "to": "/sink"}
        ),
        "main/brain/config.json": {
            "cell": {"type": "llm"},
            "params": {"provider": "ollama", "model": "qwen3:8b", "max_tokens": 256, **params},
            "contract": CONTRACT,
        },
    }


@pytest.fixture
def ollama_dialect(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registers the dialect for these tests whether or not the registry has it yet."""
    monkeypatch.setitem(dialects.DIALECTS, "ollama", OLLAMA)


@pytest.mark.usefixtures("ollama_dialect")
async def test_the_cell_runs_a_tool_round_on_ollama_with_thinking_replayed(
    make_tree: TreeFactory,
) -> None:
    first = ollama_calls(
        [("get_weather", {"city": "Paris"}), ("get_time", {"tz": "Europe/Paris"})],
        "Checking both cities.",
        "think first",
        created_at="2026-05-04T09:00:00.1Z",
        prompt_eval_count=30,
        eval_count=12,
    )
    parsed = OLLAMA.parse(first)
    round_two = {
        "messages": [
            user("Weather and time in Paris?"),
            *parsed.turns,
            result(parsed.calls[0], '{"temp_c":15}'),
            result(parsed.calls[1], '{"error":"timezone not found"}'),
        ]
    }
    script = [first, ollama_empty(), ollama_text("15 °C; time unknown.")]
    async with (
        ScriptedOllama(script) as server,
        ColonyHarness(
            make_tree(brain_tree()), capture=["/sink"], llm_base_url=server.url
        ) as colony,
    ):
        await colony.send("/", {"messages": [user("Weather and time in Paris?")]})
        await colony.settle(timeout=60)
        await colony.send("/", round_two)
        await colony.settle(timeout=60)
        replies = colony.captured("/sink")
    assert [r.headers.hop["finish_reason"] for r in replies] == ["tool_calls", "stop"]
    assert replies[0].headers.hop["tokens_prompt"] == 30
    assert replies[0].body["messages"] == parsed.turns
    assert replies[0].body["meta"]["response_id"] == "2026-05-04T09:00:00.1Z"
    assert replies[1].body["messages"] == [said("15 °C; time unknown.")]
    assert server.served == 3  # the load answer was an empty round, asked once more
    assert server.requests[1] == server.requests[2]
    sent = server.requests[1]
    assert list(sent) == ["model", "messages", "stream", "options"]
    assert sent["messages"][1] == {
        "role": "assistant",
        "content": "Checking both cities.",
        "thinking": "think first",
        "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"function": {"name": "get_time", "arguments": {"tz": "Europe/Paris"}}},
        ],
    }
    assert [m.get("tool_name") for m in sent["messages"][2:]] == ["get_weather", "get_time"]
    assert "authorization" not in server.headers[0]
