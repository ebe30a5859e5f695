"""``make run``: the offline demo — boot a shipped colony, send it a message, show the trace.

Uses nothing outside this machine: the ``hello`` topology is a hive, a python3 ``code`` cell
that answers, and a sink. The full research-bot demo replaces this once its scripted provider
lands.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from cells import BUILTIN_CELL_TYPES, implemented_cell_types
from colony.cell import param_checks
from colony.config.diagnostics import has_errors, render_text
from colony.testing import ColonyHarness
from colony.validate import validate

HELLO = Path(__file__).resolve().parent.parent / "topologies" / "hello"


async def _run(name: str) -> int:
    async with ColonyHarness(HELLO, log_level="info") as colony:
        trace = await colony.send(
            "/", {"messages": [{"origin": "user", "type": "text", "text": name}]}
        )
        await colony.settle(timeout=30)
        rows = await colony.message_log(trace)
        print(f"\nsent {name!r} to / — the trace, one routing decision per row:")
        for row in rows:
            print(f"  {row.from_path:>12} -> {row.to_path:<10} ttl {row.ttl}")
        answer = next(
            (
                turn["text"]
                for row in reversed(rows)
                for turn in reversed(row.body.get("messages", []))
                if turn.get("origin") == "assistant"
            ),
            None,
        )
        print(f"\nthe greeter answered: {answer}")
        letters = await colony.dead_letters()
        print(f"dead letters: {len(letters)}")
        return 0 if answer and not letters else 1


def main() -> int:
    types = implemented_cell_types()
    diagnostics = validate(HELLO, cell_types=BUILTIN_CELL_TYPES, param_checks=param_checks(types))
    sys.stdout.write(
        render_text(diagnostics, root="topologies/hello", file_prefix="topologies/hello/")
    )
    if has_errors(diagnostics):
        return 1
    name = sys.argv[1] if len(sys.argv) > 1 else "make run"
    return asyncio.run(_run(name))


if __name__ == "__main__":
    sys.exit(main())
