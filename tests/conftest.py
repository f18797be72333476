"""Session-wide real services for the tests: a Kafka-protocol broker and Redis."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack.broker import LocalBroker
from devstack.destination import TestDestination
from devstack.redis import local_redis
from hifi.kafka.settings import KafkaSettings

TEST_BOOTSTRAP_ENV_VAR = "HIFI_TEST_BOOTSTRAP"


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """$HIFI_TEST_BOOTSTRAP when set (a real Kafka), else a Tansu broker for this session."""
    external = os.environ.get(TEST_BOOTSTRAP_ENV_VAR)
    if external:
        yield external
        return
    log_path = tmp_path_factory.mktemp("tansu") / "tansu.log"
    with LocalBroker(log_path=log_path) as broker:
        yield broker.bootstrap


@pytest.fixture(scope="session")
def kafka_settings(kafka_bootstrap: str) -> KafkaSettings:
    return KafkaSettings(bootstrap=kafka_bootstrap)


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
