"""The test tiers: which tests need a service, and the guard that keeps the quick tier service-free.

A test is in the quick tier (`make test-quick`) unless it is marked `integration`, `spark` or
`browser`. A test that asks for a service fixture (the broker, Redis, child processes, Spark) is
marked here from its fixtures, so a new test cannot forget its mark.

While a quick-tier test sets up and runs, `QuickTierGuard` fails it loudly when it
starts a child process or connects to anything but a loopback port this process itself listens
on (the test's own `devstack.destination`, ops servers and the like). So connecting to the
broker, Redis (6379) or PostgreSQL (5432) fails the test, even where the code under test
catches the error: every violation is recorded and reported after the test.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

SERVICE_MARKS = ("integration", "spark", "browser")
QUICK_TIER = " and ".join(f"not {mark}" for mark in SERVICE_MARKS)

# Fixtures that start or reach a service: a test asking for one is marked with the mark.
SERVICE_FIXTURES = {
    "kafka_bootstrap": "integration",
    "kafka_settings": "integration",
    "redis_url": "integration",
    "redis_server": "integration",
    "processes": "integration",
    "spark": "spark",
}


class QuickTierViolation(Exception):
    """A quick-tier test reached a service or started a process: mark it, or use a fake."""


def mark_by_fixtures(items: list[pytest.Item]) -> None:
    """Mark each test that asks for a service fixture with the mark of its tier."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        for fixture, mark in SERVICE_FIXTURES.items():
            if fixture in fixtures and item.get_closest_marker(mark) is None:
                item.add_marker(getattr(pytest.mark, mark))


def slow_modules_first(items: list[pytest.Item]) -> None:
    """Put the modules holding a `slow` or a Spark test first, each kept whole and in its
    order: xdist hands tests out in collection order, so the ones that wait for a minute to
    end (three demos, the outage past settle_s) and the Spark group start at once beside the
    rest instead of last, alone."""
    first = ("slow", "spark")  # the Spark tests are two long groups, each on one worker
    slow = {item.path for item in items if any(item.get_closest_marker(m) for m in first)}
    items.sort(key=lambda item: item.path not in slow)  # stable: each module stays whole


def group_for_xdist(items: list[pytest.Item]) -> None:
    """Name each test's group (`worker_groups`) for `--dist loadgroup`.

    loadgroup reads the group after an "@" at the end of the node id. pytest-xdist 3.8 writes
    that suffix (from `xdist_group` marks) to `item._nodeid`, which pytest 9.2 no longer reads
    (it keeps the id in `item._id`), so every test would be scheduled alone; it is written here.
    """
    for item, group in worker_groups(items).items():
        grouped = f"{item.nodeid}@{group}"
        if hasattr(item, "_id"):
            from _pytest.nodeid import coerce_node_id  # pytest >= 9.2

            item._id = coerce_node_id(grouped)
        else:
            item._nodeid = grouped  # type: ignore[attr-defined]
        # Loud if a pytest release moves the id again: loadgroup would spread the group.
        assert item.nodeid == grouped, f"cannot group {item.nodeid} for xdist"


def worker_groups(items: list[pytest.Item]) -> dict[pytest.Item, str]:
    """The tests `--dist loadgroup` must keep on one worker, by group name.

    Spark tests share a local Spark session (a JVM) per worker: they go to two workers, each
    starting one, `spark_batch`'s own tests to one ("spark-batch"), the others' to the other
    ("spark"): together they were the longest chain of `make test`. A module whose tests share
    a module-scoped fixture (a story built once, a broker behind a proxy) keeps them on one
    worker, or each worker would build it again; a module holding a Spark test goes with its
    Spark group.
    """
    by_module: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_module.setdefault(item.nodeid.split("::")[0], []).append(item)
    groups: dict[pytest.Item, str] = {}
    for module, members in by_module.items():
        if any(item.get_closest_marker("spark") for item in members):
            spark = "spark-batch" if module.startswith("tests/spark_batch/") else "spark"
            groups.update(dict.fromkeys(members, spark))
        elif any(_shares_a_fixture(item) for item in members):
            groups.update(dict.fromkeys(members, module))
    return groups


