"""Prometheus metrics (``GET /metrics``): what the colony already counts, exposed at scrape.

Almost nothing here runs as messages flow. The kernel keeps counters anyway (the runners'
``handled``/``busy``, the mailboxes' sizes, :attr:`colony.colony.Colony.decisions`, the
writer's totals), and a scrape reads them through a custom collector
(:mod:`colony.metrics.collector`). What nobody counted yet is counted in plain integers: per
cell handling times, outcomes, dead letters and LLM calls by one tap on every committed
hand-off (:mod:`colony.metrics.tap`), and the writer thread's commit times and batch sizes
(:class:`colony.metrics.tally.Tally`, filled on that thread without a lock). Prometheus
objects are made only when a scrape asks.

Labels stay bounded: cell paths (the tree's), dead-letter codes, outcomes, providers, and
models (at most :data:`colony.metrics.tap.MODELS` per provider, the rest ``other``); never a
message or trace id, never a path a message merely named.

Each colony has its own :class:`prometheus_client.CollectorRegistry`
(:func:`colony.metrics.registry.metrics_of`), so several colonies in one process (the tests)
never share a series.
"""
