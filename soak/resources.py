"""Each daemon's resources, sampled while the soak runs, and how fast each process life grew.

A leak shows as a slope: RSS, file descriptors, threads, Kafka connections or asyncio tasks that
keep climbing after start-up. Every process is read from /proc (and its task gauge from its
/metrics) every `SAMPLE_EVERY_S`; `slopes` fits one line per process life after `WARMUP_S`, so a
daemon restarted by a fault starts a new life instead of bending the old one.

A daemon that held a backlog (a frozen broker's, an outage's buffer) keeps some of that memory:
the allocators do not give back every page freed. One line through the life reads such a step
as a slope. Beside it, `slopes` fits the RSS within the stretches between faults, each stretch
with a level of its own (`between_faults_per_h`): a step at a fault moves a level, a leak
climbs within every stretch.

A count (fds, threads, Kafka connections, tasks) also follows what is in flight: ingest's fds
are its senders' connections, more of them open while its answers take longer. Its slope reads
a lag that grew as a leak. Each life's `floors` give the least each count held just after
warm-up and at the end: a leaked descriptor or task lifts the floor, one in flight does not.
"""

from __future__ import annotations

import asyncio
import functools
import statistics
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Self

import httpx

from soak import fds
from soak.model import (
    FLOOR_SPAN_S,
    MIN_LIFE_S,
    SAMPLE_EVERY_S,
    WARMUP_S,
    Fault,
    Floor,
    Sample,
    Slope,
)

SCRAPE_TIMEOUT_S = 1.0
#: after a fault ends, this long is its backlog's to work off: not part of a stretch between faults
RECOVERY_S = 120.0
#: a stretch between faults is fitted when it spans this long at least
MIN_STRETCH_S = 5 * 60.0
TASKS_GAUGE = "hifi_asyncio_tasks"


def sample_process(
    daemon: str,
    pid: int,
    *,
    at_s: float,
    kafka_ports: Collection[int],
    tasks: int | None,
    port_names: Mapping[int, str] | None = None,
) -> Sample | None:
    """The process's resources now, from /proc; None when it is gone (or a zombie).
    `port_names` name the ports its fds' kinds are told by (`soak.fds.kind_of`)."""
    proc = Path(f"/proc/{pid}")
    try:
        status = _status_fields(proc.joinpath("status").read_text())
        if "VmRSS" not in status:  # a zombie keeps its status, not its memory
            return None
        fd_targets = fds.targets(proc / "fd")
        tables = [proc.joinpath("net", "tcp").read_text(), _read_if_any(proc / "net" / "tcp6")]
    except (FileNotFoundError, ProcessLookupError):
        return None
    names = {**(port_names or {}), **dict.fromkeys(kafka_ports, fds.KAFKA)}
    kinds = fds.kinds(fd_targets, fds.tcp_sockets(tables), names)
    return Sample(
        at_s=at_s,
        daemon=daemon,
        pid=pid,
        rss_mb=int(status["VmRSS"].split()[0]) / 1024,  # "123456 kB"
        fds=len(fd_targets),
        threads=int(status["Threads"]),
        kafka_connections=kinds.get(f"tcp to {fds.KAFKA}", 0),  # established ones only
        tasks=tasks,
        fd_kinds=kinds,
    )


def _status_fields(text: str) -> dict[str, str]:
    fields = (line.partition(":") for line in text.splitlines())
    return {name: value.strip() for name, _, value in fields}


def _read_if_any(path: Path) -> str:
    """A /proc/net table the kernel may lack (tcp6 without IPv6): empty then."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


async def scrape_tasks(client: httpx.AsyncClient, metrics_port: int) -> int | None:
    """The daemon's asyncio tasks (its `hifi_asyncio_tasks`, summed); None when it does not say."""
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    try:
        response = await client.get(url, timeout=SCRAPE_TIMEOUT_S)
    except httpx.HTTPError:
        return None
    if not response.is_success:
        return None
    values = []
    for line in response.text.splitlines():
        if line.startswith((f"{TASKS_GAUGE}{{", f"{TASKS_GAUGE} ")):
            value = line.rpartition("}")[2] if "{" in line else line.removeprefix(TASKS_GAUGE)
            try:
                values.append(float(value.split()[0]))  # a timestamp may follow
            except (IndexError, ValueError):
                return None
    return round(sum(values)) if values else None


