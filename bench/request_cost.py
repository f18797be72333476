"""The connector's CPU per HTTP request on a tenant destination, user and system time apart.

Each drain: a fresh broker, a topic pre-filled with `--events` events of 1,000 tenants with
Zipf traffic (`bench.lookups`, tenant lookups from a private redis-server), and the connector
draining it with one of the `--values` of `--vary`: `max_batch_records` (the events of a
request capped, the buffer at its default) or `buffer_records` (the fewer events it holds,
the fewer per request; its intake also pauses more often). Fewer events per request, more
requests for the same events. The connector's user and system CPU is read from /proc every
50 ms and counted from the first delivery to the last.

Over a version's drains, CPU = a + b * requests (least squares; the events are the same in
each): `b` is the CPU per request, `a` / events the CPU per event, for user, system and both.
With more than one `--tree` the versions alternate drain by drain (each one's connector runs
from its source tree, put first on `PYTHONPATH`, as in `bench.cpu_ab`), so an A/B ratio
comes from one run on one machine:

    git worktree add --detach /tmp/before COMMIT
    .venv/bin/python -m bench.request_cost --tree . --tree /tmp/before \
        --vary max_batch_records --values 500,20 --rounds 3

`--attach 'strace -c -f -o /tmp/{label}.txt -p {pid}'` runs a command on each connector
once it is ready, until it exits (`{pid}`, `{label}`: tree, setting and drain); the requests
made meanwhile are printed, for per-request counts. The last line is
`bench-request-cost: TREE per_request_us=B (user U, sys S) per_event_us=E` for each tree.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import click
import redis

from bench import load, lookups, processes
from bench.catalog import DEST, write_catalog
from bench.measure import cpu_between
from bench.receipts import DeliveriesTail
from devstack.broker import LocalBroker
from devstack.redis import RedisServer
from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings
from hifi.logging import configure_logging
from tenants.keys import tenants_key

THIS_TREE = Path(__file__).resolve().parent.parent
PARTITIONS = 4
TOPIC = "cost.lookups"
_SAMPLE_S = 0.05
_IDLE_EXIT_S = 3.0
_DRAIN_TIMEOUT_S = 900.0
_REQUESTS_METRIC = f'hifi_connector_requests_total{{dest="{DEST}",status_class="2xx"}}'
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
_PYTHONPATH = [path for path in os.environ.get("PYTHONPATH", "").split(os.pathsep) if path]


@dataclass(frozen=True)
class Drain:
    """One drain by one version's connector: what it delivered and its CPU meanwhile."""

    tree: str
    setting: str  # NAME=VALUE varied
    delivered: int
    requests: int
    wall_s: float  # from the first delivery to the last
    user_s: float
    sys_s: float

    @property
    def cpu_s(self) -> float:
        return self.user_s + self.sys_s

    def line(self) -> str:
        per_request = self.delivered / self.requests if self.requests else 0.0
        per_event_us = self.cpu_s / self.delivered * 1e6 if self.delivered else 0.0
        return (
            f"{self.tree:>12} {self.setting:>24}: {self.requests:>6} requests"
            f" ({per_request:5.1f} events each), {self.delivered / self.wall_s:7.0f} events/s,"
            f" user {self.user_s:5.2f} s, sys {self.sys_s:5.2f} s,"
            f" {per_event_us:5.1f} µs per event"
        )


