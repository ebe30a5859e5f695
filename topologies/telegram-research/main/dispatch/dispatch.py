"""Split the planner's tool_calls answer into the fan-in's lanes.

* route "c_asst": every assistant turn of the answer (its calls, and a text if it had one), so
  the collector records the round's expected call ids in one row;
* hop.tool_name: one message per call a tool here serves, carrying only that call, its text
  being the call's arguments (what web_search and web_fetch read);
* route "c_res": an error tool_result, answered here, for a call no tool serves (an unknown
  name such as "remember", no name, arguments that are not a JSON object). Without it the
  round would wait forever for a result that nobody is going to send;
* route "failed": a tool_calls answer without any call (nothing would ever fire).
"""

import json
import sys

doc = json.load(sys.stdin)
served = set((doc.get("params") or {}).get("tools") or [])
turns = (doc.get("body") or {}).get("messages") or []
calls = [t for t in turns if t.get("type") == "tool_call"]


def error_result(call_id, message):
    text = json.dumps({"$error": message})
    return {
        "header": {"route": "c_res"},
        "messages": [{"origin": "tool", "type": "tool_result", "id": call_id, "text": text}],
    }


out = []
if not calls:
    out.append({"header": {"route": "failed", "reason": "no_tool_calls"}, "messages": []})
else:
    out.append(
        {
            "header": {"route": "c_asst"},
            "messages": [t for t in turns if t.get("origin") == "assistant"],
        }
    )
    for call in calls:
        try:
            function = json.loads(call.get("text") or "")
        except ValueError:
            function = None
        name = function.get("name") if isinstance(function, dict) else None
        if name not in served:
            known = ", ".join(sorted(served))
            out.append(
                error_result(
                    call.get("id", ""), f"no tool named {name!r} here; use one of: {known}"
                )
            )
            continue
        try:
            args = json.loads(function.get("arguments") or "{}")
        except ValueError:
            args = None
        if not isinstance(args, dict):
            out.append(error_result(call.get("id", ""), f"{name}: arguments must be a JSON object"))
            continue
        # The tool cells read the arguments themselves as the call's text.
        plain = {
            "origin": "assistant",
            "type": "tool_call",
            "id": call.get("id", ""),
            "text": json.dumps(args),
        }
        out.append({"header": {"route": "tool", "tool_name": name}, "messages": [plain]})
print(json.dumps(out))
