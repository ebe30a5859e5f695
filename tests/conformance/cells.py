"""Small cell types the conformance tests wire into colonies.

Each behaves as its params say, so a tree's config.json fully describes a test's topology.
"""

from __future__ import annotations

import asyncio
from typing import Any

from colony.cell import CellClass, CellSpec, CellType, Emission
from colony.envelope import Envelope

CALLS: dict[str, list[Envelope]] = {}
"""Every message each test cell handled, by path (cleared by the ``calls`` fixture)."""


class Echo:
    """Emits its input's messages, with ``params.header`` as the hop.

    ``params.emit`` (a list of contents) replaces the echo; ``params.target`` names the
    emission target; ``params.crash_on`` crashes on an input text; ``params.sleep`` (seconds)
    delays the answer.
    """

    def __init__(self, spec: CellSpec) -> None:
        self.path = spec.path
        self.params: dict[str, Any] = spec.params or {}

    async def handle(self, message: Envelope) -> list[Any]:
        CALLS.setdefault(self.path, []).append(message)
        text = _text(message)
        if text is not None and text == self.params.get("crash_on"):
            raise RuntimeError(f"told to crash on {text!r}")
        sleep = self.params.get("sleep")
        if sleep:
            await asyncio.sleep(float(sleep))
        if "emit" in self.params:
            contents = list(self.params["emit"])
        else:
            body = message.body if isinstance(message.body, dict) else {}
            contents = [
                {
                    "header": dict(self.params.get("header", {})),
                    "messages": body.get("messages", []),
                }
            ]
        target = self.params.get("target")
        return [Emission(c, target) if target else c for c in contents]


def _text(message: Envelope) -> str | None:
    body = message.body if isinstance(message.body, dict) else {}
    turns = body.get("messages") or []
    if turns and isinstance(turns[-1], dict):
        value = turns[-1].get("text")
        return value if isinstance(value, str) else None
    return None


TEST_TYPES = {
    "echo": CellType("echo", CellClass.STATELESS, Echo),
    "stateful_echo": CellType("stateful_echo", CellClass.STATEFUL, Echo),
    "looping_echo": CellType("looping_echo", CellClass.LONG_RUNNING, Echo),
}


def user(text: str = "hello") -> dict[str, Any]:
    return {"messages": [{"origin": "user", "type": "text", "text": text}]}