class ResourceSampler:
    """Samples every daemon process into `samples` every `every_s`, from enter to exit.

    `processes` names the processes of the moment (daemon, pid, metrics port; 0: no port known),
    so a daemon restarted under a new pid is followed; `started` is the run's `time.monotonic()`
    origin, from which each sample's `at_s` counts.
    """

    def __init__(
        self,
        processes: Callable[[], Iterable[tuple[str, int, int]]],
        kafka_ports: Collection[int],
        started: float,
        every_s: float = SAMPLE_EVERY_S,
        port_names: Mapping[int, str] | None = None,
    ) -> None:
        self.samples: list[Sample] = []
        self._processes = processes
        self._kafka_ports = frozenset(kafka_ports)
        self._port_names = dict(port_names or {})
        self._started = started
        self._every_s = every_s
        self._client: httpx.AsyncClient | None = None
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Self:
        self._client = httpx.AsyncClient(trust_env=False)  # loopback: never through a proxy
        self._task = asyncio.create_task(self._run(self._client), name="soak-resource-sampler")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        task, client = self._task, self._client
        self._task = self._client = None
        try:
            if task is not None:
                task.cancel()
                await asyncio.wait([task])
                if not task.cancelled():
                    task.result()  # the sampler crashed: say so here
        finally:
            if client is not None:
                await client.aclose()

    async def _run(self, client: httpx.AsyncClient) -> None:
        next_s = time.monotonic()
        while True:
            await self._sample(client)
            next_s = max(next_s + self._every_s, time.monotonic())
            await asyncio.sleep(next_s - time.monotonic())

    async def _sample(self, client: httpx.AsyncClient) -> None:
        processes = list(self._processes())
        tasks = await asyncio.gather(*(_tasks_of(client, port) for _, _, port in processes))
        at_s = time.monotonic() - self._started
        for (daemon, pid, _), count in zip(processes, tasks, strict=True):
            sample = sample_process(
                daemon,
                pid,
                at_s=at_s,
                kafka_ports=self._kafka_ports,
                tasks=count,
                port_names=self._port_names,
            )
            if sample is not None:
                self.samples.append(sample)


async def _tasks_of(client: httpx.AsyncClient, metrics_port: int) -> int | None:
    return await scrape_tasks(client, metrics_port) if metrics_port else None


def slopes(
    samples: Iterable[Sample],
    *,
    faults: Sequence[Fault] = (),
    warmup_s: float = WARMUP_S,
    min_life_s: float = MIN_LIFE_S,
) -> list[Slope]:
    """One slope per process life of at least `min_life_s`, fitted after its first `warmup_s`,
    and its RSS slope between `faults`.

    A life is one (daemon, pid); lives come by daemon, then by their first sample.
    """
    lives: dict[tuple[str, int], list[Sample]] = {}
    for sample in samples:
        lives.setdefault((sample.daemon, sample.pid), []).append(sample)
    fitted = []
    for (daemon, pid), life in lives.items():
        life.sort(key=lambda sample: sample.at_s)
        first_s, life_s = life[0].at_s, life[-1].at_s - life[0].at_s
        steady = [sample for sample in life if sample.at_s >= first_s + warmup_s]
        if life_s < min_life_s or not _fittable(steady):  # too short to count, or to fit
            continue
        with_tasks = [(s.at_s, s.tasks) for s in steady if s.tasks is not None]
        slope = Slope(
            daemon=daemon,
            pid=pid,
            life_s=life_s,
            rss_mb_per_h=_per_h([(s.at_s, s.rss_mb) for s in steady]),
            fds_per_h=_per_h([(s.at_s, s.fds) for s in steady]),
            threads_per_h=_per_h([(s.at_s, s.threads) for s in steady]),
            kafka_connections_per_h=_per_h([(s.at_s, s.kafka_connections) for s in steady]),
            tasks_per_h=_per_h(with_tasks) if len(with_tasks) >= 2 else None,
            rss_mb_per_h_between_faults=between_faults_per_h(
                [(s.at_s, s.rss_mb) for s in steady], faults
            ),
            floors=floors(steady),
            fd_floors=fd_floors(steady),
        )
        fitted.append((first_s, slope))
    fitted.sort(key=lambda pair: (pair[1].daemon, pair[0]))
    return [slope for _, slope in fitted]


