"""Where every benchmark leaves its headline figures, so ``make bench`` ends in one table.

A benchmark prints for people and also calls :func:`record` for the few figures that matter:
one JSON line each in the results file (``$BENCH_RESULTS``, default ``bench/results.jsonl``),
the first line of a file being the machine's facts, since a ratio read without knowing it came
from a small shared VM misleads. ``bench/report.py`` turns the file into the table in
docs/performance.md. Recording never fails a benchmark: a file it cannot write is a warning.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

RESULTS_ENV = "BENCH_RESULTS"
DEFAULT_RESULTS = Path(__file__).resolve().parent / "results.jsonl"


def results_path() -> Path:
    return Path(os.environ.get(RESULTS_ENV) or DEFAULT_RESULTS)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    loops = ["asyncio"]
    with contextlib.suppress(PackageNotFoundError):
        loops.append(f"uvloop {version('uvloop')}")
    return {
        "kind": "machine",
        "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(terse=True),
        "event_loops": loops,
        "load_average": round(os.getloadavg()[0], 2),  # others' jobs share the machine
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def record(
    bench: str,
    figure: str,
    value: float,
    unit: str,
    *,
    loop: str | None = None,
    floor: float | None = None,
    floor_label: str | None = None,
    ratio: float | None = None,
    target: str | None = None,
    met: bool | None = None,
    note: str = "",
) -> None:
    """Append one headline figure to the results file.

    ``floor`` is the same-run baseline in ``unit``; ``ratio`` defaults to value / floor (how
    many floors the figure costs), so give costs (µs, ms), not rates, when there is a floor.
    ``loop`` is the event loop the figure ran on (None: no loop involved).
    """
    if ratio is None and floor:
        ratio = value / floor
    row = {
        "kind": "figure",
        "bench": bench,
        "figure": figure,
        "loop": loop,
        "value": value,
        "unit": unit,
        "floor": floor,
        "floor_label": floor_label,
        "ratio": ratio,
        "target": target,
        "met": met,
        "note": note,
    }
    path = results_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a+", encoding="utf-8") as out:
            out.seek(0)
            if not any('"kind": "machine"' in line for line in out):
                out.write(json.dumps(machine()) + "\n")
            out.write(json.dumps(row) + "\n")
    except OSError as exc:
        print(f"bench: cannot record {figure!r} in {path}: {exc}", file=sys.stderr)