def _cpu_ticks(pid: int) -> tuple[int, int] | None:
    """(user, system) CPU ticks of a live process; None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # after "pid (comm)": state is field 3
    return int(fields[11]), int(fields[12])


async def _watch(
    connector: processes.ConnectorProcess, attach: str | None, label: str
) -> tuple[list[tuple[float, float]], list[tuple[float, float]], int]:
    """Sample the connector's user and system CPU (and count its 2xx requests) until it exits;
    with `attach`, run that command on it from its readiness to its exit."""
    user: list[tuple[float, float]] = []
    system: list[tuple[float, float]] = []
    requests = 0
    attached: asyncio.subprocess.Process | None = None
    last_scrape_s = time.monotonic()
    while connector.running():
        ticks = _cpu_ticks(connector.pid)
        if ticks is not None:
            now_ms = time.time() * 1000
            user.append((now_ms, ticks[0] / _TICKS_PER_S))
            system.append((now_ms, ticks[1] / _TICKS_PER_S))
        if attach and attached is None and await connector.is_ready():
            command = attach.format(pid=connector.pid, label=label)
            attached = await asyncio.create_subprocess_exec(*shlex.split(command))
            counted = await asyncio.to_thread(connector.scrape)
            print(f"   attached at {int(counted.get(_REQUESTS_METRIC, 0))} requests: {command}")
        if time.monotonic() - last_scrape_s >= 1.0:
            last_scrape_s = time.monotonic()
            counted = await asyncio.to_thread(connector.scrape)
            requests = int(counted.get(_REQUESTS_METRIC, requests))
        await asyncio.sleep(_SAMPLE_S)
    connector.stop()
    if attached is not None:
        await asyncio.wait_for(attached.wait(), 60)
    return user, system, requests


async def drain(
    work: Path,
    tree: str,
    setting: tuple[str, int],
    events: int,
    env: dict[str, str],
    attach: str | None,
) -> Drain:
    """A fresh broker, the Zipf topic, and the connector of `tree` draining it with `setting`
    (`buffer_records` or `max_batch_records`, its value)."""
    work.mkdir(parents=True, exist_ok=True)
    name, value = setting
    label = f"{Path(tree).name}-{name}-{value}-{work.name}"
    with LocalBroker(log_path=work / "broker.log") as broker:
        settings = KafkaSettings(bootstrap=broker.bootstrap)
        await kafka_admin.ensure_topics(settings, [TOPIC], partitions=PARTITIONS)
        tenants = load.Tenants(lookups.TENANTS, lookups.ZIPF_S)
        await load.prefill(
            settings, TOPIC, partitions=PARTITIONS, events=events, prefix=TOPIC, tenants=tenants
        )
        deliveries = work / "deliveries.ndjson"
        with processes.destination(deliveries, work / "destination.log") as url:
            write_catalog(
                work,
                url=url,
                topics=[TOPIC],
                lookups=True,
                buffer_records=value if name == "buffer_records" else None,
                max_batch_records=value if name == "max_batch_records" else None,
            )
            connector = processes.ConnectorProcess(
                catalog_dir=work,
                dest=DEST,
                bootstrap=broker.bootstrap,
                log_path=work / "connector.log",
                until_idle_s=_IDLE_EXIT_S,
                env={**env, "PYTHONPATH": os.pathsep.join([tree, *_PYTHONPATH])},
            )
            connector.start()
            try:
                watched = _watch(connector, attach, label)
                user, system, requests = await asyncio.wait_for(watched, _DRAIN_TIMEOUT_S)
            except RuntimeError as exc:
                log = (work / "connector.log").read_text(errors="replace")
                raise RuntimeError(f"{exc}: {log[-2000:]}") from exc
            finally:
                with contextlib.suppress(RuntimeError):  # already stopped, or failed above
                    connector.stop()
    tail = DeliveriesTail(deliveries)
    tail.read()
    run = tail.runs.get(TOPIC)
    received = run.received_ms if run else []
    if not received:
        raise RuntimeError(f"nothing delivered; see {work / 'connector.log'}")
    first_ms, last_ms = min(received), max(received)
    return Drain(
        tree=Path(tree).name,
        setting=f"{name}={value}",
        delivered=tail.delivered(TOPIC),
        requests=requests,
        wall_s=(last_ms - first_ms) / 1000,
        user_s=cpu_between(user, first_ms, last_ms),
        sys_s=cpu_between(system, first_ms, last_ms),
    )


def fit(requests: list[int], cpu_s: list[float]) -> tuple[float, float]:
    """(a, b) of cpu = a + b * requests, least squares; b in seconds per request."""
    slope, intercept = statistics.linear_regression(requests, cpu_s)
    return intercept, slope


def summary(tree: str, drains: list[Drain], events: int) -> str:
    """A tree's fitted CPU per request (user, system) and per event."""
    requests = [run.requests for run in drains]
    _, user_b = fit(requests, [run.user_s for run in drains])
    _, sys_b = fit(requests, [run.sys_s for run in drains])
    intercept, both_b = fit(requests, [run.cpu_s for run in drains])
    return (
        f"bench-request-cost: {tree} per_request_us={both_b * 1e6:.0f}"
        f" (user {user_b * 1e6:.0f}, sys {sys_b * 1e6:.0f}) per_event_us={intercept / events * 1e6:.1f}"
    )


async def _run(
    trees: list[str],
    settings: list[tuple[str, int]],
    events: int,
    rounds: int,
    attach: str | None,
) -> dict[str, list[Drain]]:
    drains: dict[str, list[Drain]] = {Path(tree).name: [] for tree in trees}
    with tempfile.TemporaryDirectory(prefix="hifi-request-cost-") as tmp, RedisServer() as server:
        client = redis.Redis.from_url(server.url)
        try:
            client.hset(tenants_key(DEST), mapping=lookups.entries())  # type: ignore[arg-type]
        finally:
            client.close()
        count = 0
        for _ in range(rounds):
            for setting in settings:
                for tree in trees:
                    count += 1
                    env = {"HIFI_REDIS_URL": server.url, "HIFI_STATE_DIR": f"{tmp}/state{count}"}
                    work = Path(tmp) / f"drain{count}"
                    # `python -m` puts the working directory first on the path: run from the tree
                    with contextlib.chdir(tree):
                        result = await drain(work, tree, setting, events, env, attach)
                    drains[result.tree].append(result)
                    print(result.line(), flush=True)
    return drains


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--tree",
    "trees",
    multiple=True,
    type=click.Path(file_okay=False, exists=True, resolve_path=True),
    help="A source tree whose connector drains (repeat to alternate versions); this one if none.",
)
@click.option(
    "--vary",
    type=click.Choice(["max_batch_records", "buffer_records"]),
    default="max_batch_records",
    show_default=True,
)
@click.option("--values", default="500,50,20", show_default=True, help="Comma-separated.")
@click.option("--events", type=click.IntRange(10_000), default=200_000, show_default=True)
@click.option("--rounds", type=click.IntRange(1, 10), default=1, show_default=True)
@click.option("--attach", default=None, help="A command run on each connector: {pid}, {label}.")
def main(
    trees: tuple[str, ...], vary: str, values: str, events: int, rounds: int, attach: str | None
) -> None:
    """Drain, fit, and print each version's CPU per request and per event."""
    configure_logging("console", "WARNING")
    settings = [(vary, int(value)) for value in values.split(",")]
    chosen = list(trees) or [str(THIS_TREE)]
    drains = asyncio.run(_run(chosen, settings, events, rounds, attach))
    for tree, runs in drains.items():
        if len({run.requests for run in runs}) > 1:
            print(summary(tree, runs, events))


if __name__ == "__main__":
    main()
