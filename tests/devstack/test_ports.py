"""`devstack.ports.free_port`: a port a daemon can bind later, not one an outgoing connection takes meanwhile."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from devstack.ports import free_port

_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


@pytest.mark.skipif(not _RANGE.exists(), reason="no ephemeral port range to stay out of")
def test_free_ports_are_below_the_ephemeral_range_and_bindable() -> None:
    low = int(_RANGE.read_text().split()[0])
    ports = {free_port() for _ in range(20)}
    assert all(port < low for port in ports)
    assert len(ports) > 1  # picked, not one fixed port
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))
            sock.listen()


def test_a_port_someone_listens_on_is_never_given(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        monkeypatch.setattr("random.randrange", lambda low, high: busy)
        assert free_port() != busy  # every try met the listener: the OS picks one
