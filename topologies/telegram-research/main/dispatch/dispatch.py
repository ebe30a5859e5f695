"""Split the planner's tool_calls answer into the fan-in's lanes.

* route "c_asst": every assistant turn of the answer (its calls, and a text if it had one), so
  the collector records the round's expected call ids in one row;
* hop.tool_name: one message per call a tool here serves, carrying only that call, its text
  being the call's arguments (what web_search and web_fetch read);
* route "c_res": an error tool_result, answered here, for a call no tool serves (an unknown
  name such as "remember", no name, arguments that are not a JSON object). Without it the
  round would wait forever for a result that nobody is going to send;
* route "failed": a tool_calls answer without any call (nothing would ever fire).

Two calls are reshaped on the way: web_fetch with a save_to goes out as tool_name
"web_fetch_save" (hop.save_to names the file), and read_file becomes a file cell "read" whose
limit is capped at READ_LIMIT bytes.
"""

import json
import sys

READ_LIMIT = 16384

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
        header = {"route": "tool", "tool_name": name}
        if name == "web_fetch" and args.get("save_to") not in (None, ""):
            # A big document: fetched whole by bulk_reader and written to a file by the saver.
            if not isinstance(args["save_to"], str):
                out.append(error_result(call.get("id", ""), "web_fetch: save_to must be a string"))
                continue
            header = {"route": "tool", "tool_name": "web_fetch_save", "save_to": args["save_to"]}
            args = {"url": args.get("url")}
        elif name == "read_file":
            # A window of a saved file, never more than READ_LIMIT bytes: a read must not
            # become the next big payload. The file cell checks path and offset.
            limit = args.get("limit")
            if type(limit) is not int or not 1 <= limit <= READ_LIMIT:
                limit = READ_LIMIT
            read = {"op": "read", "path": args.get("path"), "limit": limit}
            if "offset" in args:
                read["offset"] = args["offset"]
            args = read
        args.pop("save_to", None)
        # The tool cells read the arguments themselves as the call's text.
        plain = {
            "origin": "assistant",
            "type": "tool_call",
            "id": call.get("id", ""),
            "text": json.dumps(args),
        }
        out.append({"header": header, "messages": [plain]})
print(json.dumps(out))
