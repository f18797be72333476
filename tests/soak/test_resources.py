"""The soak's resource figures: a real process read from /proc, a real /metrics scraped, and
the slopes fitted to each process life."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator

import httpx
import pytest

from soak.model import MIN_LIFE_S, WARMUP_S, Fault, Floor, Sample
from soak.resources import (
    ResourceSampler,
    between_faults_per_h,
    held,
    sample_process,
    scrape_tasks,
    slopes,
)

# Connects to the listener (argv: host, port), starts a thread, says "ready"; then, for each
# number it reads, opens that many more files and says "opened"; exits at the end of stdin.
CHILD = """
import os, socket, sys, threading
connection = socket.create_connection((sys.argv[1], int(sys.argv[2])))
threading.Thread(target=threading.Event().wait, daemon=True).start()
print("ready", flush=True)
files = []
for line in sys.stdin:
    files += [open(os.devnull) for _ in range(int(line))]
    print("opened", flush=True)
"""
NO_SUCH_PID = 2**22 + 1  # above the largest pid_max Linux allows
TASKS_BODY = b"""# HELP hifi_asyncio_tasks asyncio tasks alive
# TYPE hifi_asyncio_tasks gauge
hifi_asyncio_tasks{component="connector"} 12.0
hifi_asyncio_tasks_created_total 99.0
"""


class Child:
    """A Python child process holding a connection to the test's listener, a thread and files."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self.pid = process.pid
        assert self._line() == b"ready\n"

    def open_files(self, count: int) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(b"%d\n" % count)
        self.process.stdin.flush()
        assert self._line() == b"opened\n"

    def _line(self) -> bytes:
        assert self.process.stdout is not None
        return self.process.stdout.readline()


@pytest.fixture
def listener(request: pytest.FixtureRequest) -> Iterator[socket.socket]:
    """A listening TCP socket on loopback (IPv4 unless parametrized): the child's "Kafka"."""
    host: str = getattr(request, "param", "127.0.0.1")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.create_server((host, 0), family=family) as server:
        yield server


@pytest.fixture
def child(listener: socket.socket, processes: list[subprocess.Popen[bytes]]) -> Iterator[Child]:
    host, port = listener.getsockname()[:2]
    command = [sys.executable, "-c", CHILD, host, str(port)]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    processes.append(process)
    try:
        yield Child(process)
    finally:
        for pipe in (process.stdin, process.stdout):
            if pipe is not None:
                pipe.close()  # the child exits at the end of its stdin


@contextlib.asynccontextmanager
async def metrics_server(body: bytes) -> AsyncIterator[int]:
    """A loopback HTTP server answering every request with `body`; yields its port."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # the client may go away mid-request (a sampler leaving)
        with (
            contextlib.closing(writer),
            contextlib.suppress(asyncio.IncompleteReadError, ConnectionError),
        ):
            await reader.readuntil(b"\r\n\r\n")
            head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
            writer.write(head % len(body) + body)
            await writer.drain()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1]


# --- sample_process -----------------------------------------------------------------------


@pytest.mark.parametrize("listener", ["127.0.0.1", "::1"], indirect=True)
def test_sample_reads_memory_files_threads_and_kafka_connections(
    listener: socket.socket, child: Child
) -> None:
    """RSS in MB, open files, threads and the connections to a Kafka port come from /proc."""
    kafka_port = listener.getsockname()[1]
    first = sample_process("connector", child.pid, at_s=1.5, kafka_ports={kafka_port}, tasks=7)
    child.open_files(5)
    second = sample_process("connector", child.pid, at_s=2.5, kafka_ports={9092}, tasks=None)
    assert first is not None
    assert second is not None
    assert (first.daemon, first.pid, first.at_s, first.tasks) == ("connector", child.pid, 1.5, 7)
    assert 1 < first.rss_mb < 1000  # a Python interpreter, counted in MB (not kB, not bytes)
    assert first.threads >= 2
    assert second.fds == first.fds + 5
    assert first.kafka_connections == 1
    assert second.kafka_connections == 0  # the child talks to no one on 9092


def test_sample_of_an_exited_process_is_none(processes: list[subprocess.Popen[bytes]]) -> None:
    """A process that has exited, reaped or still a zombie, or never was, gives no sample."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    processes.append(process)
    os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: a zombie
    assert sample_process("c", process.pid, at_s=0.0, kafka_ports=(), tasks=None) is None
    process.wait()
    assert sample_process("c", process.pid, at_s=0.0, kafka_ports=(), tasks=None) is None
    assert sample_process("c", NO_SUCH_PID, at_s=0.0, kafka_ports=(), tasks=None) is None


