# hifi: every target sets up what it needs (virtualenv, dependencies, local services).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: help venv java browser systemd promtool amtool stunnel tinyproxy podman demo test test-quick check lint typecheck image wrk bench bench-auditor bench-ingest bench-dlq bench-rebalance bench-reconcile spark-zip chaos soak redis clean

help:
	@echo "make demo   - run the connector and retrier against a local broker and a flaky destination"
	@echo "make test   - run the test suite (starts its own broker; uses or starts Redis)"
	@echo "make test-quick - the tests that need no service (broker, Redis, process, Spark, browser): seconds"
	@echo "make check  - ruff, mypy --strict, tests"
	@echo "make bench  - throughput, lag and scale benchmark (results in bench/results/)"
	@echo "make bench-auditor - the auditor's RSS with 1 M events waiting, and its throughput and RSS at 50k/s"
	@echo "make bench-ingest - the ingest service under wrk: requests/s, events/s, ingest time and CPU, against a bare producer"
	@echo "make bench-dlq - the retrier's dashboard with 1 M dead letters: list, count, RSS, tiers during a replay"
	@echo "make bench-rebalance - partitions moved and stalls of a 3-member group scaling out, in and restarting (docs/rebalancing.md)"
	@echo "make bench-reconcile - spark-batch reconcile of a synthetic day of 10 M events on local[2], checked against DuckDB"
	@echo "make spark-zip - dist/spark/: the reconciliation's zip and driver file for spark-submit (docs/spark-cluster.md)"
	@echo "make chaos  - fault-injection runs that count loss by event id, and a 10-minute soak"
	@echo "make soak   - an hour of the whole pipeline under seeded faults: REPORT.md and a picture (soak/results/)"
	@echo "make image  - the container image with podman, on a Debian base made here (docs/deploy-container.md)"

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "hifi needs Python 3.11 or newer")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,spark]'
	touch $(STAMP)

# A Debian package a test tier needs: $(call debian,COMMAND,PACKAGE,WHAT IS SKIPPED WITHOUT IT)
# installs PACKAGE when COMMAND is missing (as root, apt-get), else prints one line saying so.
define debian
@command -v $(1) >/dev/null 2>&1 || \
  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
    (apt-get install -y -q $(2) >/dev/null 2>&1 || \
     (apt-get update -q >/dev/null && apt-get install -y -q $(2) >/dev/null)); } || \
  echo "make: no $(1): $(3) are skipped (apt-get install $(2))"
endef

# PySpark needs a JVM (Java 17); a JAVA_HOME that has one will do.
java:
	$(if $(wildcard $(JAVA_HOME)/bin/java),@true,$(call debian,java,openjdk-17-jre-headless,the Spark tests))

