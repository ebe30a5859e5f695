"""The partition of a conversation: read once at ingress, the same on every node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from colony.cluster.partition import (
    PartitionPathError,
    canonical,
    context_keys,
    partition_key,
    partition_of,
)

TRACE = "0191a7b2-trace"

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
segments = st.text(min_size=1, max_size=10).filter(lambda s: "." not in s and s == s.strip())


# -- the key -----------------------------------------------------------------------------------


def test_the_default_path_keys_every_message_by_its_trace_id() -> None:
    assert partition_key("trace_id", TRACE, {"chat_id": 7}) == TRACE


def test_a_context_path_keys_a_message_by_that_context_value() -> None:
    assert partition_key("context.chat_id", TRACE, {"chat_id": "c-1"}) == "c-1"


def test_a_nested_path_walks_objects_in_the_context() -> None:
    context = {"user": {"account": {"id": "acct-9"}}}
    assert partition_key("context.user.account.id", TRACE, context) == "acct-9"


@pytest.mark.parametrize(
    "context",
    [
        {},
        {"chat_id": None},
        {"chat_id": {"id": 1}},
        {"chat_id": [1, 2]},
        {"other": "x"},
    ],
    ids=["absent", "null", "object", "array", "another key"],
)
def test_no_scalar_at_the_path_falls_back_to_the_trace_id(context: dict[str, Any]) -> None:
    assert partition_key("context.chat_id", TRACE, context) == TRACE


def test_a_path_through_a_scalar_falls_back_to_the_trace_id() -> None:
    assert partition_key("context.user.id", TRACE, {"user": "not an object"}) == TRACE


def test_a_number_and_its_digits_as_a_string_are_one_conversation() -> None:
    keys = {partition_key("context.chat_id", TRACE, {"chat_id": v}) for v in (42, 42.0, "42")}
    assert keys == {"42"}


def test_booleans_and_fractions_have_one_spelling_each() -> None:
    assert canonical(True) == "true"
    assert canonical(False) == "false"
    assert canonical(1) == "1"  # true is not 1
    assert canonical(0.5) == "0.5"
    assert canonical(-0.0) == "0"


def test_an_integer_too_long_for_decimal_still_has_a_stable_key() -> None:
    huge = 10**5000
    assert canonical(huge) == canonical(huge) == hex(huge)


@given(path=st.lists(segments, min_size=1, max_size=4), context=json_values, trace=st.text())
def test_reading_a_key_never_fails_and_gives_a_scalar_or_the_trace_id(
    path: list[str], context: Any, trace: str
) -> None:
    context = context if isinstance(context, dict) else {"v": context}
    key = partition_key("context." + ".".join(path), trace, context)
    node: Any = context
    for segment in path:
        node = node.get(segment) if isinstance(node, dict) else None
    assert key == (canonical(node) if canonical(node) is not None else trace)


@given(context=json_values, trace=st.text())
def test_a_message_chain_keeps_its_key_whatever_its_context_holds(context: Any, trace: str) -> None:
    # The fallback depends on nothing but the message: read twice, the same key.
    context = context if isinstance(context, dict) else {"chat_id": context}
    first = partition_key("context.chat_id", trace, context)
    assert partition_key("context.chat_id", trace, json.loads(json.dumps(context))) == first


# -- the path ----------------------------------------------------------------------------------


@given(st.lists(segments, min_size=1, max_size=5))
def test_a_context_path_reads_back_as_its_keys(keys: list[str]) -> None:
    assert context_keys("context." + ".".join(keys)) == tuple(keys)


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("chat_id", "start with 'context.'"),
        ("hop.chat_id", "start with 'context.'"),
        ("Context.chat_id", "start with 'context.'"),
        ("context", "names context itself"),
        ("context.", "names context itself"),
        ("context..chat_id", "key 1 after 'context' is empty"),
        ("context.chat_id.", "key 2 after 'context' is empty"),
        ("context. chat_id", "key 1 after 'context' starts or ends with whitespace"),
        ("", "start with 'context.'"),
    ],
)
def test_an_unreadable_path_is_refused_saying_why(path: str, says: str) -> None:
    with pytest.raises(PartitionPathError) as refused:
        context_keys(path)
    assert says in str(refused.value)


@given(st.text(max_size=30))
def test_any_text_is_either_a_path_or_a_refusal(path: str) -> None:
    try:
        keys = context_keys(path)
    except PartitionPathError:
        return
    assert path == "trace_id" or path == "context." + ".".join(keys)


# -- the partition -----------------------------------------------------------------------------


def test_known_answers_pin_the_hash_so_an_upgrade_never_moves_a_conversation() -> None:
    # BLAKE2b-64 of the UTF-8 key, big-endian, modulo the partition count.
    assert partition_of("chat-42", 16) == 0xDB01020124A05E8C % 16 == 12
    assert partition_of("chat-42", 4096) == 3724
    assert partition_of("42", 16) == 10
    assert partition_of("", 7) == 0
    assert partition_of("0191a7b2-trace", 1) == 0


@given(key=st.text(), partitions=st.integers(1, 4096))
def test_a_partition_is_always_in_range(key: str, partitions: int) -> None:
    assert 0 <= partition_of(key, partitions) < partitions


def test_a_lone_surrogate_in_a_key_has_a_partition_too() -> None:
    assert 0 <= partition_of("chat-\ud800", 16) < 16


def test_zero_partitions_is_a_bug_in_the_caller() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        partition_of("k", 0)


_OTHER_PROCESS = """
import json, sys
from colony.cluster.partition import partition_of
keys = json.load(sys.stdin)
json.dump([[partition_of(k, 16), partition_of(k, 4093), hash(k)] for k in keys], sys.stdout)
"""


@settings(max_examples=4, deadline=None)  # two processes per example
@given(st.lists(st.text(max_size=20), min_size=200, max_size=200, unique=True))
def test_another_process_with_another_hash_seed_computes_the_same_partitions(
    keys: list[str],
) -> None:
    answers = []
    for seed in ("1", "2"):
        done = subprocess.run(
            [sys.executable, "-c", _OTHER_PROCESS],
            input=json.dumps(keys),
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        answers.append(json.loads(done.stdout))
    ours = [[partition_of(k, 16), partition_of(k, 4093)] for k in keys]
    assert [a[:2] for a in answers[0]] == [a[:2] for a in answers[1]] == ours
    # The two processes really hashed differently: Python's hash() would have split them.
    hashed = [[a[2] for a, key in zip(run, keys, strict=True) if key] for run in answers]
    assert hashed[0] != hashed[1]


@pytest.mark.parametrize("partitions", [16, 7, 256])
def test_ten_thousand_conversations_spread_evenly(partitions: int) -> None:
    counts = [0] * partitions
    for i in range(10_000):
        counts[partition_of(f"chat-{i}", partitions)] += 1
    expected = 10_000 / partitions
    chi_square = sum((c - expected) ** 2 / expected for c in counts)
    # The 0.999 quantile of chi-square with partitions-1 degrees of freedom, roughly: a
    # uniform hash passes, a biased one (say, one partition twice as full) does not.
    bound = (partitions - 1) + 4.5 * (2 * (partitions - 1)) ** 0.5
    assert chi_square < bound, (chi_square, bound, counts)
