"""A Redis for development and tests: the configured one, the machine's own, or a private redis-server.

`RedisServer` is always a private one, on its own port, that a test or a bench may stop (even
kill -9) and start again on the same port; the machine's own Redis is never touched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator

import redis

from devstack.ports import free_port

TEST_REDIS_ENV_VAR = "HIFI_TEST_REDIS_URL"
_DEFAULT_URL = "redis://127.0.0.1:6379/0"


def _pings(url: str) -> bool:
    client = redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


class RedisServer:
    """A `redis-server` of our own on a free loopback port, without persistence; `stop` (SIGKILL
    with `kill=True`) and `start` again keep the port and the URL."""

    def __init__(self, port: int | None = None) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self._binary = binary
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self._process.pid if self.running and self._process is not None else None

    def start(self, timeout_s: float = 15.0) -> None:
        """Start it (no-op when running) and wait until it answers PING."""
        if self.running:
            return
        self._process = subprocess.Popen(
            [
                self._binary,
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout_s
        while not _pings(self.url):
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {self.port} did not start")
            time.sleep(0.05)

    def stop(self, *, kill: bool = False) -> None:
        """Stop it (SIGTERM, or SIGKILL with `kill`) and wait until it is gone; its data is lost."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        if kill:
            process.kill()
        else:
            process.terminate()
        process.wait(timeout=10)


@contextlib.contextmanager
def local_redis() -> Iterator[str]:
    """Yield a Redis URL: $HIFI_TEST_REDIS_URL, else 127.0.0.1:6379 if it answers, else a
    `redis-server` started on a free port (stopped afterwards); fails naming what to install."""
    configured = os.environ.get(TEST_REDIS_ENV_VAR)
    if configured:
        if not _pings(configured):
            raise RuntimeError(f"{TEST_REDIS_ENV_VAR}={configured} does not answer PING")
        yield configured
        return
    if _pings(_DEFAULT_URL):
        yield _DEFAULT_URL
        return
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError(
            "no Redis: nothing answers on 127.0.0.1:6379 and redis-server is not installed "
            "(apt-get install redis-server, or set HIFI_TEST_REDIS_URL)"
        )
    port = free_port()
    process = subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + 15
        while not _pings(url):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {port} did not start")
            time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)
