"""Open a research turn.

Two entries, told apart by the hop:

* a user message from the proxy (hop.chat_id): give the turn an id and persist the question as
  row (turn_id, iter 0, role "user") -- route "store";
* the store's receipt for that insert (hop.operation): the question is now on record, so ask
  the planner -- route "ask", with the persona and the tool schemas as system slots.

Asking only after the receipt means the collector can never rebuild a thread that lacks its
user turn. A refused insert is reported on route "failed" (drain apologises to the chat).
"""

import json
import sys
import uuid

doc = json.load(sys.stdin)
params = doc.get("params") or {}
header = doc["envelope"]["header"]
context, hop = header.get("context") or {}, header.get("hop") or {}
turns = (doc.get("body") or {}).get("messages") or []


def user_text():
    for turn in turns:
        if turn.get("origin") == "user" and turn.get("type") == "text":
            text = (turn.get("text") or "").strip()
            if text:
                return text
    return None


def system_slots():
    tools = params.get("tools") or {}
    return {
        "identity": {"soul": {"text": params.get("persona", "")}},
        "tools": {
            name: {"text": json.dumps(tools[name], sort_keys=True)} for name in sorted(tools)
        },
    }


out = []
if "operation" in hop:  # the store's receipt for the user row
    if hop.get("error_code") or hop.get("finish_reason") == "error":
        out.append({"header": {"route": "failed", "reason": "store_refused"}, "messages": []})
    else:
        question = {"origin": "user", "type": "text", "text": context["question"]}
        out.append({"header": {"route": "ask"}, "system": system_slots(), "messages": [question]})
else:
    text = user_text()
    if text is not None:  # anything but a non-empty user text ends here, silently
        turn_id = "t-" + uuid.uuid4().hex[:16]
        row = {
            "turn_id": turn_id,
            "iter": 0,
            "role": "user",
            "turn": {"origin": "user", "type": "text", "text": text},
        }
        call = {
            "origin": "assistant",
            "type": "tool_call",
            "id": "prep-" + turn_id,
            "text": json.dumps({"operation": "insert", "table": "thread", "row": row}),
        }
        out.append(
            {"header": {"route": "store", "turn_id": turn_id, "question": text}, "messages": [call]}
        )
print(json.dumps(out))
