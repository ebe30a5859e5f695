"""The Gemini generateContent dialect: pure translation both ways, no network."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from cells.llm.cell import encode
from cells.llm.dialects.base import (
    NativeLookup,
    ReplyError,
    Tool,
    TranslateError,
    call_text,
    compact,
    tool_from_leaf,
)
from cells.llm.dialects.gemini import SKIP_SIGNATURE, GeminiGenerate, call_id
from tests.conftest import FIXTURES

D = GeminiGenerate()
VECTORS = json.loads((FIXTURES / "vectors" / "replay" / "gemini.json").read_text())
SIG = "CiEBVKhc7vQpyFh0m0iBxyXgqdx6YpmPq3X0bU0p1k2RzZ8SBhIECAAQAQ=="


def user(text: str) -> dict[str, Any]:
    return {"origin": "user", "type": "text", "text": text}


def call(ident: str, name: str, args: Any) -> dict[str, Any]:
    return {"origin": "assistant", "type": "tool_call", "id": ident, "text": call_text(name, args)}


def result(ident: str, text: str) -> dict[str, Any]:
    return {"origin": "tool", "type": "tool_result", "id": ident, "text": text}


def no_native(calls: tuple[str, ...]) -> Any:
    return None


def request(
    turns: list[Any],
    native: NativeLookup = no_native,
    *,
    prompt: str = "",
    tools: list[Tool] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return D.request(
        model="gemini-test",
        prompt=prompt,
        tools=tools or [],
        turns=turns,
        max_tokens=256,
        temperature=0.5,
        native=native,
        extra=extra or {},
    )


def response(parts: list[Any] | None, finish: str = "STOP", **usage: int) -> dict[str, Any]:
    content: dict[str, Any] = {"role": "model"}
    if parts is not None:
        content["parts"] = parts
    return {
        "candidates": [{"content": content, "finishReason": finish, "index": 0}],
        "usageMetadata": usage or {"promptTokenCount": 10, "candidatesTokenCount": 5},
        "modelVersion": "gemini-3-pro-preview",
        "responseId": "resp1",
    }


# -- the golden vectors, byte for byte ----------------------------------------------------------


@pytest.mark.parametrize(
    "vector", [pytest.param(v, id=v["name"][:60]) for v in VECTORS["request_vectors"]]
)
def test_request_vectors_are_byte_exact(vector: dict[str, Any]) -> None:
    natives = {tuple(k.split(",")): v for k, v in vector["native"].items()}
    body = D.request(
        model=vector["model"],
        prompt=vector["prompt"],
        tools=[tool_from_leaf(t, "vector") for t in vector["tools"]],
        turns=vector["turns"],
        max_tokens=vector["max_tokens"],
        temperature=vector["temperature"],
        native=lambda calls: natives.get(calls),
        extra=vector["extra"],
    )
    assert encode(body, sort_keys=False) == encode(vector["expected"], sort_keys=False)


@pytest.mark.parametrize(
    "vector", [pytest.param(v, id=v["name"][:60]) for v in VECTORS["response_vectors"]]
)
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


def test_the_vectors_cover_the_brief() -> None:
    names = " ".join(v["name"] for v in VECTORS["request_vectors"] + VECTORS["response_vectors"])
    for needle in (
        "vector 35",
        "vector 37",
        "MAX_TOKENS",
        "SAFETY",
        "blockReason",
        "another brain",
    ):
        assert needle in names


# -- endpoint and tools -----------------------------------------------------------------------


def test_the_model_is_in_the_url_and_the_key_in_x_goog_api_key() -> None:
    base = "https://generativelanguage.googleapis.com/v1beta"
    assert D.url(base, "gemini-2.5-flash") == f"{base}/models/gemini-2.5-flash:generateContent"
    assert D.headers("k-123") == {"x-goog-api-key": "k-123"}
    assert D.headers("") == {}
    assert "model" not in request([user("hi")])


def test_a_tool_is_a_function_declaration_with_parametersJsonSchema() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    assert D.tool(Tool("search", "Find.", schema, strict=True)) == {
        "name": "search",
        "description": "Find.",
        "parametersJsonSchema": schema,
    }
    assert D.tool(Tool("a.b-c_9", None, schema)) == {
        "name": "a.b-c_9",
        "parametersJsonSchema": schema,
    }
    body = request([user("x")], tools=[Tool("one", None, schema), Tool("two", None, schema)])
    assert body["tools"] == [
        {
            "functionDeclarations": [
                {"name": "one", "parametersJsonSchema": schema},
                {"name": "two", "parametersJsonSchema": schema},
            ]
        }
    ]
    assert list(body) == ["contents", "tools", "generationConfig"]


@pytest.mark.parametrize("name", ["9lives", "get weather", "a:b", "x" * 65, "", "tool/x"])
def test_a_tool_name_gemini_forbids_is_a_translate_error(name: str) -> None:
    with pytest.raises(TranslateError) as caught:
        D.tool(Tool(name, None, {"type": "object"}))
    assert repr(name) in str(caught.value)
    assert "gemini" in str(caught.value)


def test_a_64_character_name_is_accepted() -> None:
    assert D.tool(Tool("_" + "x" * 63, None, {}))["name"] == "_" + "x" * 63


# -- request ----------------------------------------------------------------------------------


def test_body_order_prompt_and_generation_config() -> None:
    body = request([user("hi")], prompt="Be kind.", extra={"cachedContent": "c/1"})
    assert encode(body, sort_keys=False) == (
        b'{"systemInstruction":{"parts":[{"text":"Be kind."}]},'
        b'"contents":[{"role":"user","parts":[{"text":"hi"}]}],'
        b'"generationConfig":{"maxOutputTokens":256,"temperature":0.5},"cachedContent":"c/1"}'
    )


def test_extra_wins_over_our_keys() -> None:
    body = request(
        [user("hi")],
        extra={"generationConfig": {"temperature": 1.0}, "contents": [], "tools": "x"},
    )
    assert body["generationConfig"] == {"maxOutputTokens": 256, "temperature": 1.0}
    assert body["contents"] == []
    assert body["tools"] == "x"
    assert request([user("hi")], extra={"generationConfig": None})["generationConfig"] is None


def test_a_native_record_goes_back_identical_and_unshared() -> None:
    parts = [
        {"thoughtSignature": SIG, "functionCall": {"args": {"b": 1, "a": 2}, "name": "f"}},
        {"functionCall": {"name": "g", "args": {}}, "futureField": {"x": [1, 2]}},
    ]
    kept = copy.deepcopy(parts)
    seen: list[tuple[str, ...]] = []

    def native(calls: tuple[str, ...]) -> Any:
        seen.append(calls)
        return kept

    turns = [user("go"), call("c1", "f", {"a": 2, "b": 1}), call("c2", "g", {})]
    turns += [result("c1", "1"), result("c2", "2")]
    body = request(turns, native)
    assert seen == [("c1", "c2")]
    assert compact(body["contents"][1]) == compact({"role": "model", "parts": parts})
    body["contents"][1]["parts"][0]["thoughtSignature"] = "tampered"
    assert kept == parts  # the stored record is not shared with the body


def test_a_record_that_does_not_fit_is_ignored_and_the_turn_rebuilt() -> None:
    turns = [user("go"), call("c1", "f", {"a": 1}), result("c1", "ok")]
    rebuilt = request(turns)["contents"][1]
    assert rebuilt == {
        "role": "model",
        "parts": [
            {"functionCall": {"name": "f", "args": {"a": 1}}, "thoughtSignature": SKIP_SIGNATURE}
        ],
    }
    bad_records: list[Any] = [
        {"parts": []},
        [],
        [{"functionCall": {"name": "f", "args": {}}}, {"functionCall": {"name": "g", "args": {}}}],
        ["not a part"],
        [{"functionCall": "f"}],
    ]
    for bad in bad_records:

        def lookup(calls: tuple[str, ...], bad: Any = bad) -> Any:
            return bad

        assert request(turns, lookup)["contents"][1] == rebuilt, bad


def test_rebuilt_calls_put_texts_first_and_sign_only_the_first_call() -> None:
    turns = [
        user("go"),
        call("a", "f", {}),
        {"origin": "assistant", "type": "text", "text": "One"},
        call("b", "g", {"x": [1]}),
        {"origin": "assistant", "type": "text", "text": ""},
        {"origin": "assistant", "type": "text", "text": "Two"},
        result("a", "x"),
        result("b", "y"),
    ]
    assert request(turns)["contents"][1]["parts"] == [
        {"text": "One"},
        {"text": "Two"},
        {"functionCall": {"name": "f", "args": {}}, "thoughtSignature": SKIP_SIGNATURE},
        {"functionCall": {"name": "g", "args": {"x": [1]}}},
    ]


def test_an_assistant_run_with_nothing_to_say_is_left_out() -> None:
    turns = [user("a"), {"origin": "assistant", "type": "text", "text": ""}, user("b")]
    assert request(turns)["contents"] == [
        {"role": "user", "parts": [{"text": "a"}]},
        {"role": "user", "parts": [{"text": "b"}]},
    ]


def test_results_are_one_user_content_in_call_order_with_names_from_the_calls() -> None:
    turns = [
        user("go"),
        call("a", "first", {}),
        call("b", "second", {}),
        call("c", "first", {"again": True}),
        result("c", '"three"'),
        result("a", "[1,2]"),
        result("b", '{"$error":{"code":7}}'),
        user("next"),
    ]
    contents = request(turns)["contents"]
    assert contents[2] == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "first", "response": {"output": [1, 2]}}},
            {"functionResponse": {"name": "second", "response": {"error": '{"code":7}'}}},
            {"functionResponse": {"name": "first", "response": {"output": "three"}}},
        ],
    }
    assert contents[3] == {"role": "user", "parts": [{"text": "next"}]}


@pytest.mark.parametrize(
    ("text", "response"),
    [
        ('{"temp_c":15}', {"output": {"temp_c": 15}}),
        ('{"$error":"boom"}', {"error": "boom"}),
        ('{"error":"boom"}', {"output": {"error": "boom"}}),
        ('{"$error":"boom","detail":1}', {"output": {"$error": "boom", "detail": 1}}),
        ("null", {"output": None}),
        ("", {"output": ""}),
        ("NaN", {"output": "NaN"}),
        ("not json", {"output": "not json"}),
        ("3.5", {"output": 3.5}),
    ],
)
def test_result_text_becomes_output_or_error(text: str, response: dict[str, Any]) -> None:
    turns = [user("go"), call("a", "f", {}), result("a", text)]
    part = request(turns)["contents"][2]["parts"][0]
    assert part == {"functionResponse": {"name": "f", "response": response}}
    json.loads(compact(part), parse_constant=pytest.fail)  # always strict JSON on the wire


def test_ids_are_echoed_only_when_the_record_has_real_gemini_ids() -> None:
    record = [
        {"functionCall": {"id": "fc_1", "name": "f", "args": {}}, "thoughtSignature": SIG},
        {"functionCall": {"name": "g", "args": {}}},
    ]
    turns = [user("go"), call("fc_1", "f", {}), call("gemini_r_1", "g", {})]
    turns += [result("gemini_r_1", "2"), result("fc_1", "1")]
    parts = request(turns, lambda calls: record)["contents"][2]["parts"]
    assert parts == [
        {"functionResponse": {"id": "fc_1", "name": "f", "response": {"output": 1}}},
        {"functionResponse": {"name": "g", "response": {"output": 2}}},
    ]


def test_a_result_takes_the_name_from_the_most_recent_call_with_its_id() -> None:
    turns = [user("1"), call("call_0", "f", {}), result("call_0", "a"), user("2")]
    turns += [call("call_0", "g", {}), result("call_0", "b")]
    contents = request(turns)["contents"]
    assert contents[5]["parts"][0]["functionResponse"]["name"] == "g"


@pytest.mark.parametrize(
    ("turns", "match"),
    [
        ([user("x"), result("nope", "1")], "no earlier tool_call"),
        ([user("x"), call("a", "f", {}), result("b", "1")], "'b'"),
        ([user("x"), call("a", "f", [1, 2])], "JSON object"),
        ([user("x"), {"origin": "assistant", "type": "tool_call", "id": "a"}], "without text"),
        ([{"origin": "user", "type": "image", "text": "x"}], "user/image"),
        ([{"origin": "tool", "type": "text", "text": "x"}], "tool/text"),
        ([{"origin": "assistant", "type": "tool_result", "text": "x"}], "assistant/tool_result"),
        (["pointer:abc"], "not a turn"),
        ([{"origin": "user", "type": "text", "text": ["parts"]}], "not a string"),
    ],
)
def test_what_gemini_cannot_carry_is_a_translate_error(turns: list[Any], match: str) -> None:
    with pytest.raises(TranslateError, match=match):
        request(turns)


# -- parse ------------------------------------------------------------------------------------


def test_a_call_turn_is_empty_only_when_nothing_came() -> None:
    reply = D.parse(response([{"functionCall": {"name": "f"}}]))
    assert reply.turns == [call("gemini_resp1_0", "f", {})]
    assert reply.calls == [call_id("resp1", 0)] == ["gemini_resp1_0"]
    assert reply.finish_reason == "tool_calls"
    assert not reply.empty


def test_an_empty_id_is_replaced_and_ids_count_calls_only() -> None:
    parts = [{"text": "a"}, {"functionCall": {"id": "", "name": "f", "args": {}}}]
    parts.append({"functionCall": {"id": "real", "name": "g", "args": {}}})
    parts.append({"functionCall": {"name": "h", "args": {}}})
    assert D.parse(response(parts)).calls == ["gemini_resp1_0", "real", "gemini_resp1_2"]


def test_arguments_keep_their_order_in_the_ubf_text() -> None:
    reply = D.parse(response([{"functionCall": {"name": "f", "args": {"z": 1, "a": {"y": 2}}}}]))
    assert reply.turns[0]["text"] == '{"arguments":"{\\"z\\":1,\\"a\\":{\\"y\\":2}}","name":"f"}'


def test_the_native_record_is_the_parts_list_as_received() -> None:
    parts = [
        {"text": "t", "thought": True, "thoughtSignature": "s0"},
        {"functionCall": {"name": "f", "args": {}}, "thoughtSignature": SIG},
    ]
    reply = D.parse(response(copy.deepcopy(parts)))
    assert reply.native == parts
    assert reply.text is None  # a thought is not text


@pytest.mark.parametrize(
    "reason", ["SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY"]
)
def test_refusal_reasons(reason: str) -> None:
    reply = D.parse(response([{"text": "partial"}, {"functionCall": {"name": "f"}}], reason))
    assert (reply.finish_reason, reply.stop_reason, reply.refusal_category) == (
        "content_filter",
        reason,
        reason,
    )
    assert (reply.calls, reply.native) == ([], None)
    assert not reply.empty  # a refusal is an answer, never asked again
    assert reply.turns == [{"origin": "assistant", "type": "text", "text": "partial"}]


@pytest.mark.parametrize(
    "reason", ["MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS"]
)
def test_unusable_call_rounds_are_empty(reason: str) -> None:
    reply = D.parse(
        response(
            [{"text": "print(x)"}, {"functionCall": {"name": "f"}}],
            reason,
            promptTokenCount=9,
            candidatesTokenCount=50,
            thoughtsTokenCount=10,
        )
    )
    assert (reply.turns, reply.calls, reply.text) == ([], [], None)
    assert (reply.finish_reason, reply.stop_reason) == ("stop", reason)
    assert (reply.usage.input, reply.usage.output) == (9, 0)
    assert reply.empty


def test_empty_stop_rounds_are_empty() -> None:
    for parts in (None, [], [{"text": ""}], [{"text": "", "thoughtSignature": "s"}]):
        reply = D.parse(response(parts, promptTokenCount=5))
        assert reply.turns == [], parts
        assert reply.empty, parts
    no_usage = response(None)
    del no_usage["usageMetadata"]
    reply = D.parse(no_usage)
    assert (reply.usage.input, reply.usage.output) == (None, None)
    assert reply.empty


def test_a_text_answer_is_not_empty() -> None:
    reply = D.parse(response([{"text": " hi "}], candidatesTokenCount=1))
    assert (reply.text, reply.finish_reason) == (" hi ", "stop")
    assert not reply.empty


def test_usage_counts_gemini_leaves_out_are_zero() -> None:
    usage = D.parse(response([{"text": "x"}], promptTokenCount=7, thoughtsTokenCount=3)).usage
    assert (usage.input, usage.output, usage.cache_read, usage.cache_creation) == (7, 3, None, None)
    assert usage.prompt_total == 7
    cached = D.parse(
        response([{"text": "x"}], promptTokenCount=100, cachedContentTokenCount=80)
    ).usage
    assert (cached.input, cached.cache_read, cached.prompt_total) == (20, 80, 100)


def test_model_and_response_id_are_optional() -> None:
    body = response([{"text": "x"}])
    del body["modelVersion"], body["responseId"]
    reply = D.parse(body)
    assert (reply.model, reply.response_id) == (None, None)


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ([], "not a JSON object"),
        ({}, "no candidates"),
        ({"candidates": [], "promptFeedback": {}}, "blockReason"),
        ({"candidates": ["x"]}, r"candidates\[0\]"),
        ({"candidates": [{"content": {"parts": []}}]}, "no finishReason"),
        ({"candidates": [{"finishReason": "STOP", "content": "x"}]}, "not an object"),
        ({"candidates": [{"finishReason": "STOP", "content": {"parts": "x"}}]}, "parts"),
        ({"candidates": [{"finishReason": "STOP", "content": {"parts": [1]}}]}, "parts"),
    ],
)
def test_unusable_bodies_are_reply_errors(body: Any, match: str) -> None:
    with pytest.raises(ReplyError, match=match):
        D.parse(body)


@pytest.mark.parametrize(
    "reason",
    [
        "LANGUAGE",
        "OTHER",
        "FINISH_REASON_UNSPECIFIED",
        "IMAGE_PROHIBITED_CONTENT",
        "NO_IMAGE",
        "stop",
    ],
)
def test_unknown_finish_reasons_are_reply_errors(reason: str) -> None:
    with pytest.raises(ReplyError, match=reason):
        D.parse(response([{"text": "x"}], reason))


def test_broken_calls_are_reply_errors() -> None:
    with pytest.raises(ReplyError, match="no name"):
        D.parse(response([{"functionCall": {"args": {}}}]))
    with pytest.raises(ReplyError, match="args"):
        D.parse(response([{"functionCall": {"name": "f", "args": "{}"}}]))
    body = response([{"functionCall": {"name": "f"}}])
    del body["responseId"]
    with pytest.raises(ReplyError, match="responseId"):
        D.parse(body)
    body["candidates"][0]["content"]["parts"][0]["functionCall"]["id"] = "fc"
    assert D.parse(body).calls == ["fc"]


def test_in_body_errors() -> None:
    error = {
        "error": {"code": 429, "message": "Resource exhausted", "status": "RESOURCE_EXHAUSTED"}
    }
    assert D.in_body_error(error) == (429, "Resource exhausted")
    assert D.in_body_error({"error": {"status": "UNAUTHENTICATED"}}) == (401, None)
    assert D.in_body_error({"error": {"status": "WHAT", "message": 5}}) == (None, "5")
    assert D.in_body_error(response([{"text": "x"}])) is None
    assert D.in_body_error({"error": "x"}) is None
    assert D.in_body_error([error]) is None


# -- round trip ------------------------------------------------------------------------------


def test_a_parsed_turn_replays_byte_identical_through_the_cells_encoder() -> None:
    """parse → keep native by call ids → next request: the model content is the received parts."""
    raw = (
        b'{"candidates":[{"content":{"role":"model","parts":[{"text":"Checking."},'
        b'{"functionCall":{"id":"fc_A","name":"get_weather","args":{"city":"Paris"}},'
        b'"thoughtSignature":"' + SIG.encode() + b'"},'
        b'{"functionCall":{"id":"fc_B","name":"get_time","args":{"tz":"Europe/Paris"}}}]},'
        b'"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":5},'
        b'"modelVersion":"gemini-3-pro-preview","responseId":"r"}'
    )
    reply = D.parse(json.loads(raw))
    store = {tuple(reply.calls): reply.native}
    turns = [user("go"), *reply.turns, result("fc_A", "15"), result("fc_B", '{"$error":"x"}')]
    sent = encode(request(turns, lambda calls: store.get(calls)), sort_keys=False)
    received_parts = raw[raw.index(b'"parts":') + 8 : raw.index(b'},"finishReason"')]
    assert b'{"role":"model","parts":' + received_parts + b"}" in sent
    assert (
        b'{"role":"user","parts":[{"functionResponse":{"id":"fc_A","name":"get_weather",'
        b'"response":{"output":15}}},{"functionResponse":{"id":"fc_B","name":"get_time",'
        b'"response":{"error":"x"}}}]}' in sent
    )
