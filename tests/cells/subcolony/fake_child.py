"""A stand-in child colony for the subcolony tests: speaks the stdio JSON wire, no colony.

``FAKE_MODE`` picks the boot: ``ready`` (default), ``v2`` (a foreign protocol integer),
``mute`` (never ready), ``late`` (ready after 0.8 s), ``deep`` (a line nested past any JSON parser's depth first), ``loud`` (a stderr line over the
cell's line limit, then an ordinary one, first), ``stubborn`` (ready, but SIGTERM only notes
``got-sigterm`` in its folder and the end of its input does not end it). Every answer also
says how many frames it was sent (``frames``). Once ready it answers each request with one assistant text turn
holding what it saw (context, ttl, two environment variables, the user text) as JSON; the user
texts ``die``, ``slow``, ``fail`` and ``shout`` make it exit, stay silent, send an error frame,
or also send a frame nobody asked for; ``orphan`` makes it exit leaving a process that holds its
stdout open.
"""

import json
import os
import signal
import subprocess
import sys
import time

mode = os.environ.get("FAKE_MODE", "ready")
if mode == "mute":
    time.sleep(60)
    sys.exit(0)
if mode == "deep":
    print("[" * 200_000 + "]" * 200_000, flush=True)
if mode == "loud":
    sys.stderr.write("x" * (65 * 1024 * 1024) + "\n")
    sys.stderr.write("after the long line\n")
    sys.stderr.flush()
if mode == "stubborn":
    signal.signal(signal.SIGTERM, lambda *_: open("got-sigterm", "w").close())
if mode == "late":
    time.sleep(0.8)
print(json.dumps({"v": 2 if mode == "v2" else 1, "type": "ready", "version": "fake-1"}), flush=True)

frames = 0
for line in sys.stdin:
    frames += 1
    frame = json.loads(line)
    context = frame.get("context", {})
    said = ""
    for turn in frame["body"].get("messages", []):
        if turn.get("origin") == "user":
            said = turn.get("text", "")
    if said == "die":
        os._exit(3)
    if said == "orphan":
        subprocess.Popen(["sleep", "30"], stdin=subprocess.DEVNULL)  # inherits stdout
        os._exit(3)
    if said == "slow":
        continue
    if said == "fail":
        error = {"v": 1, "type": "error", "error_code": "invalid_frame", "detail": "no thanks"}
        print(json.dumps({**error, "context": {"turn_id": context.get("turn_id")}}), flush=True)
        continue
    seen = {
        "context": context,
        "ttl": frame.get("ttl"),
        "trace_id": frame.get("trace_id"),
        "said": said,
        "pid": os.getpid(),
        "frames": frames,
        "env": {k: os.environ.get(k) for k in ("SUBCOLONY_TEST_SECRET", "GIVEN")},
    }
    reply = {"origin": "assistant", "type": "text", "text": json.dumps(seen)}
    out = {"v": 1, "type": "message", "trace_id": frame.get("trace_id"), "context": context}
    print(json.dumps({**out, "body": {"messages": [reply]}}), flush=True)
    if said == "shout":
        aside = {"origin": "assistant", "type": "text", "text": "unasked"}
        print(
            json.dumps({"v": 1, "type": "message", "context": {}, "body": {"messages": [aside]}}),
            flush=True,
        )

while mode == "stubborn":
    time.sleep(60)
