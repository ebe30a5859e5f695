"""``meclaw trace``'s tree, drawn from rows written by hand in the shape ``GET /colony/trace``
answers with: what each hop shows, where failures are marked, and what an older database
(no ``handling`` rows, no ``at_ms``) still shows."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from colony.dead_letters import DeadLetter
from colony.effects import Handled, LogRow
from colony.envelope import source_message
from colony.persist.db import ColonyDb
from colony.persist.pg.db import PgDb
from colony.traceview import (
    TraceRecord,
    plain_lines,
    read_trace,
    trace_json,
    trace_lines,
    trace_tree,
)

TRACE = "0192d3f0-0000-7000-8000-00000000abcd"


def hop(
    id: str,
    parent: str | None,
    route: str,
    ttl: int,
    at_ms: int | None = None,
    *,
    hop_fields: dict[str, Any] | None = None,
    body: Any = None,
    edges: list[str] | None = None,
) -> dict[str, Any]:
    sender, target = route.split(" → ")
    return {
        "id": id,
        "trace_id": TRACE,
        "parent_message_id": parent,
        "from_path": sender,
        "to_path": target,
        "ttl": ttl,
        "headers": {"context": {}, "hop": hop_fields or {}},
        "body": body if body is not None else {"messages": []},
        "at_ms": at_ms,
        "edges": edges or [],
    }


def handled(message: str, cell: str, took: int, outcome: str = "ok", **more: Any) -> dict[str, Any]:
    return {
        "message_id": message,
        "trace_id": TRACE,
        "cell": cell,
        "cell_type": "code",
        "started_ms": 1_000,
        "duration_ms": took,
        "outcome": outcome,
        "error": None,
        "model": None,
        "llm_latency_ms": None,
        "tokens_prompt": None,
        "tokens_completion": None,
        **more,
    }


def letter(n: int, code: str, message_id: str, detail: str, **more: Any) -> dict[str, Any]:
    return {
        "id": n,
        "error_code": code,
        "message_id": message_id,
        "detail": detail,
        "trace_id": TRACE,
        **more,
    }


def draw(*hops: dict[str, Any], handling: Any = (), letters: Any = ()) -> list[str]:
    return plain_lines(trace_tree(TraceRecord(TRACE, hops, handling, letters)))


def coloured(record: TraceRecord) -> str:
    out = io.StringIO()
    Console(file=out, force_terminal=True, color_system="standard", width=300).print(
        trace_tree(record)
    )
    return out.getvalue()


CHAIN = (
    hop("m1", None, "@external → /", 8, 5_000),
    hop("m2", "m1", "/ → /box", 7, 5_001, edges=["e0"]),
    hop("m3", "m2", "/box → /box/sink", 6, 5_003),
)


def test_each_hop_sits_under_its_parent_with_its_ttl_and_the_ms_since_the_trace_began() -> None:
    assert draw(*CHAIN) == [
        f"trace {TRACE}  3 hops · 3 ms",
        "└── @external → /  ttl 8  +0 ms",
        "    └── / → /box  ttl 7  +1 ms  fired e0",
        "        └── /box → /box/sink  ttl 6  +3 ms",
    ]


def test_a_hop_shows_how_long_the_cell_it_went_to_took_and_its_outcome() -> None:
    lines = draw(*CHAIN, handling=[handled("m3", "/box/sink", 42)])
    assert lines[-1] == "        └── /box → /box/sink  ttl 6  +3 ms  ·  took 42 ms · ok"


def test_a_handling_is_matched_to_its_hop_by_message_and_cell() -> None:
    # The same message handled by another cell (a fan-out's other branch) is not this hop's.
    lines = draw(*CHAIN, handling=[handled("m3", "/elsewhere", 9), handled("m2", "/box/sink", 7)])
    assert "took" not in "".join(lines[:4])
    assert lines[4:] == [
        "├── /elsewhere handled message …m3 (no logged hop)  ·  took 9 ms · ok",
        "└── /box/sink handled message …m2 (no logged hop)  ·  took 7 ms · ok",
    ]


def test_an_llm_call_shows_model_latency_and_prompt_and_completion_tokens() -> None:
    call = handled(
        "m3",
        "/box/sink",
        812,
        model="gpt-4o-mini",
        llm_latency_ms=790,
        tokens_prompt=120,
        tokens_completion=45,
    )
    assert draw(*CHAIN, handling=[call])[-1].endswith(
        "took 812 ms · ok · gpt-4o-mini · 790 ms · 120 → 45 tokens"
    )


def test_a_failed_step_shows_its_error_text_once_in_red() -> None:
    failing = hop(
        "m4",
        "m3",
        "/box/sink → /box/after",
        5,
        5_050,
        hop_fields={"finish_reason": "error", "error_code": "script_failed"},
        body={"error": "ValueError: no greeting for Ada"},
    )
    crash = handled(
        "m3", "/box/sink", 40, "error", error="script_failed: ValueError: no greeting for Ada"
    )
    record = TraceRecord(TRACE, (*CHAIN, failing), [crash])
    lines = plain_lines(trace_tree(record))
    assert lines[3:] == [
        "        └── /box → /box/sink  ttl 6  +3 ms  ·  took 40 ms · error",
        "            ├── ✗ error script_failed: ValueError: no greeting for Ada",
        "            └── /box/sink → /box/after  ttl 5  +50 ms  [finish_reason=error, "
        "error_code=script_failed]",
    ]  # the emission carrying the same error does not repeat it
    assert "\x1b[31m✗ error script_failed: ValueError: no greeting for Ada" in coloured(record)


def test_an_emission_error_is_shown_under_its_hop_when_no_handling_row_says_it() -> None:
    failing = hop(
        "m4",
        "m3",
        "/box/sink → /box/after",
        5,
        hop_fields={"finish_reason": "error", "error_code": "provider_error"},
        body={"error": "403: this key may not use m"},
    )
    assert draw(*CHAIN, failing)[-1] == (
        "                └── ✗ error provider_error: 403: this key may not use m"
    )


def test_a_crash_a_timeout_and_a_refusal_are_each_coloured_by_outcome() -> None:
    for outcome, colour in (("crashed", "31"), ("timed_out", "31"), ("refused", "33")):
        record = TraceRecord(TRACE, CHAIN, [handled("m3", "/box/sink", 5, outcome)])
        assert f"\x1b[{colour}m{outcome}" in coloured(record), outcome
    record = TraceRecord(TRACE, CHAIN, [handled("m3", "/box/sink", 5)])
    assert "\x1b[32mok" in coloured(record)


def test_a_cell_that_took_a_message_again_after_a_crash_shows_both_handlings() -> None:
    lines = draw(
        *CHAIN,
        handling=[
            handled("m3", "/box/sink", 3, "crashed", error="RuntimeError: boom"),
            handled("m3", "/box/sink", 8),
        ],
    )
    assert lines[3].endswith("ttl 6  +3 ms  ·  took 8 ms · ok")
    assert lines[4:] == [
        "            ├── earlier:  ·  took 3 ms · crashed",
        "            └── ✗ crashed: RuntimeError: boom",
    ]


def test_a_dead_letter_is_marked_with_a_red_cross_on_the_hop_it_died_on() -> None:
    died = letter(1, "hive_no_route", "m3", "no out-edge of the hive matched the message")
    record = TraceRecord(TRACE, CHAIN, (), [died])
    assert plain_lines(trace_tree(record))[-1] == (
        "            └── ✗ died here: dead letter #1 hive_no_route: no out-edge of the hive "
        "matched the message"
    )
    assert "\x1b[1;31m✗ died here: dead letter #1" in coloured(record)
    assert plain_lines(trace_tree(record))[0].endswith("3 hops · 3 ms · 1 dead letter")


def test_a_message_that_died_before_becoming_a_hop_hangs_under_the_hop_it_came_from() -> None:
    stored = {
        "id": "m9",
        "parent_message_id": "m2",
        "headers": {"context": {}, "hop": {"finish_reason": "error", "error_code": "boom"}},
        "body_payload": {"error": "it broke"},
    }
    nowhere = letter(
        2,
        "unresolved_path",
        "m9",
        "no cell or hive at this path",
        sender_path="/box",
        original_target="/nowhere",
        message=stored,
    )
    lines = draw(*CHAIN, letters=[nowhere])
    assert lines[3:] == [
        "        ├── /box → /box/sink  ttl 6  +3 ms",
        "        └── ✗ /box → /nowhere  dead letter #2 unresolved_path: no cell or hive at this path",
        "            └── ✗ error boom: it broke",
    ]


def test_a_dead_letter_of_no_known_message_is_drawn_at_the_top() -> None:
    nowhere = letter(3, "unresolved_path", "mx", "gone", sender_path="/", original_target="/x")
    assert draw(letters=[nowhere]) == [
        f"trace {TRACE}  0 hops · 1 dead letter",
        "└── ✗ / → /x  dead letter #3 unresolved_path: gone",
    ]


def test_rows_of_an_older_database_draw_the_hops_without_times_or_durations() -> None:
    old = [{k: v for k, v in h.items() if k not in ("at_ms", "edges")} for h in CHAIN]
    assert draw(*old) == [
        f"trace {TRACE}  3 hops",
        "└── @external → /  ttl 8",
        "    └── / → /box  ttl 7",
        "        └── /box → /box/sink  ttl 6",
    ]


def test_a_trace_cut_at_the_read_limit_says_so() -> None:
    record = TraceRecord(TRACE, CHAIN, truncated=True)
    assert plain_lines(trace_tree(record))[-1] == "└── … only the first 3 hops are shown"


def test_the_json_form_has_the_shape_of_the_http_read_without_stored_messages() -> None:
    died = letter(1, "x", "m3", "d", message={"id": "m3"})
    record = TraceRecord(TRACE, CHAIN, [handled("m3", "/box/sink", 1)], [died])
    doc = json.loads(trace_json(record))
    assert sorted(doc) == ["dead_letters", "handling", "trace"]
    assert [r["id"] for r in doc["trace"]] == ["m1", "m2", "m3"]
    assert doc["handling"][0]["duration_ms"] == 1
    assert "message" not in doc["dead_letters"][0]


def test_a_database_without_the_handling_table_draws_its_hops(tmp_path: Path) -> None:
    db = ColonyDb(tmp_path / "colony.db")
    try:
        first = source_message("/box", {"messages": []})
        db.write([LogRow(first, "@external", "/box", 8, 7_000)])
        db.close()
        with db.source.connect(write=True) as session:
            session.execute("DROP VIEW handling")
        assert trace_lines(db.source, first.trace_id)[1:] == ["└── @external → /box  ttl 8  +0 ms"]
    finally:
        db.close()


@pytest.fixture
def db(either_db: ColonyDb | PgDb) -> ColonyDb | PgDb:
    return either_db


async def test_a_trace_reads_the_same_tree_from_colony_db_and_the_cluster_database(
    db: ColonyDb | PgDb,
) -> None:
    first = source_message("/box", {"messages": []}, trace_id="a trace id a client chose")
    second = source_message("/box/llm", {"messages": []}, trace_id=first.trace_id)
    second.parent_message_id = first.id
    lost = source_message("/nowhere", {"messages": []}, trace_id=first.trace_id)
    lost.parent_message_id = second.id
    call = Handled(second.id, first.trace_id, "/box/llm", "llm", 7_010, 812, "ok", None, "m", 790)
    db.write(
        [
            LogRow(first, "@external", "/box", 8, 7_000, ("/box#0",)),
            LogRow(second, "/box", "/box/llm", 7, 7_004),
            call,
            DeadLetter("unresolved_path", "/box/llm", "/nowhere", "/nowhere", lost, "no cell"),
        ]
    )
    await db.flush()
    record = read_trace(db.source, first.trace_id)
    assert plain_lines(trace_tree(record))[1:] == [
        "└── @external → /box  ttl 8  +0 ms  fired /box#0",
        "    └── /box → /box/llm  ttl 7  +4 ms  ·  took 812 ms · ok · m · 790 ms",
        "        └── ✗ /box/llm → /nowhere  dead letter #1 unresolved_path: no cell",
    ]
