"""Fan-out of one tool-call round (see the README, edges 7-8)."""

import json
import sys

KNOWN = {"calc"}

doc = json.load(sys.stdin)
calls = [t for t in doc["body"].get("messages", []) if t.get("type") == "tool_call"]
out = [{"header": {"route": "c_asst"}, "messages": calls}] if calls else []
for call in calls:
    try:
        name = json.loads(call["text"]).get("name", "")
    except (ValueError, AttributeError):
        name = ""
    if name in KNOWN:
        out.append({"header": {"tool_name": name}, "messages": [call]})
    else:
        result = {
            "origin": "tool",
            "type": "tool_result",
            "id": call["id"],
            "text": f"error: no tool named {name!r}",
        }
        out.append({"header": {"route": "c_res"}, "messages": [result]})
print(json.dumps(out))
