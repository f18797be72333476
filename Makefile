# hifi: every target sets up what it needs (virtualenv, dependencies, local services).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: help venv java browser demo test test-quick check lint typecheck bench bench-auditor bench-dlq bench-rebalance bench-reconcile chaos clean

help:
	@echo "make demo   - run the connector and retrier against a local broker and a flaky destination"
	@echo "make test   - run the test suite (starts its own broker; uses or starts Redis)"
	@echo "make test-quick - the tests that need no service (broker, Redis, process, Spark, browser): seconds"
	@echo "make check  - ruff, mypy --strict, tests"
	@echo "make bench  - throughput, lag and scale benchmark (results in bench/results/)"
	@echo "make bench-auditor - the auditor's RSS with 1 M events waiting, and its throughput and RSS at 50k/s"
	@echo "make bench-dlq - the retrier's dashboard with 1 M dead letters: list, count, RSS, tiers during a replay"
	@echo "make bench-rebalance - partitions moved and stalls of a 3-member group scaling out, in and restarting (docs/rebalancing.md)"
	@echo "make bench-reconcile - spark-batch reconcile of a synthetic day of 10 M events on local[2], checked against DuckDB"
	@echo "make chaos  - fault-injection runs that count loss by event id"

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "hifi needs Python 3.11 or newer")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,spark]'
	touch $(STAMP)

# PySpark needs a JVM: Java 17 from Debian when missing (as root), else one line saying so.
java:
	@command -v java >/dev/null 2>&1 || [ -x "$$JAVA_HOME/bin/java" ] || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	    (apt-get install -y -q openjdk-17-jre-headless >/dev/null 2>&1 || \
	     (apt-get update -q >/dev/null && apt-get install -y -q openjdk-17-jre-headless >/dev/null)); } || \
	  echo "make: no Java runtime: the Spark tests are skipped (apt-get install openjdk-17-jre-headless)"

# The dashboard's browser tests drive Debian's Chromium (never a browser download by the test
# tool): installed from Debian when missing (as root), else one line saying so.
browser:
	@command -v chromium >/dev/null 2>&1 || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	    (apt-get install -y -q chromium >/dev/null 2>&1 || \
	     (apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null)); } || \
	  echo "make: no chromium: the dashboard's browser tests are skipped (apt-get install chromium)"

venv: $(STAMP)

# KEEP=1: leave the broker, destination, connector and retrier running after the summary and
# print what to try (URLs, commands); Ctrl-C stops everything.
KEEP ?=

demo: $(STAMP)
	$(BIN)/python -m devstack.demo $(if $(filter-out 0,$(KEEP)),--keep,)

# Every test, on PYTEST_WORKERS pytest-xdist workers (each with its own broker); the tests that
# share a Spark session or a module's fixture stay on one worker (tests/tiers.py).
# Four, measured on a busy 2-core machine: most tests wait on I/O (4 workers 6:46, 3 workers 9:00).
PYTEST_WORKERS ?= 4

test: $(STAMP) java browser
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# The inner loop: the tests that need no service; a guard fails any that reaches one.
QUICK_TIER := not integration and not spark and not browser

test-quick: $(STAMP)
	$(BIN)/python -m pytest -m "$(QUICK_TIER)" $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy .

check: lint typecheck test

bench: $(STAMP)
	$(BIN)/python -m bench.run

bench-auditor: $(STAMP)
	$(BIN)/python -m bench.auditor

LETTERS ?= 1000000
bench-dlq: $(STAMP)
	$(BIN)/python -m bench.dlq --letters $(LETTERS)

bench-rebalance: $(STAMP)
	$(BIN)/python -m bench.rebalance

# EVENTS=N: another size than the 10 million of the target
EVENTS ?= 10000000

bench-reconcile: $(STAMP) java
	$(BIN)/python -m bench.reconcile --events $(EVENTS)

chaos: $(STAMP)
	$(BIN)/python -m chaos

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
