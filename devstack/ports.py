"""Free loopback ports for local services."""

from __future__ import annotations

import random
import socket
from pathlib import Path

_LOWEST = 10_000  # below: ports services commonly claim
_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
_TRIES = 50


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing is bound to right now, below the kernel's ephemeral range.

    A port is picked now and bound later, by another process: a port the kernel hands out for
    outgoing connections (its ephemeral range) can be taken meanwhile by any connection on a
    busy machine (`make test` runs four workers), and the daemon then cannot listen. A port
    below that range is only ever taken by an explicit bind. Without the range (not Linux), or
    after many taken tries, the OS picks one.
    """
    low = _ephemeral_low()
    if low is not None and low - 1 > _LOWEST:
        for _ in range(_TRIES):
            port = random.randrange(_LOWEST, low)
            if _bindable(host, port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _ephemeral_low() -> int | None:
    try:
        return int(_EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def answers(host: str, port: int, timeout_s: float = 0.5) -> bool:
    """True if something accepts TCP connections at host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False
