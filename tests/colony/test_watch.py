"""``meclaw watch``'s lines, drawn from event objects written by hand in the shape
``GET /colony/events`` sends: what each kind shows, how it is coloured, and that an event
missing fields or of an unknown kind is still one readable line."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console
from rich.text import Text

from colony.watch import dropped_line, event_line, short_id

START = 1_700_000_000_000
TRACE = "0192d3f0-1a2b-7c3d-8e4f-5a6b7c8d9e0f"


def event(kind: str, at: int = START + 1234, **fields: Any) -> dict[str, Any]:
    return {"kind": kind, "at_ms": at, "trace_id": TRACE, "message_id": "m1", **fields}


def moved(sender: str, target: str, ttl: int, **more: Any) -> dict[str, Any]:
    """A route's fields (``from`` is a keyword of Python's)."""
    return {"from": sender, "to": target, "ttl": ttl, **more}


def plain(text: Text) -> str:
    return text.plain.rstrip()


def ansi(text: Text) -> str:
    out = io.StringIO()
    Console(file=out, force_terminal=True, color_system="standard", width=300).print(text)
    return out.getvalue()


def test_a_line_starts_with_the_ms_since_the_watch_began_the_kind_and_the_trace_tail() -> None:
    line = plain(event_line(event("route", **moved("/a", "/b", 7)), START))
    assert line == "    1234 ms route        7c8d9e0f  /a → /b  ttl 7"


def test_the_trace_id_is_shown_by_its_tail_which_tells_traces_of_one_moment_apart() -> None:
    # UUID v7: two traces begun in the same millisecond share their first 13 characters.
    assert short_id(TRACE) == "7c8d9e0f"
    assert short_id("0192d3f0-1a2b-7c3d-8e4f-000000000001") != short_id(TRACE)
    assert short_id(None) == "?"


def test_a_route_names_the_edges_that_fired_at_a_hive() -> None:
    hop = event("route", **moved("@external", "/", 8, edges=["/#0", "/#2"]))
    assert plain(event_line(hop, START)).endswith("@external → /  ttl 8  fired /#0,/#2")


def test_a_handle_end_says_how_long_the_cell_took_and_its_outcome_in_its_colour() -> None:
    done = event("handle_end", cell="/brain", duration_ms=812, outcome="ok", error=None)
    line = event_line(done, START)
    assert plain(line).endswith("/brain  cell took 812 ms · ok")
    assert "\x1b[32mok" in ansi(line)
    for outcome, colour in (("error", "31"), ("crashed", "31"), ("timed_out", "31")):
        failed = event("handle_end", cell="/c", duration_ms=3, outcome=outcome, error="boom")
        line = event_line(failed, START)
        assert plain(line).endswith(f"/c  cell took 3 ms · {outcome}: boom")
        assert f"\x1b[{colour}m{outcome}: boom" in ansi(line), outcome
    refused = event("handle_end", cell="/c", duration_ms=0, outcome="refused", error="full")
    assert "\x1b[33mrefused" in ansi(event_line(refused, START))


def test_a_crash_shows_the_exception_line_of_its_traceback() -> None:
    traceback = 'Traceback (most recent call last):\n  File "x", line 1\nRuntimeError: boom\n'
    crashed = event("handle_end", cell="/c", duration_ms=1, outcome="crashed", error=traceback)
    assert plain(event_line(crashed, START)).endswith("crashed: RuntimeError: boom")


def test_an_llm_event_shows_model_latency_and_tokens() -> None:
    call = event(
        "llm",
        cell="/brain",
        model="gpt-4o-mini",
        latency_ms=790,
        tokens_prompt=120,
        tokens_completion=45,
    )
    assert plain(event_line(call, START)).endswith("/brain  gpt-4o-mini · 790 ms · 120 → 45 tokens")


def test_a_dead_letter_is_red_and_bold_with_its_code_and_detail() -> None:
    letter = event(
        "dead_letter",
        error_code="hive_no_route",
        sender="/greeter",
        target="/after",
        detail="no out-edge of the hive matched the message",
    )
    line = event_line(letter, START)
    assert plain(line).endswith(
        "✗ /greeter → /after  hive_no_route: no out-edge of the hive matched the message"
    )
    assert ansi(line).startswith("\x1b[1;31m    1234 ms dead_letter  7c8d9e0f  ✗")  # all of it


def test_an_event_of_the_record_before_the_watch_began_shows_a_negative_time() -> None:
    assert plain(event_line(event("route", at=START - 40), START)).startswith("     -40 ms")


def test_an_event_missing_fields_or_of_an_unknown_kind_is_still_one_line() -> None:
    assert plain(event_line({"kind": "route"}, START)) == ("            route        ?  ? → ?")
    newer = plain(event_line({"kind": "compacted", "at_ms": START, "cell": "/x"}, START))
    assert newer == '       0 ms compacted    ?  {"cell": "/x"}'
    assert "\n" not in plain(event_line(event("handle_end", error="a\nb", outcome="x"), START))


def test_a_dropped_notice_says_how_many_and_that_they_come_from_the_record() -> None:
    line = dropped_line(17)
    assert line.plain == "17 events dropped (watch fell behind); fetching them from the record"
    assert "\x1b[33m17 events dropped" in ansi(line)
