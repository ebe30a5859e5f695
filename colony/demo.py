"""``make run``: what a newcomer sees first.

Until the router and the shipped topologies land, the demo checks the ``hello`` topology the
way CI would (``meclaw --validate``) and says what it found.
"""

from __future__ import annotations

import sys
from pathlib import Path

from cells import BUILTIN_CELL_TYPES
from colony.config.diagnostics import has_errors, render_text
from colony.validate import validate

HELLO = Path(__file__).resolve().parent.parent / "topologies" / "hello"


def main() -> int:
    diagnostics = validate(HELLO, cell_types=BUILTIN_CELL_TYPES)
    sys.stdout.write(
        render_text(diagnostics, root="topologies/hello", file_prefix="topologies/hello/")
    )
    sys.stdout.write(
        "The offline demo colony arrives with the shipped topologies; today `make run` checks\n"
        "topologies/hello exactly as `meclaw --root topologies/hello --validate` would.\n"
    )
    return 1 if has_errors(diagnostics) else 0


if __name__ == "__main__":
    sys.exit(main())
