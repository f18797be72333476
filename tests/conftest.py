"""Session-wide real services for the tests: a Kafka-protocol broker and Redis."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from devstack.broker import LocalBroker
from devstack.destination import TestDestination
from devstack.redis import local_redis
from hifi.kafka.settings import ENV_KEYS, KafkaSettings
from tests.tiers import QuickTierGuard, group_for_xdist, mark_by_fixtures, slow_modules_first


@pytest.fixture(autouse=True, scope="session")
def _uncached_loggers() -> Iterator[None]:
    """`hifi.logging` caches each logger on first use (cheaper in the daemons); in one test
    process a logger cached by one test would escape `structlog.testing.capture_logs` in the
    next, so the tests' configuration never caches."""
    configure = structlog.configure

    def uncached(**settings: Any) -> None:
        configure(**{**settings, "cache_logger_on_first_use": False})

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(structlog, "configure", uncached)
        yield


@pytest.fixture(autouse=True)
def _structlog_defaults() -> Iterator[None]:
    """Each test starts from structlog's defaults: a level or renderer one test configured in
    this process (`hifi.logging`) never filters what the next one captures."""
    yield
    structlog.reset_defaults()


TEST_BOOTSTRAP_ENV_VAR = "HIFI_TEST_BOOTSTRAP"
SESSION_TIMEOUT_ENV_VAR = ENV_KEYS["session_timeout_s"]
# Tansu answers a group's JoinGroup only after half the joining member's session timeout: 5 s
# for each connector or auditor with aiokafka's default of 10 s. The tests' members use the
# shortest session Kafka accepts (its `group.min.session.timeout.ms`), so each join takes 3 s.
TANSU_SESSION_TIMEOUT_S = 6


@pytest.fixture(autouse=True, scope="session")
def _short_group_sessions() -> Iterator[None]:
    """Against the tests' Tansu, every group member of this process and of the daemons it starts
    joins with `TANSU_SESSION_TIMEOUT_S` (`HIFI_KAFKA_SESSION_TIMEOUT_S`, which they inherit)
    unless the variable is set already; against $HIFI_TEST_BOOTSTRAP the environment is left as
    it is."""
    if os.environ.get(TEST_BOOTSTRAP_ENV_VAR) or os.environ.get(SESSION_TIMEOUT_ENV_VAR):
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(SESSION_TIMEOUT_ENV_VAR, str(TANSU_SESSION_TIMEOUT_S))
        yield


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """$HIFI_TEST_BOOTSTRAP when set (a real Kafka), else a Tansu broker for this session (with
    pytest-xdist: for this worker, on its own port, stopped when the worker ends)."""
    external = os.environ.get(TEST_BOOTSTRAP_ENV_VAR)
    if external:
        yield external
        return
    log_path = tmp_path_factory.mktemp("tansu") / "tansu.log"
    broker = _started_broker(log_path)
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


def _started_broker(log_path: Path, attempts: int = 3) -> LocalBroker:
    """A started Tansu; with xdist each worker starts its own, so the free port one picked can be
    taken by another worker before Tansu binds it: then another port is tried."""
    for attempt in range(1, attempts + 1):
        broker = LocalBroker(log_path=log_path)
        try:
            return broker.start()
        except RuntimeError:
            broker.stop()
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")


@pytest.fixture(scope="session")
def kafka_settings(kafka_bootstrap: str) -> KafkaSettings:
    """How the tests' clients connect: with $HIFI_TEST_BOOTSTRAP, as `HIFI_KAFKA_*` says (TLS,
    SASL: the variables the daemons started by the tests inherit too); else plaintext Tansu."""
    if os.environ.get(TEST_BOOTSTRAP_ENV_VAR):
        return KafkaSettings.from_env({**os.environ, "HIFI_KAFKA_BOOTSTRAP": kafka_bootstrap})
    return KafkaSettings(bootstrap=kafka_bootstrap, session_timeout_s=TANSU_SESSION_TIMEOUT_S)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    with local_redis() as url:
        yield url


@pytest.fixture
def unique() -> str:
    """A short name no other test uses, for topics, groups and destinations."""
    return "t" + uuid.uuid4().hex[:10]


@pytest.fixture
async def destination() -> AsyncIterator[TestDestination]:
    async with TestDestination() as dest:
        yield dest


@pytest.fixture
def catalog_dir(tmp_path: Path) -> Path:
    path = tmp_path / "catalog"
    path.mkdir()
    return path


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Child processes a test starts; any still running at teardown is killed."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local Spark session (2 cores) for every Spark test; skipped, saying why in one line,
    where Java or PySpark is missing (`make test` installs PySpark; Java 17 is a machine
    package)."""
    from spark_batch.session import java_missing, spark_session

    why = java_missing()
    if why is not None:
        pytest.skip(why)
    pytest.importorskip("pyspark", reason="PySpark is not installed: pip install '.[spark]'")
    with spark_session("hifi-tests", master="local[2]") as started:
        yield started.spark


# --- the tiers (tests/tiers.py) ---------------------------------------------------------------

_GUARD = QuickTierGuard()


def pytest_configure(config: pytest.Config) -> None:
    _GUARD.install()


def pytest_unconfigure(config: pytest.Config) -> None:
    _GUARD.uninstall()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mark_by_fixtures(items)
    if getattr(config.option, "loadgroup", False):  # an xdist worker under --dist loadgroup
        slow_modules_first(items)
        group_for_xdist(items)


# Setup and call only: a teardown also ends the module's and session's fixtures (the broker,
# Spark) when a quick test happens to be the last to use their scope.
@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with _GUARD.active(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with _GUARD.active(item):
        return (yield)
