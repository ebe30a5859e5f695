"""Colony trees the benchmarks build in temporary folders."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CONTRACT = {"version": "1", "settings": {}, "consumes": {}}


def write_tree(root: Path, files: Mapping[str, Any]) -> Path:
    """Write ``{relative path: JSON document}`` under ``root``; returns ``root``."""
    for rel, doc in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc))
    return root


def chain(cell_path: str, cell: Mapping[str, Any]) -> dict[str, Any]:
    """A root hive routing everything to one cell, and the cell's answers to ``/sink``."""
    return {
        "main/config.json": {
            "cell": {"type": "hive"},
            "params": {
                "graph": {
                    "edges": [
                        {"from": ".", "to": f"./{cell_path}"},
                        {"from": f"./{cell_path}", "to": "/sink"},
                    ]
                }
            },
        },
        f"main/{cell_path}/config.json": {**cell, "contract": CONTRACT},
    }
