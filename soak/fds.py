"""What a process's file descriptors are: each named by its kind, for the soak's samples.

A count of fds whose floor rose says a descriptor was kept; its kind says which one: a TCP
connection and to what (Kafka, a destination, Redis, a daemon's ops server) and in what state
(one the peer closed and the process did not, `close-wait`, is the mark of a leaked
connection), a listening socket, a pipe, an epoll or eventfd, a file. Read from /proc/PID/fd
and the process's own /proc/PID/net/tcp tables.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

#: the `st` column of /proc/net/tcp, for the states a descriptor is seen in
_STATES = {
    "01": "established",
    "02": "syn-sent",
    "04": "fin-wait",
    "05": "fin-wait",
    "07": "closed",
    "08": "close-wait",
    "09": "last-ack",
    "0A": "listening",
}
_ESTABLISHED = "established"
KAFKA = "Kafka"  # the name of a Kafka listener's port among `port_names`
_SOCKET = "socket:["


@dataclass(frozen=True, slots=True)
class TcpSocket:
    local_port: int
    remote_port: int
    state: str  # one of `_STATES`' names, or the kernel's code when it is none of them


def targets(fd_dir: Path) -> list[str]:
    """What each fd of a process points at (`socket:[123]`, `pipe:[45]`, a path); an fd closed
    since the listing is skipped. FileNotFoundError when the process is gone."""
    found = []
    for name in os.listdir(fd_dir):
        try:
            found.append(os.readlink(fd_dir / name))
        except FileNotFoundError:
            continue
    return found


def tcp_sockets(tables: Iterable[str]) -> dict[str, TcpSocket]:
    """Inode -> socket, from the text of /proc/net/tcp and tcp6 tables."""
    sockets = {}
    for table in tables:
        for row in table.splitlines()[1:]:  # the first line names the columns
            columns = row.split()
            local, remote, state, inode = columns[1], columns[2], columns[3], columns[9]
            sockets[inode] = TcpSocket(
                local_port=int(local.rpartition(":")[2], 16),
                remote_port=int(remote.rpartition(":")[2], 16),
                state=_STATES.get(state, state),
            )
    return sockets


def _socket_of(target: str, sockets: Mapping[str, TcpSocket]) -> TcpSocket | None:
    """The TCP socket an fd's target is, if it is one."""
    if not target.startswith(_SOCKET):
        return None
    return sockets.get(target[len(_SOCKET) : -1])


def kinds(
    fd_targets: Iterable[str], sockets: Mapping[str, TcpSocket], port_names: Mapping[int, str]
) -> dict[str, int]:
    """How many of the fds are of each kind (`kind_of`)."""
    return dict(Counter(kind_of(target, sockets, port_names) for target in fd_targets))


def kind_of(target: str, sockets: Mapping[str, TcpSocket], port_names: Mapping[int, str]) -> str:
    """An fd's kind: "tcp to Kafka", "tcp to destination plain (close-wait)", "tcp from a client
    of auditor-plain", "tcp listening", "socket" (Unix, UDP), "pipe", "eventpoll", "file"..."""
    if target.startswith(_SOCKET):
        socket = _socket_of(target, sockets)
        if socket is None:
            return "socket"
        if socket.state == "listening":
            return "tcp listening"
        if name := port_names.get(socket.remote_port):
            kind = f"tcp to {name}"
        elif name := port_names.get(socket.local_port):
            kind = f"tcp from a client of {name}"
        else:
            kind = "tcp to another port"
        return kind if socket.state == _ESTABLISHED else f"{kind} ({socket.state})"
    if target.startswith("pipe:"):
        return "pipe"
    if target.startswith("anon_inode:"):
        return target.removeprefix("anon_inode:").strip("[]")
    return "file"
