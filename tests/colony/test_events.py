"""The event hub: what a frame says, and what a full buffer keeps and counts."""

from __future__ import annotations

import json

from colony.effects import Effects, LogRow
from colony.envelope import follow_up, source_message
from colony.events import Event, Events, Interest

BODY: dict[str, list[object]] = {"messages": []}


def hand_off(hops: int, to: str = "/h") -> Effects:
    fx = Effects()
    message = source_message("/", BODY)
    fx.logs.append(LogRow(message, "@external", "/", 63, fx.at_ms, ("/#0",)))
    for n in range(hops - 1):
        message = follow_up(
            message, target=f"{to}{n}", context={}, hop={}, body=BODY, reply_to=None, ttl=62 - n
        )
        fx.logs.append(LogRow(message, "/", f"{to}{n}", 62 - n, fx.at_ms))
    return fx


def parsed(frame: bytes) -> tuple[str, str, dict[str, object]]:
    head, kind, data = frame.decode().rstrip("\n").split("\n")
    return head.removeprefix("id: "), kind.removeprefix("event: "), json.loads(data[6:])


def test_a_route_frame_says_what_its_event_data_says_even_for_paths_needing_escapes() -> None:
    for odd in ('/quote"d', "/back\\slash", "/ünïcode", "/tab\there", "/new\nline"):
        fx = hand_off(2, to=odd)
        for n, row in enumerate(fx.logs, 1):
            fast = Event(fx.at_ms, n, "route", row=row).frame
            slow = Event(fx.at_ms, n, "route", data=Event(fx.at_ms, n, "route", row=row).data)
            assert fast == slow.frame
            event_id, kind, data = parsed(fast)
            assert (event_id, kind, data["to"]) == (f"{fx.at_ms}-{n}", "route", row.to_path)


def test_a_stream_s_full_buffer_keeps_the_oldest_and_counts_the_rest() -> None:
    events = Events()
    stream = events.watch_frames(Interest(), limit=5)
    events.applied(hand_off(3))
    events.applied(hand_off(4))
    frames, dropped, newest = stream.take_frames()
    assert len(frames) == 5
    assert dropped == 2
    assert newest == parsed(frames[-1])[0]
    events.applied(hand_off(1))
    frames, dropped, _ = stream.take_frames()
    assert (len(frames), dropped) == (1, 0)


def test_a_stream_wanting_other_kinds_gets_no_routes_and_a_trace_filter_reads_fields() -> None:
    events = Events()
    letters = events.watch_frames(Interest(kinds=frozenset({"dead_letter"})))
    fx = hand_off(3)
    traced = events.watch_frames(Interest(trace_id=fx.logs[0].message.trace_id))
    events.applied(fx)
    events.applied(hand_off(2))
    assert letters.take_frames()[:2] == ([], 0)
    frames, _, _ = traced.take_frames()
    assert {parsed(f)[2]["trace_id"] for f in frames} == {fx.logs[0].message.trace_id}
    assert len(frames) == 3