def _shares_a_fixture(item: pytest.Item) -> bool:
    """True if the test uses a module-, package- or class-scoped fixture of the project."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(
        definition.scope in ("module", "package", "class") and "tests" in str(definition.baseid)
        for definitions in info.name2fixturedefs.values()
        for definition in definitions
    )


def is_quick(item: pytest.Item) -> bool:
    return not any(item.get_closest_marker(mark) for mark in SERVICE_MARKS)


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return host == "localhost"


class QuickTierGuard:
    """Patches sockets and process creation; `active()` arms it around one test phase."""

    def __init__(self) -> None:
        self.armed = False
        self.violations: list[str] = []
        self.listening: set[Any] = set()  # addresses bound in this process (ports, unix paths)
        self._lock = threading.Lock()
        self._originals: list[tuple[Any, str, Any]] = []

    def install(self) -> None:
        """Patch once per session; unarmed, the patches only note what this process binds."""
        guard = self
        sock_cls = socket.socket
        bind, connect, connect_ex = sock_cls.bind, sock_cls.connect, sock_cls.connect_ex

        def guarded_bind(sock: socket.socket, address: Any) -> None:
            bind(sock, address)
            guard.note_bound(sock)

        def guarded_connect(sock: socket.socket, address: Any) -> None:
            guard.check_connect(sock, address)
            connect(sock, address)

        def guarded_connect_ex(sock: socket.socket, address: Any) -> int:
            guard.check_connect(sock, address)
            return int(connect_ex(sock, address))

        popen_init = subprocess.Popen.__init__

        def guarded_popen(process: Any, args: Any, *rest: Any, **kwargs: Any) -> None:
            guard.check_process(f"subprocess {args!r}")
            popen_init(process, args, *rest, **kwargs)

        self._patch(sock_cls, "bind", guarded_bind)
        self._patch(sock_cls, "connect", guarded_connect)
        self._patch(sock_cls, "connect_ex", guarded_connect_ex)
        self._patch(subprocess.Popen, "__init__", guarded_popen)
        for name in ("system", "fork", "posix_spawn", "posix_spawnp"):
            if hasattr(os, name):
                self._patch(os, name, self._refusing(name, getattr(os, name)))

    def uninstall(self) -> None:
        for owner, name, original in reversed(self._originals):
            setattr(owner, name, original)
        self._originals.clear()

    def _patch(self, owner: Any, name: str, replacement: Any) -> None:
        self._originals.append((owner, name, getattr(owner, name)))
        setattr(owner, name, replacement)

    def _refusing(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def refusing(*args: Any, **kwargs: Any) -> Any:
            self.check_process(f"os.{name}")
            return original(*args, **kwargs)

        return refusing

    def note_bound(self, sock: socket.socket) -> None:
        try:
            address = sock.getsockname()
        except OSError:
            return
        with self._lock:
            self.listening.add(address[1] if isinstance(address, tuple) else address)

    def check_connect(self, sock: socket.socket, address: Any) -> None:
        if not self.armed:
            return
        if isinstance(address, tuple):
            host, port = str(address[0]), address[1]
            if _loopback(host) and port in self.listening:
                return
            where = f"{host}:{port}"
        else:
            if address in self.listening:
                return
            where = repr(address)
        self._violate(f"connect to {where}, which this process does not serve")

    def check_process(self, what: str) -> None:
        if self.armed:
            self._violate(f"start of a process ({what})")

    def _violate(self, what: str) -> None:
        message = (
            f"a quick-tier test may not {what}: mark it "
            f"(pytest.mark.integration / spark / browser) or use a fake"
        )
        with self._lock:
            self.violations.append(message)
        raise QuickTierViolation(message)

    @contextlib.contextmanager
    def active(self, item: pytest.Item) -> Iterator[None]:
        """Arm the guard for a quick-tier test's phase; raise after it if anything was refused."""
        if not is_quick(item):
            yield
            return
        self.violations.clear()
        self.armed = True
        try:
            yield
        finally:
            self.armed = False
        if self.violations:
            raise QuickTierViolation(self.violations[0])
