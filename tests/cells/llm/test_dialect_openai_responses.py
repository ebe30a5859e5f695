"""The OpenAI Responses dialect: request bodies, reply parsing, native replay, in-body errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from cells.llm.cell import encode
from cells.llm.dialects.base import ReplyError, Tool, TranslateError, call_text, tool_from_leaf
from cells.llm.dialects.openai_responses import OpenAIResponses
from scripted.responses import (
    ScriptedResponses,
    responses_calls,
    responses_empty,
    responses_failed,
    responses_incomplete,
    responses_refusal,
    responses_text,
)

D = OpenAIResponses()
VECTORS = json.loads(
    (
        Path(__file__).resolve().parents[3] / "fixtures/vectors/replay/openai-responses.json"
    ).read_text()
)
WEATHER = Tool("get_weather", "Weather.", {"type": "object", "properties": {}})


def user(text: str) -> dict[str, Any]:
    return {"origin": "user", "type": "text", "text": text}


def result(call_id: str, text: str) -> dict[str, Any]:
    return {"origin": "tool", "type": "tool_result", "id": call_id, "text": text}


def request(turns: list[Any], store: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    kept = store or {}
    args: dict[str, Any] = {
        "model": "gpt-5",
        "prompt": "",
        "tools": [],
        "max_tokens": 64,
        "temperature": 0.5,
        "extra": {},
    }
    args.update(kw)
    return D.request(turns=turns, native=lambda ids: kept.get(",".join(ids)), **args)


# -- the golden vectors ----------------------------------------------------------------------


@pytest.mark.parametrize("vector", VECTORS["request_vectors"], ids=lambda v: v["name"][:48])
def test_request_vectors(vector):
    native = vector["native"]
    body = D.request(
        model=vector["model"],
        prompt=vector["prompt"],
        tools=[tool_from_leaf(t, "tools") for t in vector["tools"]],
        turns=vector["turns"],
        max_tokens=vector["max_tokens"],
        temperature=vector["temperature"],
        native=lambda ids: native.get(",".join(ids)),
        extra=vector["extra"],
    )
    assert body == vector["expected"]
    # key order is what goes on the wire (the cell does not sort keys for this dialect)
    assert encode(body, sort_keys=False) == encode(vector["expected"], sort_keys=False)


@pytest.mark.parametrize("vector", VECTORS["response_vectors"], ids=lambda v: v["name"][:48])
def test_response_vectors(vector):
    reply = D.parse(vector["response"])
    expected = vector["expected"]
    assert reply.turns == expected["turns"]
    assert reply.finish_reason == expected["finish_reason"]
    assert reply.stop_reason == expected["stop_reason"]
    assert reply.calls == expected["calls"]
    assert reply.refusal_category == expected["refusal_category"]
    usage = reply.usage
    assert {
        "input": usage.input,
        "output": usage.output,
        "cache_read": usage.cache_read,
        "cache_creation": usage.cache_creation,
    } == expected["usage"]
    assert reply.native == expected["native"]
    assert reply.model == expected["model"]
    assert reply.response_id == expected["response_id"]


def test_vectors_file_names_this_provider():
    assert VECTORS["provider"] == D.name == "openai-responses"


# -- endpoint, tools --------------------------------------------------------------------------


def test_url_and_headers():
    assert D.url("https://api.openai.com/v1", "gpt-5") == "https://api.openai.com/v1/responses"
    assert D.url("https://api.x.ai/v1", "grok-4") == "https://api.x.ai/v1/responses"
    assert D.headers("sk-x") == {"Authorization": "Bearer sk-x"}
    assert D.headers("") == {}


def test_tool_is_flat_with_optional_description_and_strict():
    params = {"type": "object", "properties": {"q": {"type": "string"}}}
    assert D.tool(Tool("q", None, params)) == {
        "type": "function",
        "name": "q",
        "parameters": params,
    }
    assert D.tool(Tool("q", "Find.", params, strict=False)) == {
        "type": "function",
        "name": "q",
        "description": "Find.",
        "parameters": params,
        "strict": False,
    }


@pytest.mark.parametrize("name", ["get.weather", "a b", "x" * 65, "ümlaut"])
def test_a_name_the_grammar_forbids_is_a_translate_error(name):
    with pytest.raises(TranslateError, match="openai-responses") as info:
        D.tool(Tool(name, None, {"type": "object"}))
    assert repr(name) in str(info.value)


def test_a_64_character_name_is_accepted():
    assert D.tool(Tool("x" * 64, None, {"type": "object"}))["name"] == "x" * 64


# -- request bodies ---------------------------------------------------------------------------


def test_body_key_order_and_defaults():
    body = request([user("hi")], prompt="Be brief.", tools=[WEATHER])
    assert list(body) == [
        "model",
        "instructions",
        "input",
        "tools",
        "max_output_tokens",
        "temperature",
        "store",
        "include",
    ]
    assert body["store"] is False
    assert body["include"] == ["reasoning.encrypted_content"]
    assert "stream" not in body
    assert body["input"] == [{"role": "user", "content": "hi"}]


def test_no_prompt_no_tools_means_no_instructions_and_no_tools_keys():
    body = request([user("hi")])
    assert "instructions" not in body
    assert "tools" not in body


def test_extra_is_merged_last_and_null_removes_a_default():
    body = request(
        [user("hi")],
        extra={"reasoning": {"effort": "high"}, "temperature": None, "include": None},
    )
    assert list(body)[-1] == "reasoning"
    assert "temperature" not in body
    assert "include" not in body
    body = request([user("hi")], extra={"include": [], "store": True})
    assert body["include"] == []
    assert body["store"] is True


def test_a_tool_error_result_goes_as_its_text():
    call = {
        "origin": "assistant",
        "type": "tool_call",
        "id": "call_1",
        "text": call_text("get_time", {"tz": "Mars"}),
    }
    body = request([user("t?"), call, result("call_1", '{"error":"timezone not found"}')])
    assert body["input"][-1] == {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": '{"error":"timezone not found"}',
    }


def test_rebuilt_arguments_are_the_recorded_string_even_when_not_json():
    # a malformed call is answered with an error result; replaying it must not crash
    call = {
        "origin": "assistant",
        "type": "tool_call",
        "id": "call_1",
        "text": json.dumps({"arguments": '{"city":', "name": "get_weather"}),
    }
    body = request([user("w?"), call, result("call_1", '{"error":"bad arguments"}')])
    assert body["input"][1] == {
        "type": "function_call",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"city":',
    }


def test_object_arguments_in_ubf_become_a_compact_string():
    call = {
        "origin": "assistant",
        "type": "tool_call",
        "id": "c",
        "text": json.dumps({"arguments": {"a": 1, "b": [1, 2]}, "name": "f"}),
    }
    body = request([call, result("c", "ok")])
    assert body["input"][0]["arguments"] == '{"a":1,"b":[1,2]}'


def test_a_native_record_for_other_calls_is_not_used():
    call = {"origin": "assistant", "type": "tool_call", "id": "c1", "text": call_text("f", {})}
    wrong = [{"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"}]
    body = request([call, result("c1", "ok")], {"c1": wrong})
    assert body["input"][0] == {
        "type": "function_call",
        "call_id": "c1",
        "name": "f",
        "arguments": "{}",
    }
    body = request([call, result("c1", "ok")], {"c1": {"not": "a list"}})
    assert body["input"][0]["call_id"] == "c1"


def test_consecutive_assistant_text_is_one_message_item():
    turns = [
        user("hi"),
        {"origin": "assistant", "type": "text", "text": "a"},
        {"origin": "assistant", "type": "text", "text": "b"},
    ]
    assert request(turns)["input"][1] == {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "a"}, {"type": "output_text", "text": "b"}],
    }


@pytest.mark.parametrize(
    ("turn", "match"),
    [
        ({"origin": "user", "type": "image", "text": "x"}, "user/image"),
        ({"origin": "tool", "type": "text", "text": "x"}, "tool/text"),
        ("ptr:abc", "not a turn"),
        ({"type": "text", "text": "x"}, "not a turn"),
        ({"origin": "assistant", "type": "tool_call", "id": "c", "text": "{"}, "not JSON"),
        ({"origin": "assistant", "type": "tool_call", "id": "c", "text": "{}"}, "needs a name"),
        ({"origin": "assistant", "type": "tool_call", "id": "c"}, "without text"),
        ({"origin": "user", "type": "text", "text": 5}, "no text"),
    ],
)
def test_what_this_wire_cannot_carry_is_a_translate_error(turn, match):
    with pytest.raises(TranslateError, match=match):
        request([turn])


# -- parsing ----------------------------------------------------------------------------------


def test_parse_the_scripted_helpers():
    reply = D.parse(responses_text("hello", cached_tokens=4, input_tokens=10, output_tokens=2))
    assert (reply.text, reply.finish_reason, reply.stop_reason) == ("hello", "stop", "completed")
    assert (reply.usage.input, reply.usage.cache_read, reply.usage.prompt_total) == (6, 4, 10)
    assert not reply.empty

    calls = responses_calls(
        [("call_1", "f", {"x": 1}), ("call_2", "g", "{}")], "On it.", ("rs_1", "enc")
    )
    reply = D.parse(calls)
    assert reply.calls == ["call_1", "call_2"]
    assert reply.turns[0]["text"] == call_text("f", {"x": 1})
    assert reply.turns[-1] == {"origin": "assistant", "type": "text", "text": "On it."}
    assert reply.native == calls["output"]

    reply = D.parse(responses_empty())
    assert reply.empty
    assert (reply.turns, reply.text, reply.finish_reason) == ([], None, "stop")

    reply = D.parse(responses_incomplete("max_output_tokens", "Let", [("call_1", "f", '{"x"')]))
    assert (reply.finish_reason, reply.calls, reply.native) == ("length", [], None)
    assert reply.turns == [{"origin": "assistant", "type": "text", "text": "Let"}]

    reply = D.parse(responses_refusal("No."))
    assert (reply.finish_reason, reply.refusal_category, reply.text) == (
        "content_filter",
        "refusal",
        "No.",
    )


def test_calls_win_over_a_refusal_part_and_text_parts_join_in_order():
    body = responses_calls([("call_1", "f", {})])
    body["output"].insert(
        0,
        {
            "type": "message",
            "role": "assistant",
            "content": [
                {"type": "output_text", "text": "a"},
                {"type": "refusal", "refusal": "b"},
                {"type": "output_text", "text": "c"},
            ],
        },
    )
    reply = D.parse(body)
    assert reply.finish_reason == "tool_calls"
    assert reply.refusal_category is None
    assert reply.text == "abc"


def test_an_empty_text_part_is_no_text_turn():
    reply = D.parse(responses_text("", output_tokens=1))
    assert reply.turns == []
    assert reply.text is None
    assert reply.empty


def test_usage_with_cache_writes_and_without_usage():
    body = responses_text("x")
    body["usage"] = {
        "input_tokens": 100,
        "input_tokens_details": {"cached_tokens": 50, "cache_write_tokens": 30},
        "output_tokens": 7,
    }
    usage = D.parse(body).usage
    assert (usage.input, usage.cache_read, usage.cache_creation, usage.output) == (20, 50, 30, 7)
    assert usage.prompt_total == 100
    body["usage"] = None
    usage = D.parse(body).usage
    assert (usage.input, usage.output, usage.prompt_total) == (None, None, None)


@pytest.mark.parametrize("status", ["failed", "cancelled", "in_progress", "queued", "weird"])
def test_a_status_without_an_answer_is_a_reply_error(status):
    body = responses_text("partial")
    body["status"] = status
    with pytest.raises(ReplyError, match=status):
        D.parse(body)


def test_an_unknown_incomplete_reason_is_a_reply_error():
    body = responses_incomplete("something_new", "x")
    with pytest.raises(ReplyError, match="something_new"):
        D.parse(body)
    body["incomplete_details"] = None
    with pytest.raises(ReplyError, match="None"):
        D.parse(body)


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda b: b.pop("id"), "no id"),
        (lambda b: b.pop("model"), "no model"),
        (lambda b: b.pop("status"), "no status"),
        (lambda b: b.update(output=None), "no output"),
        (lambda b: b.update(output=["x"]), "no output"),
        (lambda b: b["output"][0].pop("call_id"), "call_id"),
        (lambda b: b["output"][0].pop("name"), "name"),
        (lambda b: b["output"][0].pop("arguments"), "arguments"),
    ],
)
def test_missing_required_fields_are_reply_errors(mutate, match):
    body = responses_calls([("call_1", "f", {})])
    mutate(body)
    with pytest.raises(ReplyError, match=match):
        D.parse(body)


def test_a_message_without_content_is_a_reply_error():
    body = responses_text("x")
    body["output"][0]["content"] = None
    with pytest.raises(ReplyError, match="content"):
        D.parse(body)
    with pytest.raises(ReplyError, match="JSON object"):
        D.parse([body])


# -- in-body errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("rate_limit_exceeded", 429),
        ("invalid_api_key", 401),
        ("model_not_found", 404),
        ("server_error", 500),
        ("invalid_prompt", None),
    ],
)
def test_a_failed_response_is_an_in_body_error(code, status):
    assert D.in_body_error(responses_failed(code, "boom")) == (status, "boom")


def test_a_top_level_error_without_output_is_an_in_body_error():
    assert D.in_body_error({"error": {"code": "server_error", "message": "m"}}) == (500, "m")
    assert D.in_body_error({"error": {"code": 503, "message": None}}) == (503, None)


def test_normal_answers_are_not_in_body_errors():
    assert D.in_body_error(responses_text("x")) is None  # "error": null
    assert D.in_body_error(responses_incomplete()) is None
    assert D.in_body_error([1]) is None
    body = responses_text("x")
    body["error"] = {"code": "server_error", "message": "stray"}
    assert D.in_body_error(body) is None  # completed with output: the answer stands


# -- a whole round against the scripted server ------------------------------------------------


async def test_a_reasoning_round_replays_byte_identical_through_the_scripted_server():
    """Turn 1 calls two tools after reasoning; turn 2 resends the output items verbatim."""
    first = responses_calls(
        [("call_A", "get_weather", {"city": "Paris"}), ("call_B", "get_time", {"tz": "Mars"})],
        "Checking both cities.",
        ("rs_1", "gAAAAABo-opaque=="),
        id="resp_1",
    )
    kept: dict[tuple[str, ...], Any] = {}
    turns: list[Any] = [user("Weather and time?")]

    def native(ids: tuple[str, ...]) -> Any:
        return json.loads(json.dumps(kept[ids])) if ids in kept else None

    def body() -> bytes:
        return encode(
            D.request(
                model="gpt-5",
                prompt="You are helpful.",
                tools=[WEATHER],
                turns=turns,
                max_tokens=256,
                temperature=1.0,
                native=native,
                extra={},
            ),
            sort_keys=False,
        )

    async with (
        ScriptedResponses([first, responses_text("15°C, and Mars has no timezone.")]) as server,
        httpx.AsyncClient(timeout=5.0) as client,
    ):
        headers = {"content-type": "application/json", **D.headers("sk-test")}
        answer = await client.post(D.url(server.url, "gpt-5"), content=body(), headers=headers)
        assert answer.status_code == 200
        reply = D.parse(answer.json())
        assert reply.finish_reason == "tool_calls"
        kept[tuple(reply.calls)] = reply.native
        turns.extend(reply.turns)
        turns.append(result("call_A", '{"temp_c":15}'))
        turns.append(result("call_B", '{"error":"timezone not found"}'))

        sent = body()
        answer = await client.post(D.url(server.url, "gpt-5"), content=sent, headers=headers)
        assert answer.status_code == 200, answer.text
        assert D.parse(answer.json()).text == "15°C, and Mars has no timezone."

        # dropping the native record still makes a valid (if reasoning-less) request
        kept.clear()
        answer = await client.post(D.url(server.url, "gpt-5"), content=body(), headers=headers)
        assert answer.status_code == 200, answer.text

    replayed = server.requests[1]["input"][1:5]
    assert replayed == first["output"]
    items = json.dumps(first["output"], separators=(",", ":"), ensure_ascii=False)[1:-1]
    assert items.encode() in sent  # the output items, byte for byte, in order
    assert [i["call_id"] for i in server.requests[1]["input"][5:]] == ["call_A", "call_B"]
    assert server.headers[0]["authorization"] == "Bearer sk-test"
    assert server.served == 3