# --- scrape_tasks ---------------------------------------------------------------------------


async def test_scrape_tasks_sums_the_gauge() -> None:
    """The `hifi_asyncio_tasks` series are summed; a metric merely named alike is not."""
    two_series = TASKS_BODY + b'hifi_asyncio_tasks{component="auditor"} 3 1700000000000\n'
    async with httpx.AsyncClient(trust_env=False) as client:
        async with metrics_server(TASKS_BODY) as port:
            assert await scrape_tasks(client, port) == 12
        async with metrics_server(two_series) as port:
            assert await scrape_tasks(client, port) == 15


async def test_scrape_tasks_is_none_without_an_answer_or_the_gauge() -> None:
    """A closed port, or a /metrics without the gauge, gives None."""
    async with httpx.AsyncClient(trust_env=False) as client:
        with socket.socket() as bound:  # bound, never listening: connections are refused
            bound.bind(("127.0.0.1", 0))
            assert await scrape_tasks(client, bound.getsockname()[1]) is None
        async with metrics_server(b"hifi_asyncio_tasks_created_total 99.0\n") as port:
            assert await scrape_tasks(client, port) is None


# --- ResourceSampler ------------------------------------------------------------------------


async def test_sampler_samples_every_process_it_is_given(
    listener: socket.socket, child: Child
) -> None:
    """Each tick samples every live process, its tasks from its /metrics; a gone one is skipped."""
    kafka_port = listener.getsockname()[1]
    async with metrics_server(TASKS_BODY) as metrics_port:
        processes = [("connector", child.pid, metrics_port), ("auditor", NO_SUCH_PID, 0)]
        async with ResourceSampler(
            lambda: processes, kafka_ports=[kafka_port], started=time.monotonic(), every_s=0.05
        ) as sampler:
            async with asyncio.timeout(30):
                while len(sampler.samples) < 3:
                    await asyncio.sleep(0.05)
    assert {(s.daemon, s.pid) for s in sampler.samples} == {("connector", child.pid)}
    assert {(s.kafka_connections, s.tasks) for s in sampler.samples} == {(1, 12)}
    times_s = [s.at_s for s in sampler.samples]
    assert times_s == sorted(set(times_s))
    assert times_s[0] >= 0


async def test_sampler_leaves_no_task_behind(child: Child) -> None:
    """On exit the sampler's task (and any scrape it started) is cancelled and awaited."""
    before = asyncio.all_tasks()
    async with ResourceSampler(
        lambda: [("connector", child.pid, 0)], kafka_ports=(), started=0.0, every_s=0.05
    ) as sampler:
        async with asyncio.timeout(30):
            while len(sampler.samples) < 2:
                await asyncio.sleep(0.05)
    assert asyncio.all_tasks() - before == set()


async def test_sampler_surfaces_its_crash_on_exit() -> None:
    """A sampler that failed says so when it is left, instead of stopping in silence."""

    def broken() -> list[tuple[str, int, int]]:
        raise RuntimeError("no process list")

    with pytest.raises(RuntimeError, match="no process list"):
        async with ResourceSampler(broken, kafka_ports=(), started=0.0):
            await asyncio.sleep(0)  # the sampler's first step runs, and fails


# --- slopes ---------------------------------------------------------------------------------


