"""What a soak run measured: its faults, its minutes, its daemons' resources and its account.

Every time is wall-clock epoch milliseconds (`*_ms`) or, for spans within the run, seconds
since the run started (`*_s`); rates are per second, slopes per hour.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

#: a process life counts for the resource slopes when it lasted this long ...
MIN_LIFE_S = 30 * 60.0
#: ... and its slope is fitted after this much of it (start-up, caches and pools filling)
WARMUP_S = 10 * 60.0
#: how often every daemon's resources are sampled
SAMPLE_EVERY_S = 10.0
#: a count's floor is the least it held over this much of a life, after warm-up and at its end
FLOOR_SPAN_S = 10 * 60.0
#: the local broker's name among the sampled processes: shown with the daemons, not judged
BROKER = "broker"


@dataclass(frozen=True)
class Fault:
    """One fault of the schedule as it ran: `kind` done to `target` from `start_s` to `end_s`."""

    kind: str  # one of `soak.schedule.KINDS`
    target: str  # a daemon's name, "broker", "destination NAME", "redis"
    start_s: float
    end_s: float
    detail: str = ""  # what exactly was done ("SIGKILL pid 4242, restarted in 0.5 s")

    def active(self, start_s: float, end_s: float) -> bool:
        """Whether the fault overlaps the span [start_s, end_s)."""
        return self.start_s < end_s and start_s < self.end_s


@dataclass(frozen=True)
class LagParts:
    """A destination's minute, its p95 lag in two parts as its auditor tables it: before its
    connector took the events in, and the connector's own (taken in to the 2xx). The first
    holds the producer and the broker, and every wait of the pipeline's before a connector
    polled the events: a paused partition, a backlog, the retry tier of an event the retrier
    gave back (taken in again). It says where the lag was, not whose it was."""

    before_connector_ms: float | None
    connector_ms: float | None


@dataclass(frozen=True)
class Minute:
    """One minute of event time, all destinations, as the auditor cuts them: its events' lag,
    from the event's time to the destination's 2xx of its first delivery."""

    start_ms: int
    events: int  # events of this minute answered 2xx (first deliveries)
    p50_ms: float | None  # None: no event of the minute was delivered
    p95_ms: float | None
    p99_ms: float | None
    on_time: bool  # its p95 within `lag_sla_s` (the auditor's "down for lag" otherwise)
    faults: tuple[str, ...] = ()  # "kind target" of every fault active during the minute
    parts: Mapping[str, LagParts] = field(default_factory=dict)  # destination -> its parts
    # the broker alone (`soak.probe`): p95 from a record's producer timestamp to a bare
    # consumer with the connectors' fetch wait (the first partition of each source topic);
    # None: not probed
    broker_p95_ms: float | None = None

    @property
    def fault_active(self) -> bool:
        return bool(self.faults)


@dataclass(frozen=True)
class Sample:
    """One daemon process's resources at one moment."""

    at_s: float
    daemon: str
    pid: int
    rss_mb: float
    fds: int
    threads: int
    kafka_connections: int  # its established TCP connections to the Kafka listener
    tasks: int | None  # asyncio tasks (`hifi_asyncio_tasks`); None when it did not answer
    fd_kinds: Mapping[str, int] = field(default_factory=dict)  # kind (`soak.fds`) -> its fds


@dataclass(frozen=True)
class Floor:
    """The least a count held for two samples running (`soak.resources.held`) over
    `FLOOR_SPAN_S` just after a life's warm-up, and over its last.

    What a daemon has in flight (a request's connection, its task) comes and goes with the
    load and its answer times; what it leaks stays, and lifts the least it ever has. The last
    span of a life that lasted to the end of the run holds its samples at rest, after the drain.
    """

    first: int
    last: int

    @property
    def rise(self) -> int:
        return self.last - self.first


@dataclass(frozen=True)
class Slope:
    """How one process life's resources grew, fitted by least squares after `WARMUP_S`."""

    daemon: str
    pid: int
    life_s: float
    rss_mb_per_h: float
    fds_per_h: float
    threads_per_h: float
    kafka_connections_per_h: float
    tasks_per_h: float | None
    # RSS fitted within the stretches between faults only, each with a level of its own: a
    # step a fault's backlog left (memory the allocators keep) is set aside, a climb is not.
    # None: no stretch long enough to fit.
    rss_mb_per_h_between_faults: float | None = None
    # count name ("fds", "threads", "kafka_connections", "tasks") -> its floors
    floors: Mapping[str, Floor] = field(default_factory=dict)
    # kind of fd (`soak.fds.kind_of`) -> its floors: which kind a rise of the fds' floor was
    fd_floors: Mapping[str, Floor] = field(default_factory=dict)


