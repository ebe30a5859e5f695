"""The Anthropic Messages dialect: UBF in, the exact request out; a response in, UBF out."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cells.llm.dialects.anthropic import AnthropicMessages
from cells.llm.dialects.base import NativeLookup, ReplyError, Tool, TranslateError, tool_from_leaf
from scripted.anthropic import ScriptedAnthropic
from tests.conftest import FIXTURES

D = AnthropicMessages()
VECTORS = json.loads((FIXTURES / "vectors" / "replay" / "anthropic.json").read_text())
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}


def no_native(calls: tuple[str, ...]) -> Any:
    return None


def request(turns: list[Any], native: NativeLookup = no_native, **kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "model": "claude-mock",
        "prompt": "",
        "tools": [],
        "turns": turns,
        "max_tokens": 100,
        "temperature": 0.5,
        "native": native,
        "extra": {},
    }
    args.update(kw)
    return D.request(**args)


def user(text: str) -> dict[str, Any]:
    return {"origin": "user", "type": "text", "text": text}


def call(call_id: str, name: str = "get_weather", args: Any = None) -> dict[str, Any]:
    arguments = json.dumps({"city": "Paris"} if args is None else args)
    return {
        "origin": "assistant",
        "type": "tool_call",
        "id": call_id,
        "text": json.dumps({"arguments": arguments, "name": name}),
    }


def result(call_id: str, text: str = "ok") -> dict[str, Any]:
    return {"origin": "tool", "type": "tool_result", "id": call_id, "text": text}


def message(content: list[Any], stop_reason: Any = "end_turn", **more: Any) -> dict[str, Any]:
    body = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-mock",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }
    body.update(more)
    return body


# -- golden vectors --------------------------------------------------------------------------


@pytest.mark.parametrize("vector", VECTORS["request_vectors"], ids=lambda v: v["name"][:40])
def test_request_vectors(vector: dict[str, Any]) -> None:
    natives = {tuple(k.split(",")): v for k, v in vector.get("native", {}).items()}
    body = D.request(
        model=vector["model"],
        prompt=vector.get("prompt", ""),
        tools=[tool_from_leaf(t, "vector") for t in vector.get("tools", [])],
        turns=vector["turns"],
        max_tokens=vector.get("max_tokens", 512),
        temperature=vector.get("temperature", 0.2),
        native=lambda calls: natives.get(calls),
        extra=vector.get("extra", {}),
    )
    assert json.dumps(body) == json.dumps(vector["expected"])
    # and the scripted server (Anthropic's request checks) accepts every expected body
    assert ScriptedAnthropic([]).validate(vector["expected"]) is None


@pytest.mark.parametrize("vector", VECTORS["response_vectors"], ids=lambda v: v["name"][:40])
def test_response_vectors(vector: dict[str, Any]) -> None:
    reply = D.parse(vector["response"])
    got = {
        "turns": reply.turns,
        "finish_reason": reply.finish_reason,
        "stop_reason": reply.stop_reason,
        "calls": reply.calls,
        "refusal_category": reply.refusal_category,
        "usage": {
            "input": reply.usage.input,
            "output": reply.usage.output,
            "cache_read": reply.usage.cache_read,
            "cache_creation": reply.usage.cache_creation,
        },
        "native": reply.native,
        "model": reply.model,
        "response_id": reply.response_id,
    }
    assert {k: got[k] for k in vector["expected"]} == vector["expected"]


def test_the_vector_file_names_this_provider() -> None:
    assert VECTORS["provider"] == D.name == "anthropic"


# -- endpoint ----------------------------------------------------------------------------------


def test_url_appends_messages_to_the_v1_base() -> None:
    assert (
        D.url("https://api.anthropic.com/v1", "claude-x") == "https://api.anthropic.com/v1/messages"
    )


def test_headers_carry_the_key_and_the_version() -> None:
    assert D.headers("sk-ant-1") == {"x-api-key": "sk-ant-1", "anthropic-version": "2023-06-01"}
    assert D.headers("") == {"anthropic-version": "2023-06-01"}


# -- tools -------------------------------------------------------------------------------------


def test_a_tool_is_name_description_input_schema_strict_in_that_order() -> None:
    out = D.tool(Tool("get_weather", "Weather.", SCHEMA, strict=True))
    assert list(out) == ["name", "description", "input_schema", "strict"]
    assert out == {
        "name": "get_weather",
        "description": "Weather.",
        "input_schema": SCHEMA,
        "strict": True,
    }
    assert D.tool(Tool("get_weather", None, SCHEMA)) == {
        "name": "get_weather",
        "input_schema": SCHEMA,
    }


@pytest.mark.parametrize("name", ["get.weather", "a" * 129, "wetter ☀", "x\n", ""])
def test_a_name_outside_the_grammar_is_a_translate_error_naming_tool_and_provider(
    name: str,
) -> None:
    with pytest.raises(TranslateError) as info:
        request([user("hi")], tools=[Tool(name, None, SCHEMA)])
    assert repr(name) in str(info.value)
    assert "anthropic" in str(info.value)


def test_a_128_character_name_is_accepted() -> None:
    body = request([user("hi")], tools=[Tool("a" * 128, None, SCHEMA)])
    assert body["tools"][0]["name"] == "a" * 128


# -- request -----------------------------------------------------------------------------------


def test_body_key_order_and_a_plain_user_turn() -> None:
    body = request([user("hi")], prompt="Be kind.", tools=[Tool("t", None, SCHEMA)])
    assert list(body) == ["model", "max_tokens", "system", "messages", "tools", "temperature"]
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


def test_system_turns_alone_make_the_system_when_there_is_no_prompt() -> None:
    body = request(
        [{"origin": "system", "type": "text", "text": "Rule one."}, user("hi")], prompt=""
    )
    assert body["system"] == "Rule one."
    blank = request([{"origin": "system", "type": "text", "text": "  "}, user("hi")], prompt="")
    assert "system" not in blank


def test_a_system_turn_between_user_turns_lets_them_merge() -> None:
    body = request([user("a"), {"origin": "system", "type": "text", "text": "S"}, user("b")])
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    ]
    assert body["system"] == "S"


def test_results_come_before_a_user_text_that_preceded_them() -> None:
    body = request([user("go"), call("toolu_1"), user("hurry"), result("toolu_1")])
    assert body["messages"][2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"},
            {"type": "text", "text": "hurry"},
        ],
    }


def test_results_keep_the_order_given() -> None:
    body = request(
        [user("go"), call("toolu_1"), call("toolu_2"), result("toolu_2"), result("toolu_1")]
    )
    ids = [b["tool_use_id"] for b in body["messages"][2]["content"]]
    assert ids == ["toolu_2", "toolu_1"]


def test_assistant_text_goes_before_tool_use_whatever_the_turn_order() -> None:
    turns = [user("go"), call("toolu_1"), {"origin": "assistant", "type": "text", "text": "On it."}]
    content = request([*turns, result("toolu_1")])["messages"][1]["content"]
    assert [b["type"] for b in content] == ["text", "tool_use"]


def test_the_native_lookup_gets_the_runs_call_ids_and_a_fitting_record_wins() -> None:
    seen: list[tuple[str, ...]] = []
    record = [
        {"type": "thinking", "thinking": "t", "signature": "s"},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Paris"}},
    ]

    def lookup(calls: tuple[str, ...]) -> Any:
        seen.append(calls)
        return record

    turns = [user("go"), call("toolu_1"), call("toolu_2"), result("toolu_1"), result("toolu_2")]
    body = request(turns, native=lookup)
    assert seen == [("toolu_1", "toolu_2")]
    assert body["messages"][1]["content"] == record


@pytest.mark.parametrize(
    "record",
    [
        [{"type": "tool_use", "id": "toolu_9", "name": "x", "input": {}}],  # other ids
        [{"type": "thinking", "thinking": "t", "signature": "s"}],  # no tool_use at all
        {"reasoning_content": "x"},  # not a content list
        ["text"],
    ],
)
def test_a_record_that_does_not_fit_the_run_is_ignored(record: Any) -> None:
    body = request([user("go"), call("toolu_1"), result("toolu_1")], native=lambda calls: record)
    assert body["messages"][1]["content"] == [
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
    ]


def test_a_text_only_assistant_run_does_not_consult_native() -> None:
    def lookup(calls: tuple[str, ...]) -> Any:
        raise AssertionError("no calls, no lookup")

    body = request(
        [user("hi"), {"origin": "assistant", "type": "text", "text": "yo"}, user("?")],
        native=lookup,
    )
    assert len(body["messages"]) == 3


@pytest.mark.parametrize(
    ("turns", "fragment"),
    [
        ([{"origin": "assistant", "type": "text", "text": "hello"}], "start with a user message"),
        ([{"origin": "system", "type": "text", "text": "rules"}], "start with a user message"),
        ([], "start with a user message"),
        ([user("a"), "ptr:abc"], "messages[1] is not a turn"),
        ([{"origin": "user", "type": "image", "text": "x"}], "user/image"),
        ([{"origin": "user", "type": "tool_call", "text": "{}"}], "user/tool_call"),
        ([user("a"), call("toolu_1", args=[1, 2])], "JSON object"),
        (
            [user("a"), {"origin": "assistant", "type": "tool_call", "id": "t", "text": "nope"}],
            "not JSON",
        ),
        ([{"origin": "user", "type": "text", "text": 3}], "has no text"),
    ],
)
def test_what_the_wire_cannot_carry_is_a_translate_error(turns: list[Any], fragment: str) -> None:
    with pytest.raises(TranslateError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        request(turns)


def test_an_error_result_that_is_not_the_convention_stays_text() -> None:
    for text in ['{"error": "x", "more": 1}', '["error"]', "error: x", "{not json"]:
        block = request([user("a"), call("toolu_1"), result("toolu_1", text)])["messages"][2][
            "content"
        ][0]
        assert block == {"type": "tool_result", "tool_use_id": "toolu_1", "content": text}


def test_the_error_convention_reads_whitespace_inside_the_json() -> None:
    body = request([user("a"), call("toolu_1"), result("toolu_1", '{ "$error" : "boom" }')])
    assert body["messages"][2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": "boom",
        "is_error": True,
    }


# -- parse -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ([], "not a JSON object"),
        (message([], "pause_turn"), "pause_turn"),
        (message([], "compaction"), "compaction"),
        (message([], None), "None"),
        ({**message([]), "content": None}, "no content list"),
        ({**message([]), "content": ["x"]}, "no content list"),
        ({**message([]), "model": None}, "no model"),
        ({**message([]), "id": 3}, "no id"),
        (message([], "tool_use"), "without a tool_use block"),
        (message([{"type": "text"}]), "text block has no text"),
        (
            message([{"type": "tool_use", "id": "toolu_1", "name": "t", "input": "x"}], "tool_use"),
            "not an object",
        ),
        (message([{"type": "tool_use", "id": "", "name": "t", "input": {}}], "tool_use"), "no id"),
        (message([{"type": "tool_use", "id": "toolu_1", "input": {}}], "tool_use"), "no name"),
    ],
)
def test_an_unusable_answer_is_a_reply_error(body: Any, fragment: str) -> None:
    with pytest.raises(ReplyError, match=fragment):
        D.parse(body)


def test_end_turn_with_tool_use_blocks_reads_tool_calls() -> None:
    block = {"type": "tool_use", "id": "toolu_1", "name": "t", "input": {"a": 1}}
    reply = D.parse(message([block], "end_turn"))
    assert reply.finish_reason == "tool_calls"
    assert reply.stop_reason == "end_turn"
    assert reply.calls == ["toolu_1"]
    assert reply.turns[0]["text"] == '{"arguments":"{\\"a\\":1}","name":"t"}'


def test_a_malformed_call_in_a_cut_off_turn_is_dropped_not_an_error() -> None:
    reply = D.parse(message([{"type": "tool_use", "id": "toolu_1", "input": None}], "max_tokens"))
    assert (reply.finish_reason, reply.calls, reply.turns, reply.native) == ("length", [], [], None)


def test_the_empty_round_is_empty_and_a_short_answer_is_not() -> None:
    empty = D.parse(message([], usage={"input_tokens": 9, "output_tokens": 2}))
    assert empty.empty
    assert empty.text is None
    assert not D.parse(message([{"type": "text", "text": "ok"}])).empty


def test_unknown_blocks_are_kept_only_through_native() -> None:
    content = [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
        {"type": "tool_use", "id": "toolu_1", "name": "t", "input": {}},
    ]
    reply = D.parse(message(content, "tool_use"))
    assert [t["type"] for t in reply.turns] == ["tool_call"]
    assert reply.native == content


def test_usage_values_that_are_not_integers_read_as_missing() -> None:
    reply = D.parse(message([], usage={"input_tokens": "9", "output_tokens": True}))
    assert (reply.usage.input, reply.usage.output, reply.usage.prompt_total) == (None, None, None)
    assert D.parse(message([], usage=None)).usage.output is None


# -- in-body errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "status"),
    [
        ("rate_limit_error", 429),
        ("authentication_error", 401),
        ("permission_error", 403),
        ("not_found_error", 404),
        ("overloaded_error", 529),
        ("api_error", 500),
        ("invalid_request_error", 400),
        ("something_new", None),
    ],
)
def test_an_error_body_maps_its_type_to_a_status(kind: str, status: int | None) -> None:
    body = {"type": "error", "error": {"type": kind, "message": "nope"}}
    assert D.in_body_error(body) == (status, "nope")


def test_what_is_not_an_error_body() -> None:
    assert D.in_body_error(message([{"type": "text", "text": "hi"}])) is None
    assert D.in_body_error({**message([]), "error": {"type": "api_error"}}) is None
    assert D.in_body_error([]) is None
    assert D.in_body_error({"type": "error", "error": "flat"}) is None


def test_a_proxys_error_object_without_type_uses_its_code() -> None:
    assert D.in_body_error({"error": {"message": "Provider returned error", "code": 502}}) == (
        502,
        "Provider returned error",
    )
    assert D.in_body_error({"type": "error", "error": {"type": "api_error"}}) == (500, None)
