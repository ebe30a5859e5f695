"""Turn intake.

A user text turn becomes two emissions: ``ustore`` (insert the user row at iter 0 into memory)
and ``ask`` (the question plus the tool schemas, to the brain). Both carry ``hop.turn_id``; the
edges promote it into context. Anything else (the store's insert receipt) ends here.
"""

import json
import sys
import uuid

TOOLS = {
    "calc": {
        "type": "function",
        "function": {
            "name": "calc",
            "description": "Add a list of numbers and return the sum.",
            "parameters": {
                "type": "object",
                "properties": {"numbers": {"type": "array", "items": {"type": "number"}}},
                "required": ["numbers"],
            },
        },
    }
}

doc = json.load(sys.stdin)
header = doc["envelope"]["header"]
turns = doc["body"].get("messages", [])
users = [t for t in turns if t.get("origin") == "user" and t.get("type") == "text"]
if "operation" in header["hop"] or not users:
    print("[]")
    raise SystemExit(0)

turn_id = header["context"].get("turn_id") or uuid.uuid4().hex
user = users[-1]
row = {"turn_id": turn_id, "iter": 0, "role": "user", "turn": user}
insert = {
    "origin": "assistant",
    "type": "tool_call",
    "id": "intake-" + turn_id,
    "text": json.dumps({"operation": "insert", "table": "thread", "row": row}),
}
tools = {name: {"text": json.dumps(schema)} for name, schema in TOOLS.items()}
print(
    json.dumps(
        [
            {"header": {"route": "ustore", "turn_id": turn_id}, "messages": [insert]},
            {
                "header": {"route": "ask", "turn_id": turn_id},
                "system": {"tools": tools},
                "messages": [user],
            },
        ]
    )
)
