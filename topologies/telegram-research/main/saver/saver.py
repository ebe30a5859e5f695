"""Save a fetched page to a file and answer the model with the file's name, not the page.

The seed's pattern for a document too big to carry: the payload never becomes a thread row, so
it costs nothing on later rounds; the model reads the parts it needs with read_file. Two
entries, told apart by hop.operation:

* "web_fetch" (from bulk_reader): the page text becomes a file cell write of context.save_to on
  the same call id -- route "write". A failed fetch is passed on as the call's result.
* "write" (from files): the receipt becomes the call's result -- route "c_res" -- saying where
  the page is and how big it is, or why it could not be saved.
"""

import json
import sys

doc = json.load(sys.stdin)
header = doc["envelope"]["header"]
context, hop = header.get("context") or {}, header.get("hop") or {}
turns = (doc.get("body") or {}).get("messages") or []
result = next((t for t in turns if t.get("type") == "tool_result"), None)
failed = hop.get("finish_reason") == "error"
path = context.get("save_to", "")


def answer(text):
    turn = {"origin": "tool", "type": "tool_result", "id": result.get("id", ""), "text": text}
    return {"header": {"route": "c_res"}, "messages": [turn]}


out = []
if result is None:
    pass  # nothing to answer: only a malformed reply gets here, and the log shows it
elif hop.get("operation") == "web_fetch":
    if failed:
        out.append(answer(result.get("text", "")))
    else:
        write = {"op": "write", "path": path, "content": result.get("text", "")}
        call = {
            "origin": "assistant",
            "type": "tool_call",
            "id": result.get("id", ""),
            "text": json.dumps(write),
        }
        out.append({"header": {"route": "write"}, "messages": [call]})
elif failed:
    out.append(answer(f"could not save to {path}: {result.get('text')}"))
else:
    written = json.loads(result.get("text") or "{}").get("written", 0)
    out.append(
        answer(
            f"saved {written} bytes to {path}; read it in pieces with read_file "
            "(offset and limit are in bytes)"
        )
    )
print(json.dumps(out))
