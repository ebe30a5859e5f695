"""End a chain without a dead letter, or answer a turn that went wrong.

* a store receipt (hop.operation): nobody waits for it -- emit nothing;
* the collector's fire past the iteration bound (hop.route "fire"): a runaway turn;
* a planner answer that is neither "stop" nor "tool_calls" (error, length, content_filter);
* hop.route "failed" from prep or dispatch, or a script error of theirs (hop.reason, set by
  the edge).
The last three become one assistant text on route "apology", which the graph sends to the chat.
"""

import json
import sys

doc = json.load(sys.stdin)
params = doc.get("params") or {}
context = doc["envelope"]["header"]["context"]
hop = doc["envelope"]["header"]["hop"]


def apology(text):
    turn = {"origin": "assistant", "type": "text", "text": text}
    return {"header": {"route": "apology"}, "messages": [turn]}


out = []
if "operation" in hop:
    pass  # a receipt for prep's or archive's write
elif "chat_id" not in context:
    pass  # nobody to tell
elif hop.get("route") == "fire":
    rounds = params.get("max_rounds", 12)
    out.append(
        apology(
            f"Sorry, I gave up on this one: after {rounds} rounds of searching and reading I "
            "still had no answer I could stand behind. Could you ask something narrower?"
        )
    )
elif "reason" in hop:  # set by prep or dispatch ("failed"), or by the edge of a failed script
    out.append(
        apology(f"Sorry, something went wrong on my side ({hop['reason']}). Please try again.")
    )
elif "finish_reason" in hop:
    reason = hop.get("error_code") or hop.get("finish_reason")
    out.append(
        apology(
            f"Sorry, the language model could not answer this time ({reason}). Please try again."
        )
    )
print(json.dumps(out))
