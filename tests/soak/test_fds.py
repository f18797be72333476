"""What a daemon's fds are: a real process's descriptors named by kind from /proc, and the kind
whose floor rose named beside a rise of the fds' floor."""

from __future__ import annotations

import socket
import subprocess
import sys

from soak.fds import TcpSocket, kind_of, tcp_sockets
from soak.model import Account, Floor, Sample, SoakResult
from soak.resources import sample_process, slopes
from soak.targets import targets

# Connects to the test's "destination" (argv: its port), listens on a port of its own, opens a
# pipe and a file, says "ready"; at a line on stdin, reads its connection to the end (the peer
# closed it) without closing it and says "closed"; exits at the end of stdin.
CHILD = """
import os, socket, sys
connection = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
listening = socket.create_server(("127.0.0.1", 0))
pipe = os.pipe()
devnull = open(os.devnull)
print("ready", flush=True)
sys.stdin.readline()
while connection.recv(4096):
    pass
print("closed", flush=True)
sys.stdin.read()
"""
# /proc/net/tcp: a connection to port 9092 (0x2384), one listening on 8080 (0x1F90), and one
# the peer closed (close-wait) to 6379 (0x18EB)
TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:A1B2 0100007F:2384 01 00000000:00000000 00:00000000 00000000     0        0 111 1
   1: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 222 1
   2: 0100007F:C3D4 0100007F:18EB 08 00000000:00000000 00:00000000 00000000     0        0 333 1
"""


def _kinds_of(pid: int, port_names: dict[int, str]) -> dict[str, int]:
    sample = sample_process("c", pid, at_s=0.0, kafka_ports=(), tasks=None, port_names=port_names)
    assert sample is not None
    assert sum(sample.fd_kinds.values()) == sample.fds
    return dict(sample.fd_kinds)


def test_a_process_fds_are_named_by_kind_and_a_connection_closed_by_its_peer_shows(
    processes: list[subprocess.Popen[bytes]],
) -> None:
    """A connection to a named port, a listening socket, pipes and a file; once the peer
    closes the connection and the process does not, it is in close-wait."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        command = [sys.executable, "-c", CHILD, str(port)]
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        processes.append(process)
        assert process.stdout is not None
        assert process.stdout.readline() == b"ready\n"
        accepted, _ = server.accept()
        names = {port: "destination plain"}
        kinds = _kinds_of(process.pid, names)
        assert kinds["tcp to destination plain"] == 1
        assert kinds["tcp listening"] == 1
        assert kinds["pipe"] >= 4  # its stdin and stdout, and the pipe it made
        assert kinds["file"] >= 1
        accepted.close()
        assert process.stdin is not None
        process.stdin.write(b"read\n")
        process.stdin.flush()
        assert process.stdout.readline() == b"closed\n"  # it has read the peer's FIN
        kinds = _kinds_of(process.pid, names)
        assert kinds["tcp to destination plain (close-wait)"] == 1
        assert "tcp to destination plain" not in kinds
    process.stdin.close()  # the child exits at the end of its stdin
    process.stdout.close()
    process.wait(timeout=10)


def test_a_socket_is_named_by_the_port_it_reaches_or_serves() -> None:
    sockets = tcp_sockets([TCP])
    assert sockets["111"] == TcpSocket(0xA1B2, 9092, "established")
    names = {9092: "Kafka", 6379: "Redis", 0xA1B2: "auditor-plain's ops server"}
    assert kind_of("socket:[111]", sockets, names) == "tcp to Kafka"
    assert kind_of("socket:[111]", sockets, {0xA1B2: "auditor"}) == "tcp from a client of auditor"
    assert kind_of("socket:[111]", sockets, {}) == "tcp to another port"
    assert kind_of("socket:[222]", sockets, names) == "tcp listening"
    assert kind_of("socket:[333]", sockets, names) == "tcp to Redis (close-wait)"
    assert kind_of("socket:[999]", sockets, names) == "socket"  # a Unix socket, say
    assert kind_of("anon_inode:[eventpoll]", sockets, names) == "eventpoll"
    assert kind_of("pipe:[123]", sockets, names) == "pipe"
    assert kind_of("/var/lib/hifi/state.json", sockets, names) == "file"


def test_the_kind_whose_floor_rose_is_named_with_the_fds_rise() -> None:
    """A connection to the destination kept from minute 20 on: the fds' floor and that kind's
    rise by one, and the target names it; the pipes' floor holds."""

    def kinds(life_s: int) -> dict[str, int]:
        kept = 1 if life_s >= 1200 else 0
        in_flight = life_s // 20 % 3  # each level for two samples
        return {"pipe": 4, "tcp to destination plain": 2 + in_flight + kept}

    life = [
        Sample(life_s, "connector", 7, 80.0, sum(kinds(life_s).values()), 7, 3, 18, kinds(life_s))
        for life_s in range(0, 3601, 10)
    ]
    (slope,) = slopes(life)
    assert slope.floors["fds"] == Floor(6, 7)
    assert slope.fd_floors == {"pipe": Floor(4, 4), "tcp to destination plain": Floor(2, 3)}
    account = Account(1, 1, 0, 0, {}, {})
    result = SoakResult(0, 1, 3600.0, 1.0, 1.0, 1.0, (), (), tuple(life), (slope,), account)
    (fds,) = (t for t in targets(result) if t.target.startswith("fds flat"))
    assert fds.met is False
    assert fds.measured.startswith("+1 (connector pid 7: least 6 → 7; of them tcp to destina")
    assert "of them tcp to destination plain 2 → 3)" in fds.measured