# The dashboard's browser tests drive Debian's Chromium (never a browser download by the test tool).
browser:
	$(call debian,chromium,chromium,the dashboard's browser tests)

# The systemd units' checks run `systemd-analyze verify` and `security` (systemd need not be PID 1).
systemd:
	$(call debian,systemd-analyze,systemd,the systemd units' checks)

# The alert rules' tests run promtool, from Debian's prometheus package.
promtool:
	$(call debian,promtool,prometheus,the alert rules' tests)

# The Alertmanager configuration's tests run amtool (and alertmanager), from Debian's
# prometheus-alertmanager package.
amtool:
	$(call debian,amtool,prometheus-alertmanager,the Alertmanager configuration's tests)

# Tansu serves no TLS: the Kafka TLS tests put Debian's stunnel4 in front of it (devstack/tls.py).
stunnel:
	$(call debian,stunnel4,stunnel4,the Kafka TLS tests)

# The egress proxy tests tunnel through Debian's tinyproxy, a real HTTP proxy (devstack/proxy.py).
tinyproxy:
	$(call debian,tinyproxy,tinyproxy,the egress proxy tests)

# The container image is built and run with Debian's podman, on a base mmdebstrap makes from
# Debian's packages; where cgroups are in hybrid mode podman needs runc (crun refuses them).
podman:
	$(call debian,podman,podman,the container image's tests)
	$(call debian,mmdebstrap,mmdebstrap,the container image's tests)
	$(if $(wildcard /sys/fs/cgroup/unified/cgroup.controllers),$(call debian,runc,runc,the container image's tests))

# `make bench-ingest` drives the ingest service with Debian's wrk (a Lua script, bench/ingest_wrk.py).
wrk:
	$(call debian,wrk,wrk,the ingest benchmark and its short test)

venv: $(STAMP)

# KEEP=1: leave the broker, destination, connector and retrier running after the summary and
# print what to try (URLs, commands); Ctrl-C stops everything.
KEEP ?=

demo: $(STAMP)
	$(BIN)/python -m devstack.demo $(if $(filter-out 0,$(KEEP)),--keep,)

# The tests write bytecode even where the environment asks Python not to: without it every
# pytest worker compiles and rewrites the asserts of every test module again (7-10 s of CPU
# each, docs/performance-history.md, "make test's time").
PYTEST := PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest

# Every test, on PYTEST_WORKERS pytest-xdist workers (each with its own broker); the tests that
# share a Spark session or a module's fixture stay on one worker (tests/tiers.py).
# Six on a 2-core machine: most tests wait (on I/O, timers, other processes); with four the
# CPU was half idle over the run.
PYTEST_WORKERS ?= 6

test: $(STAMP) java browser systemd promtool amtool stunnel tinyproxy podman wrk redis
	$(PYTEST) -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# The inner loop: the tests that need no service; a guard fails any that reaches one.
# Three workers: a third of their time the tests wait on timers.
QUICK_TIER := not integration and not spark and not browser

test-quick: $(STAMP)
	$(PYTEST) -n 3 -m "$(QUICK_TIER)" $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/hadolint Dockerfile

# The container image (docs/deploy-container.md), built with Debian's podman. IMAGE_BASE: any
# image with Python 3.11+ (python:3.11-slim from a registry); by default a Debian bookworm base
# made here from Debian's packages (deploy/container/debian-base, kept in ~/.cache/hifi).
# `--format docker` keeps the HEALTHCHECK (the OCI format has none).
IMAGE ?= localhost/hifi:dev
IMAGE_BASE ?= localhost/hifi-base:bookworm

image: podman
	[ "$(IMAGE_BASE)" != localhost/hifi-base:bookworm ] || deploy/container/debian-base $(IMAGE_BASE)
	podman build --format docker $$(deploy/container/podman-flags build) \
	  --build-arg BASE=$(IMAGE_BASE) --tag $(IMAGE) .

typecheck: $(STAMP)
	$(BIN)/mypy .

check: lint typecheck test

bench: $(STAMP) stunnel
	$(BIN)/python -m bench.run

bench-auditor: $(STAMP)
	$(BIN)/python -m bench.auditor

bench-ingest: $(STAMP) wrk
	$(BIN)/python -m bench.ingest

LETTERS ?= 1000000
bench-dlq: $(STAMP)
	$(BIN)/python -m bench.dlq --letters $(LETTERS)

bench-rebalance: $(STAMP)
	$(BIN)/python -m bench.rebalance

# EVENTS=N: another size than the 10 million of the target
EVENTS ?= 10000000

bench-reconcile: $(STAMP) java
	$(BIN)/python -m bench.reconcile --events $(EVENTS)

# what spark-submit runs on a cluster: dist/spark/hifi-spark.zip and spark_batch_driver.py
spark-zip: $(STAMP)
	$(BIN)/spark-batch package --out dist/spark

redis:
	$(call debian,redis-server,redis-server,the soak and the tests that stop Redis)

# The whole pipeline for DURATION under a seeded schedule of faults (docs/reliability.md);
# the report in soak/results/. SEED=N: another schedule; RATE=N: events/s, not measured.
DURATION ?= 60m
SEED ?= 1
RATE ?=
soak: $(STAMP) redis
	$(BIN)/python -m soak --duration $(DURATION) --seed $(SEED) $(if $(RATE),--rate $(RATE),)

# every scenario, the reply fuzz, then a soak of 10 minutes (its minutes final after 60 s)
chaos: $(STAMP) redis
	$(BIN)/python -m chaos
	$(BIN)/python -m soak --duration 10m --seed $(SEED) --settle-s 60

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
