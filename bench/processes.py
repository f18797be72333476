"""The processes a bench run drives: the destination, the connector and the floor consumer."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO

from bench.floor import READY_LINE
from bench.measure import read_cpu_s, read_peak_rss_kb
from devstack.ports import free_port

_READY_TIMEOUT_S = 60.0
_STOP_TIMEOUT_S = 30.0
_POLL_S = 0.1


def _spawn(
    args: Sequence[str], log: IO[bytes], env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, *args],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
    )


def _stop(process: subprocess.Popen[bytes]) -> int:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


@contextlib.contextmanager
def destination(
    deliveries_file: Path, log_path: Path, *, fault_ratio: float = 0.0, fault: str | None = None
) -> Iterator[str]:
    """Run `devstack.destination_cli` on a free loopback port; yields its URL."""
    args = [
        "-m",
        "devstack.destination_cli",
        "--port",
        "0",
        "--deliveries-file",
        str(deliveries_file),
    ]
    if fault_ratio > 0 and fault is not None:
        args += ["--fault-ratio", str(fault_ratio), "--fault", fault]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log, open(log_path, "rb") as tail:
        tail.seek(0, os.SEEK_END)
        process = _spawn(args, log)
        try:
            yield _wait_for_url(process, tail)
        finally:
            _stop(process)


def _wait_for_url(process: subprocess.Popen[bytes], tail: IO[bytes]) -> str:
    deadline = time.monotonic() + _READY_TIMEOUT_S
    seen = b""
    while time.monotonic() < deadline:
        seen += tail.read()
        for line in seen.splitlines():
            if line.startswith(b"destination listening on "):
                return line.split()[-1].decode()
        if process.poll() is not None:
            raise RuntimeError(f"destination exited with {process.returncode}: {seen[-500:]!r}")
        time.sleep(_POLL_S)
    raise RuntimeError(f"destination did not print its URL in {_READY_TIMEOUT_S}s")


class ReaderProcess(abc.ABC):
    """A process that reads the bench topic, with its peak RSS sampled while it runs."""

    name = "reader"

    def __init__(self, args: list[str], *, log_path: Path, env: dict[str, str]) -> None:
        self._args = args
        self._env = env
        self._log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None
        self._log_start = 0
        self.peak_rss_kb = 0
        #: (wall-clock ms, CPU s) samples while it runs, for `measure.cpu_between`
        self.cpu_samples: list[tuple[float, float]] = []

    def start(self) -> None:
        with open(self._log_path, "ab") as log:
            self._log_start = log.tell()  # what earlier readers wrote there is not this one's
            self._process = _spawn(self._args, log, self._env)

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError(f"{self.name} not started")
        return self._process.pid

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def sample_rss(self) -> None:
        """Note the peak resident set (VmHWM) and the CPU used so far while the process is alive."""
        if self.running():
            self.peak_rss_kb = max(self.peak_rss_kb, read_peak_rss_kb(self.pid) or 0)
            cpu_s = read_cpu_s(self.pid)
            if cpu_s is not None:
                self.cpu_samples.append((time.time() * 1000, cpu_s))

    @abc.abstractmethod
    async def is_ready(self) -> bool:
        """Whether the reader has its partitions and reads."""

    async def wait_ready(self, timeout_s: float = _READY_TIMEOUT_S) -> None:
        """Wait until the reader has its partitions and reads."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            if not self.running():
                raise RuntimeError(f"{self.name} exited early; see {self._log_path}")
            if await self.is_ready():
                return
            await asyncio.sleep(_POLL_S)
        raise RuntimeError(f"{self.name} not ready in {timeout_s}s; see {self._log_path}")

    async def wait_exit(self, timeout_s: float) -> int:
        """Wait for the idle exit, sampling RSS; SIGTERM it after `timeout_s`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.running() and loop.time() < deadline:
            self.sample_rss()
            await asyncio.sleep(_POLL_S)
        return self.stop()

    def stop(self) -> int:
        self.sample_rss()
        if self._process is None:
            return 0
        code = _stop(self._process)
        if code != 0:
            raise RuntimeError(f"{self.name} exited with {code}; see {self._log_path}")
        return code


class ConnectorProcess(ReaderProcess):
    """`python -m connector` as a real process; ready when `/readyz` answers 200."""

    name = "connector"

    def __init__(
        self,
        *,
        catalog_dir: Path,
        dest: str,
        bootstrap: str,
        log_path: Path,
        until_idle_s: float,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """`env`: more environment (the lookup phase's `HIFI_REDIS_URL`, `HIFI_STATE_DIR`)."""
        self.metrics_port = free_port()
        args = [
            "-m",
            "connector",
            "--dest",
            dest,
            "--catalog",
            str(catalog_dir),
            "--metrics-port",
            str(self.metrics_port),
            "--until-idle",
            str(until_idle_s),
            "--log-format",
            "json",
            "--log-level",
            "WARNING",
        ]
        environment = {**os.environ, **(env or {}), "HIFI_KAFKA_BOOTSTRAP": bootstrap}
        super().__init__(args, log_path=log_path, env=environment)
        self.requests_2xx = 0  # its count of requests answered 2xx, when scraped

    def scrape(self) -> dict[str, float]:
        """The connector's metrics now, `name{labels}` -> value; {} when it does not answer."""
        try:
            url = f"http://127.0.0.1:{self.metrics_port}/metrics"
            with urllib.request.urlopen(url, timeout=1.0) as response:
                text = response.read().decode()
        except OSError:
            return {}
        samples = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                with contextlib.suppress(ValueError):
                    samples[name] = float(value)
        return samples

    async def is_ready(self) -> bool:
        url = f"http://127.0.0.1:{self.metrics_port}/readyz"
        return await asyncio.to_thread(_answers_200, url)


class FloorProcess(ReaderProcess):
    """`python -m bench.floor`, intake without delivery; ready when it prints that it has partitions."""

    name = "floor consumer"

    def __init__(
        self, *, bootstrap: str, topic: str, deliveries_file: Path, log_path: Path
    ) -> None:
        args = [
            "-m",
            "bench.floor",
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
            "--deliveries-file",
            str(deliveries_file),
        ]
        super().__init__(args, log_path=log_path, env=dict(os.environ))

    async def is_ready(self) -> bool:
        with self._log_path.open("rb") as log:
            log.seek(self._log_start)
            return READY_LINE.encode() in log.read()


def _answers_200(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as response:  # noqa: S310 - loopback URL we built
            return bool(response.status == 200)
    except OSError:
        return False
