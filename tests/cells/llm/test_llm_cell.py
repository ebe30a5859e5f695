"""The llm cell against a scripted OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from cells.llm.cell import encode
from cells.llm.dialects.base import tool_from_leaf
from cells.llm.dialects.openai_chat import OpenAIChat
from cells.llm.system import prompt_of, tools_of
from colony.testing import (
    ColonyHarness,
    Delay,
    ScriptedOpenAI,
    Status,
    empty_reply,
    error_status,
    in_body_error,
    text_reply,
    tool_calls_reply,
)
from tests.conftest import CONTRACT, FIXTURES, TreeFactory, hive

KEY = "sk-test-SECRET-0123456789"
CONVERSATION = json.loads((FIXTURES / "llm" / "conversation.json").read_text())
GOLDEN = json.loads((FIXTURES / "llm" / "chat_request.golden.json").read_text())


def brain_tree(**params: Any) -> dict[str, Any]:
    return {
        "main/config.json": hive(
            {"from": ".", "to": "./brain"}, {"from": "./brain", "to": "/sink"}
        ),
        "main/brain/config.json": {
            "cell": {"type": "llm"},
            "params": {
                "provider": "openai",
                "model": "gpt-test",
                "api_key": KEY,
                "base_url": "http://127.0.0.1:9/v1",
                "max_retries": 2,
                **params,
            },
            "contract": CONTRACT,
        },
    }


def user(text: str = "hi") -> dict[str, Any]:
    return {"messages": [{"origin": "user", "type": "text", "text": text}]}


async def converse(
    make_tree: TreeFactory, script: list[Any], *bodies: Any, **params: Any
) -> tuple[list[Any], ScriptedOpenAI, ColonyHarness]:
    async with (
        ScriptedOpenAI(script) as model,
        ColonyHarness(
            make_tree(brain_tree(**params)), capture=["/sink"], llm_base_url=model.url
        ) as colony,
    ):
        for body in bodies or (user(),):
            await colony.send("/", body)
            await colony.settle(timeout=60)
        return colony.captured("/sink"), model, colony


def error_of(message: Any) -> tuple[str, dict[str, Any]]:
    assert message.headers.hop["finish_reason"] == "error"
    return message.headers.hop["error_code"], message.body["meta"]["error"]


# -- the request ----------------------------------------------------------------------------


async def test_the_request_body_matches_the_golden_file(make_tree: TreeFactory) -> None:
    replies, model, _ = await converse(
        make_tree,
        [text_reply("You're welcome.")],
        CONVERSATION,
        model="gpt-test",
        temperature=0.2,
        max_tokens=512,
        system_order=["style"],
        provider_extra={"seed": 7},
    )
    assert model.requests == [GOLDEN]
    headers = model.headers[0]
    assert headers["authorization"] == f"Bearer {KEY}"
    assert headers["content-type"] == "application/json"
    assert replies[0].headers.hop["finish_reason"] == "stop"


def test_the_request_is_serialised_with_sorted_keys_and_compact_separators() -> None:
    slots: dict[str, Any] = {}

    def flatten(node: dict[str, Any], path: str) -> None:
        for key, child in node.items():
            here = f"{path}.{key}" if path else key
            if "text" in child:
                slots[here] = child
            else:
                flatten(child, here)

    flatten(CONVERSATION["system"], "")
    body = OpenAIChat().request(
        model="gpt-test",
        prompt=prompt_of(slots, ["style"]),
        tools=[tool_from_leaf(t, "t") for t in tools_of(slots)],
        turns=CONVERSATION["messages"],
        max_tokens=512,
        temperature=0.2,
        native=lambda calls: None,
        extra={"seed": 7},
    )
    assert (
        encode(body, sort_keys=True)
        == json.dumps(GOLDEN, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    )


def test_consecutive_tool_calls_merge_a_following_text_joins_them_and_a_preceding_one_does_not() -> (
    None
):
    call = {"origin": "assistant", "type": "tool_call", "text": '{"name":"f","arguments":"{}"}'}
    turns = [
        {**call, "id": "a"},
        {**call, "id": "b"},
        {"origin": "tool", "type": "tool_result", "id": "a", "text": "1"},
        {"origin": "tool", "type": "tool_result", "id": "b", "text": "2"},
        {"origin": "assistant", "type": "text", "text": "summary"},
        {**call, "id": "c"},
        {"origin": "assistant", "type": "text", "text": "checking"},
        {"origin": "tool", "type": "tool_result", "id": "c", "text": "3"},
    ]
    wire = OpenAIChat().messages(turns, lambda calls: None)
    assert [len(m.get("tool_calls", [])) for m in wire] == [2, 0, 0, 0, 1, 0]
    assert wire[0]["content"] is None
    assert wire[3] == {"role": "assistant", "content": "summary"}
    assert wire[4]["content"] == "checking"


async def test_an_empty_api_key_sends_no_authorization_header(make_tree: TreeFactory) -> None:
    _, model, _ = await converse(make_tree, [text_reply("ok")], api_key="")
    assert "authorization" not in model.headers[0]


@pytest.mark.parametrize(
    "turn",
    [
        {"origin": "user", "type": "image", "text": "x"},
        {"origin": "tool", "type": "text", "text": "x"},
        {"origin": "assistant", "type": "tool_call", "id": "c", "text": "not json"},
        {"text_id": "01a22871-e003-7818-aaea-6e40c9818056"},
    ],
)
async def test_turns_chat_completions_cannot_carry_are_provider_errors_without_a_call(
    make_tree: TreeFactory, turn: dict[str, Any]
) -> None:
    replies, model, _ = await converse(make_tree, [text_reply("never")], {"messages": [turn]})
    code, error = error_of(replies[0])
    assert (code, error["source"]) == ("provider_error", "translate")
    assert model.requests == []
    assert replies[0].body["messages"] == [turn]  # the input passes through


# -- the reply ------------------------------------------------------------------------------


async def test_a_reply_becomes_tool_call_turns_then_text_with_usage_and_model(
    make_tree: TreeFactory,
) -> None:
    reply = tool_calls_reply(
        [("call_1", "calc", {"x": 1}), ("call_2", "calc", {"x": 2})],
        content="Working.",
        model="gpt-x",
        prompt_tokens=120,
        completion_tokens=9,
    )
    [message], _, _ = await converse(make_tree, [reply])
    assert message.headers.hop == {
        "finish_reason": "tool_calls",
        "tokens_prompt": 120,
        "tokens_completion": 9,
        "model": "gpt-x",
    }
    assert message.body["messages"] == [
        {
            "origin": "assistant",
            "type": "tool_call",
            "id": "call_1",
            "text": '{"arguments":"{\\"x\\":1}","name":"calc"}',
        },
        {
            "origin": "assistant",
            "type": "tool_call",
            "id": "call_2",
            "text": '{"arguments":"{\\"x\\":2}","name":"calc"}',
        },
        {"origin": "assistant", "type": "text", "text": "Working."},
    ]
    meta = message.body["meta"]
    assert meta["provider"] == "openai"
    assert meta["model"] == "gpt-x"
    assert meta["response_id"] == "chatcmpl-scripted"
    assert isinstance(meta["latency_ms"], int)


@pytest.mark.parametrize(
    ("raw", "mapped"),
    [("length", "length"), ("content_filter", "content_filter"), ("function_call", "tool_calls")],
)
async def test_finish_reasons_pass_through_and_function_call_reads_as_tool_calls(
    make_tree: TreeFactory, raw: str, mapped: str
) -> None:
    [message], _, _ = await converse(make_tree, [text_reply("x", finish_reason=raw)])
    assert message.headers.hop["finish_reason"] == mapped


@pytest.mark.parametrize("finish", [None, "weird"])
async def test_a_null_or_unknown_finish_reason_is_an_error_never_stop(
    make_tree: TreeFactory, finish: str | None
) -> None:
    body = text_reply("x")
    body["choices"][0]["finish_reason"] = finish
    [message], _, _ = await converse(make_tree, [body])
    code, error = error_of(message)
    assert (code, error["source"]) == ("provider_error", "parse")


# -- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("script", "code", "requests"),
    [
        ([error_status(401)], "auth", 1),
        ([error_status(404)], "model_not_found", 1),
        ([error_status(403)], "provider_error", 1),
        ([error_status(400)], "provider_error", 1),
        ([error_status(500)], "provider_error", 3),
        ([error_status(429, retry_after=0)], "rate_limit", 3),
    ],
)
async def test_a_failing_status_maps_to_its_error_code(
    make_tree: TreeFactory, script: list[Any], code: str, requests: int
) -> None:
    [message], model, _ = await converse(make_tree, script)
    got, error = error_of(message)
    assert got == code
    assert error["source"] == "wire"
    assert len(model.requests) == requests
    assert message.body["messages"] == user()["messages"]


async def test_a_failed_provider_call_carries_the_url_status_and_the_providers_message_redacted(
    make_tree: TreeFactory,
) -> None:
    """Issue 15 items 8 and 15: meta.error says where the call went (no password, no query
    values), what came back and what the provider said, minus anything secret."""
    leaky = Status(400, {"error": {"message": f"bad request; you sent Bearer {KEY}"}})
    async with ScriptedOpenAI([leaky]) as model:
        served = model.url
        base = served.replace("http://", "http://bob:hunter2pw@")
        async with ColonyHarness(
            make_tree(brain_tree()), capture=["/sink"], llm_base_url=base
        ) as colony:
            await colony.send("/", user())
            await colony.settle(timeout=30)
            [message] = colony.captured("/sink")
    code, error = error_of(message)
    assert code == "provider_error"
    assert error["status"] == 400
    assert error["url"] == served.replace("http://", "http://bob:[redacted]@") + (
        "/chat/completions"
    )
    assert error["upstream_message"] == "bad request; you sent Bearer [redacted]"
    assert error["detail"] == "HTTP 400"
    everything = json.dumps({"body": message.body, "hop": message.headers.hop})
    assert KEY not in everything
    assert "hunter2pw" not in everything


async def test_an_unreachable_provider_is_an_error_naming_the_url(make_tree: TreeFactory) -> None:
    tree = make_tree(brain_tree(max_retries=0))  # base_url http://127.0.0.1:9/v1: closed
    async with ColonyHarness(tree, capture=["/sink"]) as colony:
        await colony.send("/", user())
        await colony.settle(timeout=30)
        [message] = colony.captured("/sink")
    code, error = error_of(message)
    assert error["url"] == "http://127.0.0.1:9/v1/chat/completions"
    assert code == "provider_error"
    assert error["url"].endswith("/chat/completions")
    assert error["detail"].startswith("cannot connect")


async def test_a_429_then_success_is_retried_honouring_retry_after_and_logged(
    make_tree: TreeFactory,
) -> None:
    [message], model, colony = await converse(
        make_tree, [error_status(429, retry_after=0.2), error_status(503), text_reply("fine")]
    )
    assert message.headers.hop["finish_reason"] == "stop"
    assert len(model.requests) == 3
    retries = colony.logs("llm_retry", "warning")
    assert [r["status"] for r in retries] == [429, 503]
    assert retries[0]["delay_s"] == 0.2


async def test_no_answer_within_external_timeout_ms_is_timeout(make_tree: TreeFactory) -> None:
    [message], _, _ = await converse(
        make_tree, [Delay(5, text_reply("late"))], external_timeout_ms=200
    )
    code, _ = error_of(message)
    assert code == "timeout"


async def test_an_error_object_in_a_200_answer_is_classified_as_its_status(
    make_tree: TreeFactory,
) -> None:
    [message], _, _ = await converse(
        make_tree,
        [in_body_error("slow down", type="rate_limit_exceeded", code="rate_limit_exceeded")],
    )
    code, error = error_of(message)
    assert code == "rate_limit"
    assert error["in_body"] is True
    assert error["upstream_message"] == "slow down"


async def test_a_200_answer_that_is_not_a_completion_is_provider_error(
    make_tree: TreeFactory,
) -> None:
    [message], _, _ = await converse(make_tree, [{"id": "x", "model": "m"}])
    code, error = error_of(message)
    assert (code, error["source"]) == ("provider_error", "parse")


# -- empty rounds ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        (text_reply("half a pair \ud83d"), "lone surrogate \\ud83d"),
        ({**text_reply("x"), "usage": {"prompt_tokens": float("nan")}}, "NaN is not a JSON value"),
    ],
)
async def test_an_answer_that_is_not_standard_json_is_a_provider_error_naming_it(
    make_tree: TreeFactory, answer: Any, problem: str
) -> None:
    """Issue 15 item 17: what the colony cannot store or serve as JSON never enters it."""
    [message], _, _ = await converse(make_tree, [answer])
    code, error = error_of(message)
    assert code == "provider_error"
    assert problem in error["detail"]


async def test_an_empty_round_is_asked_once_more(make_tree: TreeFactory) -> None:
    [message], model, _ = await converse(make_tree, [empty_reply(), text_reply("there it is")])
    assert message.body["messages"][-1]["text"] == "there it is"
    assert len(model.requests) == 2
    assert model.requests[0] == model.requests[1]


async def test_a_second_empty_round_is_an_empty_reply_error_with_a_warning(
    make_tree: TreeFactory,
) -> None:
    [message], model, colony = await converse(make_tree, [empty_reply()])
    code, _ = error_of(message)
    assert code == "empty_reply"
    assert len(model.requests) == 2
    assert colony.logs("llm_empty_reply", "warning")


# -- system slots ---------------------------------------------------------------------------


async def test_system_slots_persist_and_a_system_only_message_is_silent(
    make_tree: TreeFactory,
) -> None:
    first = {"system": {"persona": {"text": "Be kind."}}}
    second = {
        "system": {"tools": {"calc": {"text": '{"type":"function","function":{"name":"calc"}}'}}},
        **user(),
    }
    replies, model, _ = await converse(make_tree, [text_reply("ok")], first, second, user("again"))
    assert len(replies) == 2
    assert model.requests[0]["messages"][0] == {"role": "system", "content": "Be kind."}
    assert model.requests[1]["tools"] == [
        {
            "type": "function",
            "function": {"name": "calc", "parameters": {"type": "object", "properties": {}}},
        }
    ]


async def test_replace_removes_a_subtree_before_writing(make_tree: TreeFactory) -> None:
    first = {"system": {"memory": {"a": {"text": "old a"}, "b": {"text": "old b"}}}}
    second = {"system": {"memory": {"$replace": True, "c": {"text": "new c"}}}, **user()}
    _, model, _ = await converse(make_tree, [text_reply("ok")], first, second)
    assert model.requests[0]["messages"][0]["content"] == "new c"


async def test_an_empty_text_revokes_a_slot_from_the_prompt(make_tree: TreeFactory) -> None:
    bodies = [
        {"system": {"a": {"text": "A"}, "b": {"text": "B"}}},
        {"system": {"a": {"text": ""}}, **user()},
    ]
    _, model, _ = await converse(make_tree, [text_reply("ok")], *bodies)
    assert model.requests[0]["messages"][0]["content"] == "B"


@pytest.mark.parametrize(
    ("params", "system", "needle"),
    [
        ({"system_max_leaf_bytes": 64}, {"big": {"text": "x" * 100}}, "system_max_leaf_bytes"),
        (
            {"system_max_slots": 2},
            {"a": {"text": "1"}, "b": {"text": "2"}, "c": {"text": "3"}},
            "system_max_slots",
        ),
        ({"system_writable": ["memory"]}, {"identity": {"text": "hijack"}}, "not writable"),
        ({}, {"a": {"$merge": True, "text": "x"}}, "unknown directive"),
    ],
)
async def test_the_system_gate_refuses_the_whole_message_and_calls_nothing(
    make_tree: TreeFactory, params: dict[str, Any], system: dict[str, Any], needle: str
) -> None:
    [message], model, _ = await converse(
        make_tree, [text_reply("never")], {"system": system, **user()}, **params
    )
    code, error = error_of(message)
    assert (code, error["source"]) == ("invalid_input", "parse")
    assert needle in error["detail"]
    assert model.requests == []
    assert message.body["messages"] == user()["messages"]


async def test_seed_system_jsonl_fills_a_fresh_database(make_tree: TreeFactory) -> None:
    tree = brain_tree()
    tree["main/brain/seed/system.jsonl"] = (
        '{"schema": {"slot_path": "text", "value": "json"}}\n{"slot_path": "identity", "value": {"text": "Seeded."}}\n'
    )
    async with ScriptedOpenAI([text_reply("ok")]) as model:
        async with ColonyHarness(
            make_tree(tree), capture=["/sink"], llm_base_url=model.url
        ) as colony:
            await colony.send("/", user())
            await colony.settle()
        assert model.requests[0]["messages"][0] == {"role": "system", "content": "Seeded."}


# -- params at runtime ----------------------------------------------------------------------


async def test_a_params_slot_changes_the_model_for_this_and_later_calls(
    make_tree: TreeFactory,
) -> None:
    bodies = [{"params": {"model": "gpt-other"}, **user()}, user()]
    replies, model, _ = await converse(make_tree, [text_reply("ok")], *bodies)
    assert [r["model"] for r in model.requests] == ["gpt-other", "gpt-other"]
    assert len(replies) == 2


async def test_a_params_slot_may_not_change_the_key(make_tree: TreeFactory) -> None:
    [message], model, _ = await converse(
        make_tree, [text_reply("ok")], {"params": {"api_key": "x"}, **user()}
    )
    code, error = error_of(message)
    assert code == "invalid_input"
    assert error["detail"].startswith("params.api_key cannot be changed at runtime (mutable: ")
    assert model.requests == []


# -- secrets --------------------------------------------------------------------------------


async def test_the_key_never_reaches_logs_meta_the_message_log_or_dead_letters(
    make_tree: TreeFactory, tmp_path: Path
) -> None:
    leaky = Status(401, {"error": {"message": f"Incorrect API key provided: {KEY}"}})
    async with (
        ScriptedOpenAI([leaky]) as model,
        ColonyHarness(
            make_tree(brain_tree()),
            capture=["/sink"],
            llm_base_url=model.url,
            workdir=tmp_path / "run",
        ) as colony,
    ):
        await colony.send("/", user())
        await colony.send("/brain", {"messages": "not a list"})
        await colony.settle()
        [message, _] = colony.captured("/sink")
        assert (
            message.body["meta"]["error"]["upstream_message"]
            == "Incorrect API key provided: [redacted]"
        )
        records = json.dumps(colony.records, default=str)
    assert KEY not in records
    for db in (tmp_path / "run").rglob("*.db"):
        with sqlite3.connect(db) as conn:
            dump = "\n".join(conn.iterdump())
        assert KEY not in dump, db