#: the counts whose floors a life keeps, by their name in `Slope.floors`
COUNTS: dict[str, Callable[[Sample], int | None]] = {
    "fds": lambda s: s.fds,
    "threads": lambda s: s.threads,
    "kafka_connections": lambda s: s.kafka_connections,
    "tasks": lambda s: s.tasks,
}


def floors(steady: Sequence[Sample], *, span_s: float = FLOOR_SPAN_S) -> dict[str, Floor]:
    """Each count's least level (`held`) over the first `span_s` of `steady` (a life after its
    warm-up) and over its last, each span at most half of it; a count never read is left out."""
    found = {}
    for name, of in COUNTS.items():
        if (floor := _floor(steady, of, span_s)) is not None:
            found[name] = floor
    return found


def fd_floors(steady: Sequence[Sample], *, span_s: float = FLOOR_SPAN_S) -> dict[str, Floor]:
    """`floors` of each kind of fd (`Sample.fd_kinds`; none of a kind in a sample: 0), over the
    samples that name their kinds."""
    named = [sample for sample in steady if sample.fd_kinds]
    if not named:
        return {}
    found = {}
    for kind in sorted({kind for sample in named for kind in sample.fd_kinds}):
        floor = _floor(named, functools.partial(_fds_of_kind, kind), span_s)
        if floor is not None:
            found[kind] = floor
    return found


def _fds_of_kind(kind: str, sample: Sample) -> int:
    return sample.fd_kinds.get(kind, 0)


def _floor(
    steady: Sequence[Sample], of: Callable[[Sample], int | None], span_s: float
) -> Floor | None:
    first_s, last_s = steady[0].at_s, steady[-1].at_s
    span_s = min(span_s, (last_s - first_s) / 2)
    early = [v for s in steady if s.at_s <= first_s + span_s and (v := of(s)) is not None]
    late = [v for s in steady if s.at_s >= last_s - span_s and (v := of(s)) is not None]
    return Floor(held(early), held(late)) if early and late else None


def held(values: Sequence[int]) -> int:
    """The least level `values` (in time order) held for two samples running; a lone sample's
    own value. A count that dips for one sample (a task ended, the next not yet started) was
    not at rest there; a leaked descriptor or task is in every sample after it."""
    if len(values) < 2:
        return values[0]
    return min(max(value, after) for value, after in pairwise(values))


def _fittable(steady: Sequence[Sample]) -> bool:
    """A line needs samples at two moments at least."""
    return len({sample.at_s for sample in steady}) >= 2


def between_faults_per_h(
    points: Sequence[tuple[float, float]],
    faults: Sequence[Fault],
    *,
    after_s: float = RECOVERY_S,
    min_stretch_s: float = MIN_STRETCH_S,
) -> float | None:
    """The slope per hour of (second, value) points within the stretches between faults, one
    level per stretch (the pooled within-stretch least-squares slope).

    A fault's span, and `after_s` after it (its backlog worked off), belongs to no stretch;
    a stretch shorter than `min_stretch_s` is left out. None when no stretch is left."""
    spans = sorted((f.start_s, f.end_s + after_s) for f in faults)
    stretches: list[list[tuple[float, float]]] = [[]]
    for at_s, value in sorted(points):
        if any(start_s <= at_s < end_s for start_s, end_s in spans):
            if stretches[-1]:
                stretches.append([])
            continue
        stretches[-1].append((at_s, value))
    fitted = [s for s in stretches if s and s[-1][0] - s[0][0] >= min_stretch_s]
    if not fitted:
        return None
    covariance = variance = 0.0
    for stretch in fitted:
        mean_s = statistics.fmean(at_s for at_s, _ in stretch)
        mean_value = statistics.fmean(value for _, value in stretch)
        covariance += sum((at_s - mean_s) * (value - mean_value) for at_s, value in stretch)
        variance += sum((at_s - mean_s) ** 2 for at_s, _ in stretch)
    return covariance / variance * 3600 if variance else None


def _per_h(points: Sequence[tuple[float, float]]) -> float:
    """The least-squares slope through (second, value) points, per hour."""
    at_s, values = zip(*points, strict=True)
    return statistics.linear_regression(at_s, values).slope * 3600
