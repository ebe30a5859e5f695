"""Runs: the recent traces, one line each, and what a trace view adds to its hops.

A run is a trace: when it began and last moved (the message log's ``at_ms``), its hops, its
LLM calls and tokens (the ``handling`` rows), its dead letters, and how it stands. A trace is
``in_flight`` while a delivery of it into a cell has no ``handling`` row yet: every delivery
is logged once when routed and handled once when done, on either backend, with no scan of
the journal or the mailboxes. Rows an older daemon wrote carry no ``at_ms``: such a trace is
never called in flight.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from colony.persist.schema import HANDLING_COLUMNS, HANDLING_SELECT
from colony.persist.source import Source
from colony.queries import RunsFilters


def _marks(n: int) -> str:
    return ",".join("?" * n)


def has_handling(source: Source) -> bool:
    """Whether the database has the ``handling`` table (a ``colony.db`` an older daemon wrote
    and no daemon has opened since has not)."""
    if source.path is None:
        return True
    return bool(source.select("SELECT 1 FROM sqlite_master WHERE name = 'handling'"))


def select_handling(source: Source, trace_id: str) -> list[dict[str, Any]]:
    """The ``handling`` rows of a trace, in the order the handlings began."""
    if not has_handling(source):
        return []
    sql = (
        f"SELECT {HANDLING_SELECT} FROM handling WHERE trace_id = ? "
        "ORDER BY started_ms, duration_ms"
    )
    return [dict(zip(HANDLING_COLUMNS, r, strict=True)) for r in source.select(sql, [trace_id])]


def select_runs(source: Source, f: RunsFilters, hives: Collection[str]) -> list[dict[str, Any]]:
    """The newest traces among the last ``scan_budget`` message-log rows and dead letters (a
    message may die at its first decision, before any hop is logged), newest first."""
    window = source.select(
        "SELECT trace_id, seq FROM "
        "(SELECT trace_id, seq FROM message_log ORDER BY seq DESC LIMIT ?) AS newest",
        [f.budget],
    )
    died = source.select(
        "SELECT trace_id FROM (SELECT trace_id, id FROM dead_letters ORDER BY id DESC LIMIT ?) "
        "AS newest",
        [f.budget],
    )
    newest = list(dict.fromkeys([t for t, _ in window] + [t for (t,) in died]))
    runs: list[dict[str, Any]] = []
    for start in range(0, len(newest), 200):  # a bounded IN list per query
        runs += [r for r in _summaries(source, newest[start : start + 200], hives) if _keep(r, f)]
    runs.sort(key=lambda r: r["started_ms"] or 0, reverse=True)
    return runs[: f.rows]


def _keep(run: dict[str, Any], f: RunsFilters) -> bool:
    if f.outcome is not None and run["outcome"] != f.outcome:
        return False
    cells = run.pop("_cells")
    prefix = f.cell_prefix
    return prefix is None or any(path.startswith(prefix) for path in cells)


def _summaries(
    source: Source, traces: Sequence[str], hives: Collection[str]
) -> list[dict[str, Any]]:
    marks = _marks(len(traces))
    hops = source.select(
        f"SELECT trace_id, seq, to_path, at_ms FROM message_log WHERE trace_id IN ({marks})",
        traces,
    )
    runs: dict[str, dict[str, Any]] = {}
    first: dict[str, int] = {}
    for trace_id, seq, to_path, at_ms in hops:
        run = runs.get(trace_id)
        if run is None:
            run = runs[trace_id] = _empty(trace_id)
        run["hops"] += 1
        run["_cells"].add(to_path)
        if to_path not in hives:
            run["_deliveries"] += 1
        if at_ms is None:
            run["_old"] = True
        else:
            run["started_ms"] = min(at_ms, run["started_ms"] or at_ms)
            run["ended_ms"] = max(at_ms, run["ended_ms"] or at_ms)
        if seq < first.get(trace_id, seq + 1):
            first[trace_id] = seq
            run["entry"] = to_path
    if has_handling(source):
        for trace_id, n, calls, prompt, completion, ended in source.select(
            "SELECT trace_id, count(*), count(model), sum(tokens_prompt), "
            "sum(tokens_completion), max(started_ms + duration_ms) FROM handling "
            f"WHERE trace_id IN ({marks}) GROUP BY trace_id",
            traces,
        ):
            run = runs.get(trace_id)
            if run is None:
                continue
            run["_handled"] = int(n)
            run["llm_calls"] = int(calls)
            run["tokens_prompt"] = int(prompt or 0)
            run["tokens_completion"] = int(completion or 0)
            if ended is not None:
                run["ended_ms"] = max(int(ended), run["ended_ms"] or int(ended))
    for trace_id, n, at_ms, to_path in source.select(
        f"SELECT trace_id, count(*), min(at_ms), min(resolved_target) FROM dead_letters "
        f"WHERE trace_id IN ({marks}) GROUP BY trace_id",
        traces,
    ):
        run = runs.get(trace_id)
        if run is None:  # it died at its first decision: no hop was logged
            run = runs[trace_id] = _empty(trace_id)
            run["entry"] = to_path
            run["_cells"].add(to_path)
        run["dead_letters"] = int(n)
        if at_ms is not None:
            run["started_ms"] = min(int(at_ms), run["started_ms"] or int(at_ms))
            run["ended_ms"] = max(int(at_ms), run["ended_ms"] or int(at_ms))
    out = []
    for trace_id in traces:
        run = runs.get(trace_id)
        if run is None:
            continue
        deliveries, handled, old = run.pop("_deliveries"), run.pop("_handled"), run.pop("_old")
        if run["dead_letters"]:
            run["outcome"] = "dead_lettered"
        elif deliveries > handled and not old:
            run["outcome"] = "in_flight"
        if run["started_ms"] is not None and run["ended_ms"] is not None:
            run["duration_ms"] = run["ended_ms"] - run["started_ms"]
        out.append(run)
    return out


def _empty(trace_id: str) -> dict[str, Any]:
    return {
        "trace_id": trace_id,
        "entry": None,
        "started_ms": None,
        "ended_ms": None,
        "duration_ms": None,
        "hops": 0,
        "llm_calls": 0,
        "tokens_prompt": 0,
        "tokens_completion": 0,
        "dead_letters": 0,
        "outcome": "answered",
        "_cells": set(),
        "_deliveries": 0,
        "_handled": 0,
        "_old": False,
    }
