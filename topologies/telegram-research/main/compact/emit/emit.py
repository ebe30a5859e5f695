"""Compaction emit: one summary row at the boundary, or refire (never park the turn)."""

import json
import sys

doc = json.load(sys.stdin)
context = doc["envelope"]["header"]["context"]
hop = doc["envelope"]["header"]["hop"]
turns = doc["body"].get("messages", [])
last = turns[-1] if turns else {}
text = last.get("text") or ""
good = (
    hop.get("finish_reason") == "stop"
    and last.get("origin") == "assistant"
    and last.get("type") == "text"
    and text.strip()
)
if good:
    summary = {"origin": "assistant", "type": "text", "text": text.strip()}
    row = {
        "turn_id": context["turn_id"],
        "iter": int(context["fold_upto"]),
        "role": "summary",
        "turn": summary,
    }
    operation = {"operation": "insert", "table": "thread", "row": row}
    route = "write"
else:
    operation = {
        "operation": "select",
        "table": "thread",
        "columns": ["iter", "role", "fired", "turn"],
        "where": {"turn_id": context["turn_id"]},
    }
    route = "refire"
call = {"origin": "assistant", "type": "tool_call", "id": "compact", "text": json.dumps(operation)}
print(json.dumps({"header": {"route": route}, "messages": [call]}))
