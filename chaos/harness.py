"""The stage for a chaos run: a broker behind a cuttable proxy, a scriptable destination, supervised daemons."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

import orjson

from devstack import kafka_tools
from devstack.broker import LocalBroker
from devstack.destination import TestDestination
from devstack.ports import free_port
from devstack.readiness import until_ready
from devstack.tcp_proxy import TcpProxy
from hifi.kafka.producing import open_producer
from hifi.kafka.reading import read_topic
from hifi.kafka.settings import KafkaSettings

_RESTART_DELAY_S = 0.5


class Daemon:
    """A connector, retrier or auditor process, restarted when it exits on its own (as systemd would)."""

    def __init__(
        self,
        name: str,
        module: str,
        args: Sequence[str],
        *,
        bootstrap: str,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        metrics_port: int = 0,
    ) -> None:
        self.name = name
        self.metrics_port = metrics_port
        self._command = [
            sys.executable,
            "-m",
            module,
            *args,
            "--log-format",
            "json",
            "--metrics-port",
            str(metrics_port),  # 0 picks a free one at each start
        ]
        self._env = {**os.environ, **(env or {}), "HIFI_KAFKA_BOOTSTRAP": bootstrap}
        self._log_path = log_path
        self._process: asyncio.subprocess.Process | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._stopping = False
        self.kills = 0
        self.restarts = 0  # exits nobody asked for (a kill -9 from the scenario is not one)
        self._killed = False

    @property
    def pid(self) -> int | None:
        """The running process's id; None between a death and its restart."""
        process = self._process
        return process.pid if process is not None and process.returncode is None else None

    async def start(self) -> None:
        self._stopping = False
        await self._spawn()
        self._supervisor = asyncio.create_task(self._supervise(), name=f"supervise-{self.name}")

    async def ready(self, timeout_s: float) -> bool:
        """True once the daemon answers `/readyz` (it needs a fixed `metrics_port`)."""
        if not self.metrics_port:
            raise ValueError(f"{self.name} has no fixed ops port to ask")
        return await until_ready([self.metrics_port], timeout_s)

    async def _spawn(self) -> None:
        with open(self._log_path, "ab") as log:
            self._process = await asyncio.create_subprocess_exec(
                *self._command,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                stdin=asyncio.subprocess.DEVNULL,
                env=self._env,
            )

    async def _supervise(self) -> None:
        while not self._stopping:
            assert self._process is not None
            await self._process.wait()
            if self._stopping:
                return
            if self._killed:
                self._killed = False
            else:
                self.restarts += 1
            await asyncio.sleep(_RESTART_DELAY_S)
            if not self._stopping:
                await self._spawn()

    def kill9(self) -> None:
        """SIGKILL the running process; the supervisor starts a new one."""
        if self._process is not None and self._process.returncode is None:
            self._killed = True
            self._process.send_signal(signal.SIGKILL)
            self.kills += 1

    async def stop(self, timeout_s: float = 60.0) -> int | None:
        """SIGTERM, wait for the drain, and return the exit code."""
        self._stopping = True
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
        process = self._process
        if process is None or process.returncode is not None:
            return process.returncode if process else None
        process.send_signal(signal.SIGTERM)
        try:
            return await asyncio.wait_for(process.wait(), timeout_s)
        except TimeoutError:
            process.kill()
            return await process.wait()


class Stage:
    """Everything one chaos run needs; scenarios use distinct destination names on it."""

    def __init__(
        self, work_dir: Path, broker: LocalBroker, proxy: TcpProxy, destination: TestDestination
    ) -> None:
        self.work_dir = work_dir
        self.broker = broker
        self.proxy = proxy
        self.destination = destination
        self.catalog = work_dir / "catalog"
        self.catalog.mkdir(parents=True, exist_ok=True)
        self.settings = KafkaSettings(bootstrap=f"127.0.0.1:{proxy.port}")

    def write_destination(
        self,
        name: str,
        topic: str,
        *,
        accounting: Mapping[str, object] | None = None,
        **overrides: object,
    ) -> None:
        keys: dict[str, object] = {
            "url": self.destination.url,
            "source_topics": [topic],
            "max_batch_records": 200,
            "request_timeout_s": 2.0,
            "local_retry_attempts": 2,
            "local_retry_max_backoff_s": 0.2,
            "retry_after_max_s": 2.0,
            "retry_tiers_s": [1, 2, 4, 8, 16, 32, 64],
            "max_retry_age_s": 3600,
            "shutdown_timeout_s": 10.0,
            "internal_topic_partitions": 2,
            **overrides,
        }
        lines = [f"{key} = {_toml(value)}" for key, value in keys.items()]
        if accounting:
            lines.append("[accounting]")
            lines.extend(f"{key} = {_toml(value)}" for key, value in accounting.items())
        (self.catalog / f"{name}.toml").write_text("\n".join(lines) + "\n")

    def daemon(
        self,
        module: str,
        name: str,
        *,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        metrics_port: int = 0,
    ) -> Daemon:
        return Daemon(
            f"{module}-{name}",
            module,
            ["--dest", name, "--catalog", str(self.catalog), *args],
            bootstrap=self.settings.bootstrap,
            log_path=self.work_dir / f"{module}-{name}.log",
            env=env,
            metrics_port=metrics_port,
        )

    async def produce(self, topic: str, values: Sequence[bytes]) -> dict[str, int]:
        """Produce with acks=all; returns each record's origin (topic/partition/offset) and its
        Kafka timestamp (epoch ms)."""
        async with open_producer(self.settings) as producer:
            metadata = await producer.send_all([(topic, None, value, []) for value in values])
        return {f"{m.topic}/{m.partition}/{m.offset}": m.timestamp for m in metadata}

    async def dead_letters(self, name: str) -> dict[str, str]:
        """id (origin for records that are not JSON objects) -> reason, for NAME.dlq."""
        return await kafka_tools.dead_letters(self.settings, name)

    async def handed_off(self, name: str) -> int:
        """Records the connector handed to the retrier (NAME.retry_in), an event once per hand-off."""
        return len(await read_topic(self.settings, f"{name}.retry_in", timeout_s=60.0))


@contextlib.asynccontextmanager
async def stage(work_dir: Path) -> AsyncIterator[Stage]:
    """A fresh broker that advertises a proxy, so every Kafka connection can be cut at once."""
    work_dir.mkdir(parents=True, exist_ok=True)
    proxy_port = free_port()
    with LocalBroker(advertised_port=proxy_port, log_path=work_dir / "tansu.log") as broker:
        async with (
            TcpProxy("127.0.0.1", broker.port, port=proxy_port) as proxy,
            TestDestination(record_bodies=False) as destination,
        ):
            yield Stage(work_dir, broker, proxy, destination)


def now_ms() -> int:
    return int(time.time() * 1000)


def _toml(value: object) -> str:
    if isinstance(value, str):
        return orjson.dumps(value).decode()
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)