def _life(
    pid: int,
    *,
    daemon: str = "connector",
    start_s: float = 0.0,
    minutes: int = 60,
    rss_mb: Callable[[float], float] = lambda life_s: 100.0,
    fds: Callable[[float], int] = lambda life_s: 40,
    tasks: Callable[[float], int | None] = lambda life_s: 12,
) -> list[Sample]:
    """One process life sampled every 10 s; the figures as functions of the seconds lived."""
    return [
        Sample(
            at_s=start_s + life_s,
            daemon=daemon,
            pid=pid,
            rss_mb=rss_mb(life_s),
            fds=fds(life_s),
            threads=8,
            kafka_connections=3,
            tasks=tasks(life_s),
        )
        for life_s in range(0, minutes * 60 + 1, 10)
    ]


def test_slope_is_the_growth_per_hour() -> None:
    """5 MB more every 10 minutes is 30 MB/h; one file more every 10 minutes about 6/h."""
    life = _life(7, rss_mb=lambda life_s: 100 + life_s * 5 / 600, fds=lambda s: 40 + int(s // 600))
    (slope,) = slopes(life)
    assert (slope.daemon, slope.pid, slope.life_s) == ("connector", 7, 3600)
    assert slope.rss_mb_per_h == pytest.approx(30.0, abs=1e-6)
    assert slope.fds_per_h == pytest.approx(6.0, rel=0.1)
    assert (slope.threads_per_h, slope.kafka_connections_per_h, slope.tasks_per_h) == (0, 0, 0)


def test_a_life_shorter_than_min_life_is_left_out() -> None:
    """A process that lived 10 minutes less than `MIN_LIFE_S` gives no slope; 10 more does."""
    min_life_minutes = int(MIN_LIFE_S // 60)
    short, long = _life(1, minutes=min_life_minutes - 10), _life(2, minutes=min_life_minutes + 10)
    lives = slopes(short + long)
    assert [slope.pid for slope in lives] == [2]


def test_the_warm_up_does_not_count() -> None:
    """A jump during the first `WARMUP_S` (pools, caches filling) bends no slope."""
    life = _life(7, rss_mb=lambda life_s: 100.0 if life_s < WARMUP_S else 500.0)
    assert [slope.rss_mb_per_h for slope in slopes(life)] == [0.0]
    assert slopes(life, warmup_s=0)[0].rss_mb_per_h > 100


def test_each_process_life_has_its_slope_in_order() -> None:
    """Lives come by daemon, then by their start; a restarted daemon's new pid is a new life."""
    samples = (
        _life(20, start_s=0.0)
        + _life(10, start_s=4000.0, rss_mb=lambda life_s: 50 + life_s / 360)
        + _life(30, daemon="auditor", start_s=100.0)
    )
    lives = slopes(reversed(samples))
    assert [(slope.daemon, slope.pid) for slope in lives] == [
        ("auditor", 30),
        ("connector", 20),
        ("connector", 10),
    ]
    assert [slope.rss_mb_per_h for slope in lives] == pytest.approx([0.0, 0.0, 10.0])


def test_tasks_slope_needs_two_answers() -> None:
    """Without two samples carrying the task count, its slope is None; the others still fit."""
    life = _life(7, tasks=lambda life_s: 12 if life_s == 3600 else None)
    (slope,) = slopes(life)
    assert slope.tasks_per_h is None
    assert slope.rss_mb_per_h == 0.0


# --- between faults -------------------------------------------------------------------------

# the broker frozen from minute 30 to 30:15; a fault elsewhere from minute 45 to 46
FAULTS = (
    Fault("broker_frozen", "broker", 1800.0, 1815.0),
    Fault("kill9", "retrier-plain", 2700.0, 2760.0),
)


def _stepped(life_s: float) -> float:
    """Flat at 170 MB, then 15 MB more from the freeze on (the backlog's memory, kept)."""
    return 170.0 + (15.0 if life_s >= 1800 else 0.0)


def test_a_step_at_a_fault_is_a_slope_to_the_fit_and_none_between_faults() -> None:
    """One line through the life reads a kept step as a climb; the stretches between the
    faults, each at its own level, read it as flat."""
    (slope,) = slopes(_life(7, rss_mb=_stepped), faults=FAULTS)
    assert slope.rss_mb_per_h > 5
    assert slope.rss_mb_per_h_between_faults == pytest.approx(0.0, abs=1e-9)


def test_a_leak_climbs_between_faults_too() -> None:
    """30 MB/h on top of the same step: between the faults it reads 30 MB/h."""
    (slope,) = slopes(
        _life(7, rss_mb=lambda life_s: _stepped(life_s) + life_s * 30 / 3600), faults=FAULTS
    )
    assert slope.rss_mb_per_h_between_faults == pytest.approx(30.0, rel=1e-6)


def test_a_step_within_a_stretch_is_not_set_aside() -> None:
    """A step with no fault near it (minute 40) is part of its stretch's slope."""
    (slope,) = slopes(
        _life(7, rss_mb=lambda life_s: 170.0 + (15.0 if life_s >= 2400 else 0.0)), faults=FAULTS
    )
    assert (slope.rss_mb_per_h_between_faults or 0.0) > 5


def test_with_no_fault_between_faults_is_the_fitted_slope() -> None:
    life = _life(7, rss_mb=lambda life_s: 100 + life_s * 5 / 600)
    (slope,) = slopes(life)
    assert slope.rss_mb_per_h_between_faults == pytest.approx(slope.rss_mb_per_h)


def test_stretches_too_short_to_fit_are_left_out() -> None:
    """A fault every 5 minutes leaves stretches of 3 minutes: nothing to fit between them."""
    every_5_min = [Fault("kill9", "x", start_s, start_s + 1) for start_s in range(0, 4000, 300)]
    (slope,) = slopes(_life(7, rss_mb=_stepped), faults=every_5_min)
    assert slope.rss_mb_per_h_between_faults is None
    assert between_faults_per_h([(0.0, 1.0), (600.0, 2.0)], ()) == pytest.approx(6.0)
    assert between_faults_per_h([(0.0, 1.0), (60.0, 2.0)], ()) is None


# --- floors ---------------------------------------------------------------------------------


def _in_flight(life_s: float, *, leaked: int = 0) -> int:
    """Ingest's fds: 17 of its own, and connections in flight that grow with its answer times
    (0-3 at first, 0-11 by the end, each for two samples; none in the last minute, at rest),
    plus `leaked`."""
    resting = life_s >= 3540
    in_flight = 0 if resting else int(life_s // 20) % (4 + int(life_s // 450))
    return 17 + in_flight + (leaked if life_s >= 1200 else 0)


def test_connections_in_flight_climb_as_fitted_but_their_floor_holds() -> None:
    """More in flight as answers slow reads as a slope, and the least at the end is where it was."""
    (slope,) = slopes(_life(7, fds=_in_flight))
    assert slope.fds_per_h > 1.0
    assert slope.floors["fds"] == Floor(17, 17)
    assert slope.floors["threads"].rise == slope.floors["kafka_connections"].rise == 0


def test_a_leaked_descriptor_lifts_the_floor_however_small_its_slope() -> None:
    """One fd that stays from minute 20 on: the least at the end is one more than after warm-up."""
    (slope,) = slopes(_life(7, fds=lambda life_s: _in_flight(life_s, leaked=1)))
    assert slope.floors["fds"] == Floor(17, 18)
    assert slope.floors["fds"].rise == 1


def test_a_dip_of_one_sample_is_not_a_floor() -> None:
    """45 tasks in one sample just after warm-up and 46 in every other: the floor holds at 46.
    45 in two samples running is a level the count held, and the rise to 46 is one."""
    (slope,) = slopes(_life(7, tasks=lambda life_s: 45 if life_s == 900 else 46))
    assert slope.floors["tasks"] == Floor(46, 46)
    (slope,) = slopes(_life(7, tasks=lambda life_s: 45 if life_s in (900, 910) else 46))
    assert slope.floors["tasks"] == Floor(45, 46)
    assert (held([3]), held([5, 4, 5]), held([5, 4, 4, 5])) == (3, 5, 4)


def test_a_count_never_read_has_no_floor() -> None:
    """A daemon whose /metrics never answered has no tasks floor, only the others."""
    (slope,) = slopes(_life(7, tasks=lambda life_s: None))
    assert "tasks" not in slope.floors
    assert set(slope.floors) == {"fds", "threads", "kafka_connections"}
