"""Fan-in over the memory store, and the rebuild of the window the brain sees.

In: ``c_asst`` (the round's call bundle), ``c_res`` (tool results), memory's replies.
Out: store operations on ``route: store`` (``hop.firing`` asks for the firing select), and the
rebuilt window on ``route: fire`` with ``hop.summary_at`` (the newest summary's boundary, -1
when there is none). The root hive splits the fire lane between the brain and the compaction
lane; this script never decides that.
"""

import json
import sys

doc = json.load(sys.stdin)
context = doc["envelope"]["header"]["context"]
hop = doc["envelope"]["header"]["hop"]
turns = doc["body"].get("messages", [])
turn_id = context["turn_id"]
iteration = int(context["iter"])


def store(args, firing=False):
    call = {"origin": "assistant", "type": "tool_call", "id": "collector", "text": json.dumps(args)}
    header = {"route": "store"}
    if firing:
        header["firing"] = True
    return {"header": header, "messages": [call]}


def insert(role, turn, fired=None):
    row = {"turn_id": turn_id, "iter": iteration, "role": role, "turn": turn}
    if fired is not None:
        row["fired"] = fired
    return store({"operation": "insert", "table": "thread", "row": row})


def select_turn(firing=False):
    columns = ["iter", "role", "fired", "turn"]
    where = {"turn_id": turn_id}
    return store(
        {"operation": "select", "table": "thread", "columns": columns, "where": where}, firing
    )


def as_list(turn):
    return turn if isinstance(turn, list) else [turn]


def rebuild(rows):
    """user + newest summary + every round after its boundary (or the whole thread)."""
    summaries = [r for r in rows if r["role"] == "summary"]
    newest = max(summaries, key=lambda r: r["iter"]) if summaries else None
    boundary = newest["iter"] if newest else -1
    thread = [t for r in rows if r["role"] == "user" for t in as_list(json.loads(r["turn"]))]
    if newest:
        thread.extend(as_list(json.loads(newest["turn"])))
    for it in sorted({r["iter"] for r in rows if r["iter"] > boundary}):
        calls = [
            c
            for r in rows
            if r["iter"] == it and r["role"] == "assistant"
            for c in as_list(json.loads(r["turn"]))
        ]
        order = {c.get("id"): i for i, c in enumerate(calls)}
        results = [json.loads(r["turn"]) for r in rows if r["iter"] == it and r["role"] == "tool"]
        results.sort(key=lambda t: order.get(t.get("id"), len(order)))
        thread.extend(calls + results)
    return thread, boundary


out = []
route = hop.get("route")
operation = hop.get("operation")
if route == "c_asst":
    out.append(insert("assistant", [t for t in turns if t.get("type") == "tool_call"], fired=0))
elif route == "c_res":
    out.extend(insert("tool", t) for t in turns if t.get("type") == "tool_result")
elif hop.get("error_code"):
    out = []  # a store refusal: nothing to rebuild from
elif operation == "insert":
    # the summary row written by the compaction lane already holds this round's fire guard
    out.append(select_turn(firing=context.get("compacting") == "1"))
elif operation == "update":
    if hop.get("rows_affected") == 1:
        out.append(select_turn(firing=True))
elif operation == "select":
    rows = json.loads(turns[0]["text"]) if turns else []
    if context.get("firing") == "1":
        thread, boundary = rebuild(rows)
        out.append({"header": {"route": "fire", "summary_at": boundary}, "messages": thread})
    elif context.get("compacting") != "1":
        current = [r for r in rows if r["iter"] == iteration]
        bundles = [r for r in current if r["role"] == "assistant"]
        expected = {c["id"] for r in bundles for c in as_list(json.loads(r["turn"]))}
        received = {json.loads(r["turn"])["id"] for r in current if r["role"] == "tool"}
        if expected and expected <= received and bundles[0]["fired"] == 0:
            guard = {"turn_id": turn_id, "iter": iteration, "role": "assistant", "fired": 0}
            out.append(
                store(
                    {"operation": "update", "table": "thread", "set": {"fired": 1}, "where": guard}
                )
            )
print(json.dumps(out))
