"""Write the benchmarks' results file as one markdown table into docs/performance.md.

Each benchmark appends its headline figures (bench/_table.py); this reads them, keeps the last
figure of each (benchmark, figure, loop) so a benchmark rerun alone replaces its old rows, and
rewrites the part of the page between the two markers. The rest of the page is left alone.

    python bench/report.py [--results PATH] [--doc PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from _table import results_path

START = "<!-- bench-table:start -->"
END = "<!-- bench-table:end -->"
DOC = Path(__file__).resolve().parent.parent / "docs" / "performance.md"
ORDER = (
    "expressions",
    "routing",
    "code_cell",
    "store",
    "load",
    "scale",
    "vs_langgraph",
    "cluster",
    "prune",
    "telemetry",
    "tools",
)
LOOP_ORDER = (None, "asyncio", "uvloop")

TEMPLATE = f"""# Performance

Figures from `make bench`: each benchmark in `bench/` times a hot path and, in the same run, a
floor to compare it with. The machine is shared and noisy, so the ratio is the figure.

## Latest figures

{START}
{END}

## Profile of the research topology

(filled in by the profile run)
"""


def read_results(path: Path) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The last machine line and the latest row of each figure, in table order."""
    machine: dict[str, Any] | None = None
    latest: dict[tuple[str, str, str | None], dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if row.get("kind") == "machine":
            machine = row
        elif row.get("kind") == "figure":
            latest[(row["bench"], row["figure"], row["loop"])] = row
    firsts = {key[:2]: n for n, key in reversed(list(enumerate(latest)))}

    def order(key: tuple[str, str, str | None]) -> tuple[int, int, int]:
        bench = ORDER.index(key[0]) if key[0] in ORDER else len(ORDER)
        loop = LOOP_ORDER.index(key[2]) if key[2] in LOOP_ORDER else len(LOOP_ORDER)
        return bench, firsts[key[:2]], loop

    return machine, [latest[key] for key in sorted(latest, key=order)]


def number(value: float) -> str:
    size = abs(value)
    if size >= 100 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:.1f}" if size >= 10 else f"{value:.3g}"


def quantity(value: float, unit: str) -> str:
    if not unit:
        return number(value)
    return f"{number(value)}{'' if unit.startswith('/') else ' '}{unit}"


def table(machine: dict[str, Any] | None, rows: list[dict[str, Any]]) -> str:
    lines = []
    if machine:
        loops = ", ".join(machine["event_loops"])
        lines += [
            f"Measured {machine['date']} on {machine['cpus']} × {machine['cpu_model']}, "
            f"{machine['python']}, {machine['platform']}; event loops: {loops}; 1-minute load "
            f"average {machine.get('load_average', '?')} when the first figure was recorded.",
            "",
        ]
    lines += [
        "| bench | figure | loop | value | floor or baseline (same run) | ratio | target | met? |",
        "|---|---|---|--:|---|--:|---|---|",
    ]
    notes: dict[str, list[str]] = {}
    for row in rows:
        floor = "—"
        if row["floor"] is not None:
            floor = quantity(row["floor"], row["unit"])
            if row["floor_label"]:
                floor += f": {row['floor_label']}"
        ratio = (
            "—" if row["ratio"] is None else f"{row['ratio']:.{1 if row['ratio'] >= 1 else 2}f}x"
        )
        met = {True: "yes", False: "**no**", None: "—"}[row["met"]]
        cells = [
            f"`{row['bench']}`",
            row["figure"],
            row["loop"] or "—",
            quantity(row["value"], row["unit"]),
            floor,
            ratio,
            row["target"] or "—",
            met,
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        if row["note"]:
            notes.setdefault(row["note"], []).append(f"`{row['bench']}` {row['figure']}")
    if notes:
        lines.append("")
        for note, where in notes.items():
            lines.append(f"- {', '.join(dict.fromkeys(where))}: {note}.")
    return "\n".join(lines)


def write(doc: Path, text: str) -> None:
    """Put ``text`` between the markers of ``doc``, creating the page or the markers if needed."""
    page = doc.read_text(encoding="utf-8") if doc.exists() else TEMPLATE
    if START not in page or END not in page:
        page = page.rstrip("\n") + f"\n\n## Latest figures\n\n{START}\n{END}\n"
    head, rest = page.split(START, 1)
    tail = rest.split(END, 1)[1]
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(f"{head}{START}\n{text}\n{END}{tail}", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--results", type=Path, default=results_path())
    parser.add_argument("--doc", type=Path, default=DOC)
    args = parser.parse_args(argv)
    if not args.results.exists():
        print(
            f"no results in {args.results}: run the benchmarks first (make bench)", file=sys.stderr
        )
        return 1
    machine, rows = read_results(args.results)
    if not rows:
        print(f"{args.results} holds no figures", file=sys.stderr)
        return 1
    text = table(machine, rows)
    write(args.doc, text)
    print(text)
    print(f"\nwritten to {args.doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
