"""A podman store of a test's own, and the listening sockets of a network namespace.

The store (containers/storage's `CONTAINERS_STORAGE_CONF`) keeps a test's containers, volumes and
secrets apart from the host's and from other runs, so a page's commands run with the names it
gives; it reads images from the host's store (`additionalimagestores`), so nothing is copied.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

_LISTEN = "0A"  # the TCP state LISTEN in /proc/net/tcp and tcp6


@dataclass(frozen=True, slots=True)
class PodmanStore:
    """A storage root of its own, and the environment that points podman at it."""

    env: dict[str, str]

    @classmethod
    def beside(cls, directory: Path) -> PodmanStore:
        """A new store in `directory`, with the host store's driver and its images."""
        host = _podman(
            dict(os.environ), "info", "--format", "{{.Store.GraphDriverName}} {{.Store.GraphRoot}}"
        )
        driver, graph_root = host.stdout.split()
        directory.mkdir(parents=True)
        conf = directory / "storage.conf"
        conf.write_text(
            "[storage]\n"
            f'driver = "{driver}"\n'
            f'graphroot = "{directory / "graph"}"\n'
            f'runroot = "{directory / "run"}"\n'
            "[storage.options]\n"
            f'additionalimagestores = ["{graph_root}"]\n'
        )
        return cls({**os.environ, "CONTAINERS_STORAGE_CONF": str(conf)})

    def podman(self, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        """podman with this store; its exit code is the caller's to check."""
        return _podman(self.env, *args, timeout_s=timeout_s)

    def remove_all(self) -> None:
        """Remove every container (at once), volume and secret of this store."""
        self.podman("rm", "--all", "--force", "--time", "0")
        self.podman("volume", "rm", "--all", "--force")
        self.podman("secret", "rm", "--all")


def _podman(
    env: dict[str, str], *args: str, timeout_s: float = 120
) -> subprocess.CompletedProcess[str]:
    podman = shutil.which("podman")
    assert podman is not None
    return subprocess.run(
        [podman, *args], env=env, capture_output=True, text=True, timeout=timeout_s, check=False
    )


def listening(port: int, tables: str | None = None) -> set[str]:
    """The addresses a TCP socket listens on at `port`, read from /proc/net/tcp and tcp6 (their
    text in `tables`, as another network namespace shows them, else this process's own)."""
    if tables is None:
        tables = "".join(Path(f"/proc/net/{name}").read_text() for name in ("tcp", "tcp6"))
    found = set()
    for line in tables.splitlines():
        fields = line.split()
        if len(fields) < 4 or fields[3] != _LISTEN or ":" not in fields[1]:
            continue
        address, _, port_hex = fields[1].partition(":")
        if int(port_hex, 16) == port:
            found.add(_address(address))
    return found


def _address(kernel_hex: str) -> str:
    """An address as /proc/net/tcp* print it: 32-bit words in the host's (little-endian) order."""
    raw = bytes.fromhex(kernel_hex)
    words = b"".join(raw[index : index + 4][::-1] for index in range(0, len(raw), 4))
    family = socket.AF_INET if len(raw) == 4 else socket.AF_INET6
    return socket.inet_ntop(family, words)
