"""File the final answer of a turn as row (turn_id, iter, role "answer") in the thread table.

The collector's rebuild skips this role, so the row is a record, never part of a prompt.
"""

import json
import sys

doc = json.load(sys.stdin)
context = doc["envelope"]["header"]["context"]
turns = (doc.get("body") or {}).get("messages") or []
texts = [t for t in turns if t.get("origin") == "assistant" and t.get("type") == "text"]
out = []
if texts and context.get("turn_id"):
    row = {
        "turn_id": context["turn_id"],
        "iter": int(context.get("iter") or 0),
        "role": "answer",
        "turn": texts[-1],
    }
    args = {"operation": "insert", "table": "thread", "row": row}
    call = {"origin": "assistant", "type": "tool_call", "id": "archive", "text": json.dumps(args)}
    out.append({"header": {"route": "store"}, "messages": [call]})
print(json.dumps(out))
