"""What the offer to llm cells holds of an odd tool list: only what providers and the llm
cell's gate take."""

from __future__ import annotations

import json
from typing import Any

from cells.llm.params import LlmParams
from cells.llm.system import check_gate, parse_write
from cells.mcp.wire import OFFER_MAX_LEAF_BYTES, OFFER_MAX_TOOLS, listing
from colony.envelope import JsonObject


def offered(tools: list[JsonObject]) -> tuple[dict[str, Any], dict[str, str]]:
    message, skipped = listing("/mcp", tools, 1)
    slots = dict(message["system"]["tools"]["mcp"])
    del slots["$replace"]
    return {k: json.loads(v["text"])["function"] for k, v in slots.items()}, skipped


def passes_the_llm_gate(message: JsonObject) -> None:
    defaults = LlmParams.model_fields
    check_gate(
        parse_write(message["system"]),
        set(),
        max_slots=defaults["system_max_slots"].default,
        max_leaf_bytes=defaults["system_max_leaf_bytes"].default,
        writable=[],
    )


def test_names_providers_refuse_are_not_offered_and_are_named_as_skipped() -> None:
    tools = [
        {"name": n, "inputSchema": {"type": "object"}}
        for n in ("ok-1", "a.b", "a/b", "$ref", "x" * 65, "has space")
    ]
    functions, skipped = offered(tools)
    assert list(functions) == ["ok-1"]
    assert set(skipped) == {"a.b", "a/b", "$ref", "x" * 65, "has space"}
    passes_the_llm_gate(listing("/mcp", tools, 1).message)


def test_a_name_listed_twice_is_offered_once() -> None:
    functions, skipped = offered(
        [{"name": "a_b", "description": "first"}, {"name": "a_b", "description": "second"}]
    )
    assert functions["a_b"]["description"] == "first"
    assert skipped == {"a_b": "listed twice"}


def test_an_input_schema_that_is_no_object_schema_is_offered_as_taking_any_object() -> None:
    functions, _ = offered(
        [
            {"name": "a", "inputSchema": ["x"]},
            {"name": "b", "inputSchema": {"type": "string"}},
            {"name": "c", "inputSchema": True},
            {"name": "d"},
        ]
    )
    for name in "abcd":
        assert functions[name]["parameters"] == {"type": "object", "properties": {}}


def test_an_offer_past_the_llm_cells_limits_is_cut_to_what_fits() -> None:
    huge = {"type": "object", "properties": {"p": {"description": "x" * OFFER_MAX_LEAF_BYTES}}}
    tools: list[JsonObject] = [{"name": "huge", "inputSchema": huge}]
    tools += [{"name": f"t{i}", "inputSchema": {"type": "object"}} for i in range(300)]
    message, skipped = listing("/mcp", tools, 1)
    functions, _ = offered(tools)
    assert "huge" in skipped
    assert "huge" not in functions
    assert len(functions) == OFFER_MAX_TOOLS
    assert len(skipped) == 1 + 300 - OFFER_MAX_TOOLS
    passes_the_llm_gate(message)
