"""Golden replay vectors, one file per wire shape in fixtures/vectors/replay/: UBF in, the
exact request out; a response in, the exact UBF turns, hop facts and native blocks out."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cells.llm.dialects import DIALECTS
from cells.llm.dialects.base import tool_from_leaf
from tests.conftest import FIXTURES

FILES = sorted((FIXTURES / "vectors" / "replay").glob("*.json"))


def cases(kind: str) -> list[Any]:
    out = []
    for file in FILES:
        doc = json.loads(file.read_text())
        for vector in doc.get(kind, []):
            out.append(pytest.param(doc["provider"], vector, id=f"{file.stem}:{vector['name']}"))
    return out


def test_every_dialect_has_a_vector_file() -> None:
    assert {json.loads(f.read_text())["provider"] for f in FILES} == set(DIALECTS)


@pytest.mark.parametrize(("provider", "vector"), cases("request_vectors"))
def test_a_conversation_becomes_the_exact_request(provider: str, vector: dict[str, Any]) -> None:
    natives = {tuple(k.split(",")): v for k, v in vector.get("native", {}).items()}
    body = DIALECTS[provider].request(
        model=vector["model"],
        prompt=vector.get("prompt", ""),
        tools=[tool_from_leaf(t, "vector") for t in vector.get("tools", [])],
        turns=vector["turns"],
        max_tokens=vector.get("max_tokens", 512),
        temperature=vector.get("temperature", 0.2),
        native=lambda calls: natives.get(calls),
        extra=vector.get("extra", {}),
    )
    assert body == vector["expected"]
    # order matters on the wire for the dialects that keep it
    assert json.dumps(body) == json.dumps(vector["expected"])


@pytest.mark.parametrize(("provider", "vector"), cases("response_vectors"))
def test_a_response_becomes_the_exact_turns_and_facts(
    provider: str, vector: dict[str, Any]
) -> None:
    reply = DIALECTS[provider].parse(vector["response"])
    expected = vector["expected"]
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
    assert {k: got[k] for k in expected} == expected
