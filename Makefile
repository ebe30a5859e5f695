# One entry point for people and CI. Every target works from a fresh clone with nothing
# preinstalled but Python: the first call builds .venv and installs the project into it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-postgres lint bench soak install clean pictures screenshots wheel-demo

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/meclaw demo

# Two workers (pytest-xdist), a file's tests on one of them in order (--dist loadfile): the
# documented commands build on each other, and each worker has a live-Redis database of its
# own (tests/conftest.py). About 4 minutes on 2 cores; a plain `pytest` runs them in one.
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

# The suite with every harness colony as a one-node cluster on PostgreSQL (COLONY_TEST_PG_DSN,
# default the machine's server on 127.0.0.1:5432); what only colony.db does is skipped.
test-postgres: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --backend postgres

# The wheel on its own: built from the checkout's files, installed into a throwaway virtualenv,
# `meclaw --version` and `meclaw demo` run from a folder outside the checkout (.ci/wheel-demo).
wheel-demo:
	.ci/wheel-demo $(PYTHON)

lint: $(STAMP)
	$(BIN)/ruff check colony cells scripted tests bench
	$(BIN)/ruff format --check colony cells scripted tests bench
	$(BIN)/mypy

# Every benchmark (each on asyncio's loop and on uvloop), then their headline figures as one
# table in docs/performance.md (bench/report.py). About 11 minutes on 2 cores.
bench: export BENCH_RESULTS := bench/results.jsonl
bench: $(STAMP)
	$(BIN)/python -c 'import langgraph, uvloop' 2>/dev/null || \
	  $(BIN)/python -m pip install --quiet -e '.[bench,uvloop]'
	rm -f $(BENCH_RESULTS)
	$(BIN)/python bench/expressions.py
	$(BIN)/python bench/routing.py
	$(BIN)/python bench/code_cell.py
	$(BIN)/python bench/store.py
	$(BIN)/python bench/load.py
	$(BIN)/python bench/vs_langgraph.py
	$(BIN)/python bench/cluster.py
	$(BIN)/python bench/scale.py
	$(BIN)/python bench/prune.py
	$(BIN)/python bench/telemetry.py
	$(BIN)/python bench/tools.py
	$(BIN)/python bench/report.py

# The long variants: 1,000 and 10,000 concurrent conversations, 1,000 with a kill -9 halfway
# and a restart (bench/load.py), and 100 kill -9 crash runs. Every part runs even when one
# before it failed; a part that fails prints what failed, and soak ends naming it, non-zero.
# (Hours on 2 cores: the 10,000 run alone is most of it.)
SOAK_LOADS := "--conversations 1000" "--conversations 1000 --kill-midway" "--conversations 10000"
soak: $(STAMP)
	@failed=""; \
	for args in $(SOAK_LOADS); do \
	  echo "== bench/load.py $$args"; \
	  $(BIN)/python bench/load.py $$args || failed="$$failed; bench/load.py $$args"; \
	done; \
	echo "== tests/e2e/test_crash.py, 100 runs"; \
	MECLAW_CRASH_RUNS=100 $(BIN)/python -m pytest -q tests/e2e/test_crash.py \
	  || failed="$$failed; the crash runs"; \
	if [ -n "$$failed" ]; then echo "soak FAILED: $${failed#; }"; exit 1; fi; \
	echo "soak: every part passed"

# Each shipped topology's picture: graph.dot (pinned by a test) and graph.svg (drawn by
# graphviz-pure, a self-contained Graphviz build installed here on demand).
pictures: $(STAMP)
	$(BIN)/python -m pip install --quiet 'graphviz-pure>=0.2'
	for t in topologies/*/; do \
	  $(BIN)/meclaw graph --root $$t > $$t/graph.dot && \
	  $(BIN)/graphviz-pure -Tsvg $$t/graph.dot -o $$t/graph.svg; \
	done

# The web console's pictures (docs/console/*.png, shown in docs/console.md): the demo colony
# booted offline, each page opened in headless Chromium (Debian's chromium package, driven by
# Playwright) and shot by bench/console_screenshots.py.
screenshots: $(STAMP)
	$(BIN)/python bench/console_screenshots.py --out docs/console

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