@dataclass(frozen=True)
class Account:
    """Every event accepted (ingest's 2xx, or acks=all straight to Kafka), by id, at the end."""

    accepted: int
    delivered: int  # distinct ids answered 2xx by a destination
    lost: int  # accepted, neither delivered nor dead-lettered
    duplicates: int  # deliveries beyond the first of an id
    dead_lettered: Mapping[str, int]  # reason -> events in the DLQs (and not delivered)
    duplicate_causes: Mapping[str, int]  # "kind target" of the fault around the repeat -> count
    lost_sample: tuple[str, ...] = ()
    audit_mismatches: tuple[str, ...] = ()  # "DEST MINUTE figure auditor != run"
    # records in the source topics beyond an accepted id's first (a resend after no answer)
    written_again: int = 0

    @property
    def dup_pct(self) -> float:
        return 100.0 * self.duplicates / self.delivered if self.delivered else 0.0


@dataclass(frozen=True)
class StackCapacity:
    """What the calibration measured (`soak.calibrate`): CPU = idle + fixed + rate x per event."""

    cores: int
    idle_cores: float  # the stack's CPU with no load, in cores
    fixed_cores: float  # what any load costs on top of idle, whatever its rate
    cpu_per_event_us: float  # beyond that, every process of the stack counted
    steps: tuple[tuple[float, float], ...] = ()  # (events/s, cores used) of each warm-up step

    @property
    def events_per_s(self) -> float:
        """The rate at which the stack would use every core."""
        spare = max(0.0, self.cores - self.idle_cores - self.fixed_cores)
        return spare / (self.cpu_per_event_us / 1e6) if self.cpu_per_event_us > 0 else 0.0

    def line(self) -> str:
        steps = ", ".join(f"{cores:.2f} cores at {rate:.0f}/s" for rate, cores in self.steps)
        return (
            f"{self.events_per_s:.0f} events/s: {self.cpu_per_event_us:.0f} µs of CPU an event"
            f" and {self.fixed_cores:.2f} cores whatever the rate, {self.idle_cores:.2f} of"
            f" {self.cores} cores used idle ({steps})"
        )


@dataclass(frozen=True)
class SoakResult:
    """A soak run, whole: what the report and its summary line are made of."""

    started_ms: int
    seed: int
    duration_s: float
    lag_sla_s: float
    capacity_events_per_s: float  # the connector's drain measured at the start
    rate_events_per_s: float  # the steady load offered, all sources together
    faults: tuple[Fault, ...]
    minutes: tuple[Minute, ...]
    samples: tuple[Sample, ...]
    slopes: tuple[Slope, ...]
    account: Account
    exits: Mapping[str, int] = field(default_factory=dict)  # daemon -> exits nobody asked for
    stack_capacity: StackCapacity | None = None  # the whole stack's, measured before the run

    @property
    def late_minutes(self) -> int:
        return sum(1 for minute in self.minutes if minute.events and not minute.on_time)

    @property
    def quiet_minutes(self) -> tuple[Minute, ...]:
        """Minutes with deliveries, no fault active and none ended in the minute before: the
        minute after a fault is its to spend (a fault costs its own minutes and the next)."""

        def quiet(minute: Minute) -> bool:
            start_s = (minute.start_ms - self.started_ms) / 1000
            return not any(f.active(start_s - 60.0, start_s + 60.0) for f in self.faults)

        return tuple(m for m in self.minutes if m.events and quiet(m))

    @property
    def on_time_pct(self) -> float:
        counted = [m for m in self.minutes if m.events]
        return 100.0 * sum(m.on_time for m in counted) / len(counted) if counted else 0.0

    @property
    def on_time_pct_no_fault(self) -> float:
        quiet = self.quiet_minutes
        return 100.0 * sum(m.on_time for m in quiet) / len(quiet) if quiet else 0.0

    @property
    def p95_no_fault_ms(self) -> float:
        """The highest p95 of a minute with no fault active (each minute must hold alone)."""
        return max((m.p95_ms or 0.0 for m in self.quiet_minutes), default=0.0)

    @property
    def daemon_slopes(self) -> tuple[Slope, ...]:
        """The slopes of hifi's daemons: the dev broker's growth (it keeps every record) is
        shown beside them, not judged with them."""
        return tuple(s for s in self.slopes if s.daemon != BROKER)

    @property
    def rss_slope_mb_per_h(self) -> float:
        """The steepest RSS slope of a daemon's life long enough to count (0: none was)."""
        return max((s.rss_mb_per_h for s in self.daemon_slopes), default=0.0)

    @property
    def fds_slope_per_h(self) -> float:
        return max((s.fds_per_h for s in self.daemon_slopes), default=0.0)

    def summary_line(self) -> str:
        return (
            f"soak: minutes={round(self.duration_s / 60)} faults={len(self.faults)}"
            f" lost={self.account.lost} dup_pct={self.account.dup_pct:.3f}"
            f" late_minutes={self.late_minutes}"
            f" on_time_pct_no_fault={self.on_time_pct_no_fault:.1f}"
            f" p95_no_fault_ms={self.p95_no_fault_ms:.0f}"
            f" rss_slope_mb_per_h={self.rss_slope_mb_per_h:.1f}"
            f" fds_slope_per_h={self.fds_slope_per_h:.1f}"
        )
