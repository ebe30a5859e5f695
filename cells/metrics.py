"""What the cell types add to a colony's metrics (``GET /metrics``, docs/metrics.md).

The kernel counts every handling alike; two things only the cell types know. An ``llm``
cell's provider and configured model label its calls (read once, from the cell's params, at
boot); a pooled ``code`` cell's warm workers are counted at scrape
(:func:`cells.code.pool.pool_stats`). The composition roots call :func:`describe_cells` when
they build the HTTP API.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from cells.code.pool import pool_stats
from cells.llm.params import LlmParams
from colony.colony import Colony
from colony.metrics.registry import ColonyMetrics, metrics_of

DEFAULT_PROVIDER: str = LlmParams.model_fields["provider"].default


def describe_cells(colony: Colony) -> ColonyMetrics:
    """``colony``'s metrics, told its LLM cells' providers and its code cells' workers."""
    metrics = metrics_of(colony)
    code: set[str] = set()
    for path, runner in colony.runners.items():
        params = runner.spec.params if isinstance(runner.spec.params, dict) else {}
        if runner.type.name == "llm":
            provider = params.get("provider", DEFAULT_PROVIDER)
            model = params.get("model")
            metrics.describe_llm(
                path,
                provider if isinstance(provider, str) else DEFAULT_PROVIDER,
                model if isinstance(model, str) else None,
            )
        elif runner.type.name == "code":
            code.add(path)
    if code:
        metrics.add_source("code_workers", lambda: _code_workers(frozenset(code)))
    return metrics


def _code_workers(cells: frozenset[str]) -> Iterator[Metric]:
    workers = GaugeMetricFamily(
        "colony_code_workers",
        'Warm worker processes alive per code cell with isolation "pool".',
        labels=["cell"],
    )
    restarts = CounterMetricFamily(
        "colony_code_worker_restarts",
        "Pool workers replaced after a message (killed, retired or recycled), per code cell.",
        labels=["cell"],
    )
    # Pools are this process's: only this colony's code cells are read (one daemon runs one
    # colony; tests may run several, and two pools of one path are added up).
    alive: dict[str, int] = {}
    replaced: dict[str, int] = {}
    for stats in pool_stats():
        if stats.cell in cells:
            alive[stats.cell] = alive.get(stats.cell, 0) + stats.workers
            replaced[stats.cell] = replaced.get(stats.cell, 0) + stats.restarts
    for cell in sorted(alive):
        workers.add_metric([cell], alive[cell])
        restarts.add_metric([cell], replaced[cell])
    yield workers
    yield restarts
