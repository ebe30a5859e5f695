"""Collect one round of parallel tool calls through the memory store, then fire it once.

The cell keeps no state between messages: every fact it needs after a store reply is a row in
the thread table or a key in context (turn_id, iter, firing).

Lanes in, told apart by the hop:
  c_asst          the planner's assistant turn    -> insert row (role assistant, fired 0)
  c_res           tool result(s)                  -> insert one row per tool_result (role tool)
  insert receipt                                  -> select the turn's rows
  select reply    (context.firing != "1")         -> complete? ask for the guarded update
  update receipt  rows_affected == 1              -> select again, this time as the firing one
  select reply    (context.firing == "1")         -> rebuild the thread and emit route "fire"
                                                     (hop.summary_at: the newest summary's
                                                     boundary, -1 for none)
  insert receipt  (context.compacting == "1")     -> the compaction lane stored a summary row
                                                     and holds this round's guard: select
                                                     again as the firing one
Everything else (a lost guard, an incomplete round, a store error) parks: it emits nothing.

Completeness is by id: expected is the set of call ids in this iteration's assistant row(s),
received the set of ids of this iteration's tool rows; the round is complete when expected is
non-empty and a subset of received. Row counts are never used, so arrival order, duplicates
and results landing before their assistant turn change nothing.

Eviction (the rebuild only; rows are never changed). With the current iteration k:
  * a tool result of round r < k is carried only while k - r < max_rounds;
  * a tool result larger than max_result_bytes is carried only in round k (the round that
    answers it), never again;
  * a result not carried is replaced by a stub on the same call id, naming the call id, the
    tool and the size, so the thread stays a valid provider conversation;
  * a duplicate result (same round, same call id) is carried once, the first one stored.

Summaries (only written when the compaction lane is switched on): a row with role "summary"
and iter b stands for every round up to b. The rebuild is then the user row, the newest
summary, and only the rows with iter > b (the tail), eviction applying to the tail as above.
Without a summary row the rebuild is the whole thread, exactly as before.
"""

import json
import sys

doc = json.load(sys.stdin)
params = doc.get("params") or {}
context = doc["envelope"]["header"]["context"]
hop = doc["envelope"]["header"]["hop"]
turns = (doc.get("body") or {}).get("messages") or []
turn_id = context["turn_id"]
iteration = int(context["iter"])
MAX_RESULT_BYTES = int(params.get("max_result_bytes", 16384))
MAX_ROUNDS = max(1, int(params.get("max_rounds", 3)))
ROLE_ORDER = {"user": 0, "assistant": 1, "tool": 2}


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
    args = {
        "operation": "select",
        "table": "thread",
        "columns": ["iter", "role", "fired", "turn"],
        "where": {"turn_id": turn_id},
    }
    return store(args, firing)


def guarded_update():
    where = {"turn_id": turn_id, "iter": iteration, "role": "assistant", "fired": 0}
    return store({"operation": "update", "table": "thread", "set": {"fired": 1}, "where": where})


def as_list(turn):
    return turn if isinstance(turn, list) else [turn]


def complete(rows):
    current = [r for r in rows if r["iter"] == iteration]
    assistant = [r for r in current if r["role"] == "assistant"]
    expected = {
        t.get("id")
        for r in assistant
        for t in as_list(json.loads(r["turn"]))
        if t.get("type") == "tool_call"
    }
    received = {json.loads(r["turn"]).get("id") for r in current if r["role"] == "tool"}
    unclaimed = any(r["fired"] == 0 for r in assistant)
    return bool(expected) and expected <= received and unclaimed


def stub(result, tool, size, answered_in):
    text = (
        f"[evicted from this context: the {tool} result for call {result.get('id')} "
        f"({size} bytes), read in round {answered_in}. Call {tool} again if you need it.]"
    )
    return {"origin": "tool", "type": "tool_result", "id": result.get("id"), "text": text}


def newest_summary(rows):
    summaries = [r for r in rows if r["role"] == "summary"]
    return max(summaries, key=lambda r: r["iter"]) if summaries else None


def rebuild(rows, summary=None):
    boundary = summary["iter"] if summary else -1
    rows = [
        r for r in rows if r["role"] in ROLE_ORDER and (r["role"] == "user" or r["iter"] > boundary)
    ]
    rows.sort(key=lambda r: (r["iter"], ROLE_ORDER[r["role"]]))
    tool_of = {}
    for r in rows:
        if r["role"] == "assistant":
            for t in as_list(json.loads(r["turn"])):
                if t.get("type") == "tool_call":
                    try:
                        tool_of[(r["iter"], t.get("id"))] = json.loads(t.get("text") or "{}").get(
                            "name"
                        )
                    except (ValueError, AttributeError):
                        tool_of[(r["iter"], t.get("id"))] = None
    thread = []
    answered = set()
    pending = as_list(json.loads(summary["turn"])) if summary else []
    for r in rows:
        turn = json.loads(r["turn"])
        if pending and r["role"] != "user":
            thread.extend(pending)  # the summary goes right after the user row
            pending = []
        if r["role"] == "tool":
            # One result per call of its round: a duplicate, or a result answering no call of
            # that round, would make the thread one the provider refuses.
            key = (r["iter"], turn.get("id"))
            if key not in tool_of or key in answered:
                continue
            answered.add(key)
        if r["role"] == "tool" and r["iter"] < iteration:
            size = len((turn.get("text") or "").encode("utf-8"))
            if iteration - r["iter"] >= MAX_ROUNDS or size > MAX_RESULT_BYTES:
                tool = tool_of.get((r["iter"], turn.get("id"))) or "tool"
                thread.append(stub(turn, tool, size, r["iter"]))
                continue
        thread.extend(as_list(turn))
    return thread + pending


out = []
route = hop.get("route")
operation = hop.get("operation")
if route == "c_asst":
    out.append(insert("assistant", [t for t in turns if t.get("origin") == "assistant"], fired=0))
elif route == "c_res":
    out.extend(insert("tool", t) for t in turns if t.get("type") == "tool_result")
elif hop.get("error_code") or hop.get("finish_reason") == "error":
    pass  # a store refusal: nothing to decide on
elif operation == "insert":
    out.append(select_turn(firing=context.get("compacting") == "1"))
elif operation == "update":
    if hop.get("rows_affected") == 1:
        out.append(select_turn(firing=True))
elif operation == "select":
    rows = json.loads(turns[0].get("text") or "[]") if turns else []
    if context.get("firing") == "1":
        summary = newest_summary(rows)
        boundary = summary["iter"] if summary else -1
        header = {"route": "fire", "summary_at": boundary}
        out.append({"header": header, "messages": rebuild(rows, summary)})
    elif context.get("compacting") != "1" and complete(rows):
        out.append(guarded_update())
print(json.dumps(out))
