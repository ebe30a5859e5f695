"""Adds numbers. A malformed call is answered with an error text, never with silence."""

import json
import sys

doc = json.load(sys.stdin)
call = doc["body"]["messages"][0]
try:
    args = json.loads(json.loads(call["text"]).get("arguments") or "{}")
    total = sum(args["numbers"])
    text = str(int(total) if float(total).is_integer() else total)
except (ValueError, KeyError, TypeError, AttributeError) as exc:
    text = f"error: {exc}"
result = {"origin": "tool", "type": "tool_result", "id": call["id"], "text": text}
print(json.dumps({"header": {"route": "c_res"}, "messages": [result]}))
