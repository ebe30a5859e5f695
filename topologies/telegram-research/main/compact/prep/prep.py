"""Compaction prep (the research bot's lane): policy in code, prose left to the condense model.

In: the window the collector rebuilt (user turn, the running summary when ``hop.summary_at``
>= 0, then the rounds after it; evicted results arrive as their stubs), with ``context.iter``
= the round that just completed.

A round is one assistant row (its text, if any, and its calls) and every result after it, so a
cut between rounds never separates a call from its result. All but the newest
``context.keep_rounds`` rounds are folded; the boundary (the iter of the newest folded round)
leaves on ``hop.fold_upto``. With nothing to fold, the unfolded window is refired instead.
"""

import json
import sys

SECTIONS = ["GOAL", "PROGRESS", "KEY DECISIONS", "NEXT STEPS"]

doc = json.load(sys.stdin)
context = doc["envelope"]["header"]["context"]
hop = doc["envelope"]["header"]["hop"]
cap = int((doc.get("params") or {}).get("max_item_chars", 2000))
turns = doc["body"].get("messages", [])
summary_at = int(hop.get("summary_at", -1))
keep = int(context["keep_rounds"])
iteration = int(context["iter"])

users = [t for t in turns if t.get("origin") == "user"]
rest = [t for t in turns if t.get("origin") != "user"]
summary = rest.pop(0)["text"] if summary_at >= 0 and rest and rest[0].get("type") == "text" else ""

rounds = []
for turn in rest:
    # a round is one assistant row (its text, if any, and its calls) and the results after it
    opens = turn.get("origin") != "tool" and (not rounds or rounds[-1][-1].get("origin") == "tool")
    if opens or not rounds:
        rounds.append([])
    rounds[-1].append(turn)

fold = rounds[: max(len(rounds) - keep, 0)]
if not fold or len(rounds) != iteration - summary_at:
    select = {
        "operation": "select",
        "table": "thread",
        "columns": ["iter", "role", "fired", "turn"],
        "where": {"turn_id": context["turn_id"]},
    }
    call = {"origin": "assistant", "type": "tool_call", "id": "compact", "text": json.dumps(select)}
    print(json.dumps({"header": {"route": "refire"}, "messages": [call]}))
    raise SystemExit(0)


def clip(text):
    return text if len(text) <= cap else text[:cap] + f" [... {len(text) - cap} more chars]"


def render(turn):
    if turn.get("type") == "tool_call":
        try:
            function = json.loads(turn["text"])
            what = f"{function.get('name', '?')} {function.get('arguments', '')}"
        except ValueError:
            what = turn["text"]
        return f"- call {turn.get('id', '')}: {clip(what)}"
    if turn.get("type") == "tool_result":
        return f"- result {turn.get('id', '')}: {clip(turn.get('text', ''))}"
    return f"- {turn.get('origin', '?')} said: {clip(turn.get('text', ''))}"


lines = [
    "You compress the early rounds of a research agent's turn so the agent can continue "
    "without them. Answer with exactly these four sections, in this order, each heading on its "
    "own line followed by short bullet points:",
    *(f"{name}:" for name in SECTIONS),
    "Keep facts the agent still needs (numbers, names, results, failed attempts); drop "
    "chatter. Write nothing before the first heading or after the last section.",
    "",
    "The user's request:",
    *(clip(u.get("text", "")) for u in users),
]
if summary:
    lines += [
        "",
        "The running summary of the rounds folded before. Refine it: keep what still holds, "
        "update what changed, add what the new rounds show:",
        summary,
    ]
lines += ["", f"The rounds to fold now ({len(fold)}):"]
for number, group in enumerate(fold, start=summary_at + 1):
    lines.append(f"Round {number}:")
    lines.extend(render(t) for t in group)
prompt = {"origin": "user", "type": "text", "text": "\n".join(lines)}
boundary = summary_at + len(fold)
print(json.dumps({"header": {"route": "condense", "fold_upto": boundary}, "messages": [prompt]}))
