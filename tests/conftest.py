"""Shared test helpers: colony trees written into a temporary folder."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.pg import either_db, pg_schema  # fixtures: a PostgreSQL schema; either backend

__all__ = ["either_db", "pg_schema"]

# Each pytest-xdist worker flushes a live-Redis database of its own (15 for gw0, 14 for gw1, ...):
# two workers flushing one database under each other's tests made the live legs flaky.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORKER.startswith("gw") and "LLM_TRANSCRIPT_REDIS_URL" not in os.environ:
    os.environ["LLM_TRANSCRIPT_REDIS_URL"] = f"redis://127.0.0.1:6379/{15 - int(_WORKER[2:]) % 16}"

# A suite started in the background by a non-interactive shell (`make test &`, nohup, some CI
# runners) inherits SIGINT ignored (POSIX), and a process started with SIGINT ignored keeps
# ignoring it, Python included: every daemon and `--follow` the tests start and then stop with
# SIGINT would run on, and the test waiting for it time out. The tests want Ctrl-C's default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Tests that share something outside their own temporary folder run on one xdist worker, one
# after another: the live Redis database they flush, and the fixed port 7799 the docs name.
_SHARED = {
    "tests/cells/llm/test_loop_concurrency.py": "redis",
    "tests/cells/llm/test_loop_vectors.py": "redis",
    "tests/cells/llm/test_transcript_stores.py": "redis",
    "tests/e2e/test_documented_commands.py": "documented-commands",
}


@pytest.fixture(autouse=True, scope="session")
def _no_developer_otel_env() -> Iterator[None]:
    """The developer's ``OTEL_*`` variables stay out of the suite (an exporter they name would
    turn tracing on in every colony and daemon a test starts): a test that wants telemetry
    sets its variables itself."""
    kept = {name: os.environ.pop(name) for name in list(os.environ) if name.startswith("OTEL_")}
    try:
        yield
    finally:
        os.environ.update(kept)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backend",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="postgres: every harness colony whose tree has no cluster block runs as a "
        "one-node cluster on a PostgreSQL schema of its own (COLONY_TEST_PG_DSN)",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--backend") == "postgres":
        os.environ["COLONY_TEST_BACKEND"] = "postgres"


def pytest_sessionfinish(session: pytest.Session) -> None:
    if os.environ.get("COLONY_TEST_BACKEND") == "postgres":
        from colony.testing import drop_test_schemas

        drop_test_schemas()


# make test runs with --dist loadfile: a file's tests run on one worker, in order. The groups
# below also pin files to each other under --dist loadgroup, which pytest-xdist 3.8 does not
# honour here (its tests of one group were seen on both workers, even in a minimal example).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    on_postgres = config.getoption("--backend") == "postgres"
    for item in items:
        if on_postgres and item.get_closest_marker("sqlite_only") is not None:
            item.add_marker(pytest.mark.skip(reason="sqlite_only: a colony alone's behaviour"))
        group = _SHARED.get(item.nodeid.split("::", 1)[0])
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"

CONTRACT = {"version": "1", "settings": {}, "consumes": {}}


MINIMAL_PARAMS: dict[str, dict[str, Any]] = {
    "code": {"runner": "python3", "script_inline": "print('[]')"},
    "store": {"schema": {"t": {"c": "text"}}},
}
"""Valid params for implemented types whose params are required."""


def cell(cell_type: str, params: Any = None, **cell_keys: Any) -> dict[str, Any]:
    """A minimal valid config.json for a non-hive cell."""
    doc: dict[str, Any] = {"cell": {"type": cell_type, **cell_keys}, "contract": dict(CONTRACT)}
    if params is None and cell_type in MINIMAL_PARAMS:
        params = MINIMAL_PARAMS[cell_type]
    if params is not None:
        doc["params"] = params
    return doc


def hive(*edges: dict[str, Any], **params: Any) -> dict[str, Any]:
    """A hive config.json with these edges."""
    return {"cell": {"type": "hive"}, "params": {"graph": {"edges": list(edges)}, **params}}


def write_tree(root: Path, files: Mapping[str, Any]) -> Path:
    """Write ``{relative path: JSON value or raw text}`` under ``root``; returns ``root``."""
    for rel, content in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        text = content if isinstance(content, str) else json.dumps(content, indent=2)
        target.write_text(text, encoding="utf-8")
    return root


TreeFactory = Callable[[Mapping[str, Any]], Path]


@pytest.fixture
def make_tree(tmp_path: Path) -> TreeFactory:
    counter = iter(range(1_000_000))

    def factory(files: Mapping[str, Any]) -> Path:
        return write_tree(tmp_path / f"colony{next(counter)}", files)

    return factory
