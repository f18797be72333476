"""`cpu_per_request_us` of two versions of the connector, alternated on one machine.

`make bench` reports the CPU per request of one version; a change is judged against the code
before it on the same machine in the same hour. Each round drains, for each version in turn, a
plain topic and a Zipf topic of 1,000 tenants (`bench.lookups`) of `--events` events each on
fresh brokers, and prints `cpu_per_request_us` as `make bench` defined it before its fit over
two tenant drains (`docs/performance.md`; that definition also charges requests the drain's
time-bound CPU). Each round begins with plain aiokafka's consume and commit of a plain topic
(`bench.ceiling`), so each version's `ratio` (its plain drain's rate over that ceiling) and CPU
per event come from the same run; the versions' order alternates from round to round.
`python -m bench.request_cost --tree . --tree TREE` alternates the fit. The connector of a
version runs from its source tree (`PYTHONPATH`), the bench, broker and Redis are this tree's:

    git worktree add --detach /tmp/before COMMIT
    .venv/bin/python -m bench.cpu_ab --before /tmp/before [--rounds 2] [--events 200000]
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

import click
import redis

from bench import ceiling, load, lookups, phases
from bench.catalog import DEST
from bench.report import say
from devstack.broker import LocalBroker
from devstack.redis import RedisServer
from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings
from tenants.keys import tenants_key

THIS_TREE = Path(__file__).resolve().parent.parent
PARTITIONS = 4


async def _drain(work: Path, events: int, lookups_env: dict[str, str] | None) -> phases.Throughput:
    """A fresh broker, a pre-filled topic (Zipf tenants with `lookups_env`), the connector's drain."""
    topic = "ab.lookups" if lookups_env is not None else "ab.plain"
    tenants = load.Tenants(lookups.TENANTS, lookups.ZIPF_S) if lookups_env is not None else None
    return await phases.fresh_drain(
        work / topic,
        topic=topic,
        prefix=topic,
        events=events,
        partitions=PARTITIONS,
        tenants=tenants,
        lookups=lookups_env,
    )


@dataclass(frozen=True)
class Figures:
    """One version's drains in one round."""

    cpu_per_request_us: float
    plain_events_per_s: float
    plain_cpu_per_event_us: float


async def ceiling_events_per_s(events: int) -> float:
    """Plain aiokafka's consume and commit of a pre-filled plain topic on a fresh broker: the
    `ratio`'s denominator, as `make bench` measures it (the code is this tree's for both)."""
    topic = "ab.ceiling"
    with (
        tempfile.TemporaryDirectory(prefix="hifi-cpu-ab-") as tmp,
        LocalBroker(log_path=Path(tmp) / "broker.log") as broker,
    ):
        settings = KafkaSettings(bootstrap=broker.bootstrap)
        await kafka_admin.ensure_topics(settings, [topic], partitions=PARTITIONS)
        await load.prefill(settings, topic, partitions=PARTITIONS, events=events, prefix=topic)
        return await ceiling.consume_and_commit(
            settings, topic, events=events, group_id="ab.ceiling", timeout_s=300
        )


async def figures_of(tree: Path, events: int) -> Figures:
    """One plain and one tenant drain by the connector of `tree`: its CPU per request, and the
    plain drain's rate and CPU per event."""
    # The connector and destination processes inherit both: `python -m` puts its working
    # directory before PYTHONPATH, so this tree's modules would win from anywhere else.
    os.environ["PYTHONPATH"] = str(tree)
    with (
        contextlib.chdir(tree),
        tempfile.TemporaryDirectory(prefix="hifi-cpu-ab-") as tmp,
        RedisServer() as server,
    ):
        work = Path(tmp)
        client = redis.Redis.from_url(server.url)
        try:
            client.hset(tenants_key(DEST), mapping=lookups.entries())  # type: ignore[arg-type]
        finally:
            client.close()
        env = {"HIFI_REDIS_URL": server.url, "HIFI_STATE_DIR": str(work / "state")}
        plain = await _drain(work / "plain", events, None)
        tenant = await _drain(work / "tenant", events, env)
    if not (plain.cpu_s and plain.delivered and tenant.requests):
        raise RuntimeError(f"{tree}: a drain was not sampled ({plain}, {tenant})")
    per_event_s = plain.cpu_s / plain.delivered
    per_request_s = (tenant.cpu_s - tenant.delivered * per_event_s) / tenant.requests
    return Figures(per_request_s * 1e6, plain.events_per_s, per_event_s * 1e6)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--before",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    required=True,
    help="The source tree of the version to compare against (a git worktree).",
)
@click.option("--rounds", type=click.IntRange(1, 10), default=2, show_default=True)
@click.option("--events", type=click.IntRange(10_000), default=200_000, show_default=True)
def main(before: Path, rounds: int, events: int) -> None:
    """Alternate the two versions, a ceiling first in each round; the last line has each
    version's medians (`ratio`: its plain drain's rate over its round's ceiling)."""
    figures: dict[str, list[Figures]] = {"before": [], "now": []}
    ratios: dict[str, list[float]] = {"before": [], "now": []}
    for index in range(rounds):
        top = asyncio.run(ceiling_events_per_s(events))
        say(f"round {index + 1}  ceiling {top:.0f}/s")
        order = (("now", THIS_TREE), ("before", before.resolve()))
        for label, tree in order if index % 2 == 0 else order[::-1]:
            got = asyncio.run(figures_of(tree, events))
            figures[label].append(got)
            ratios[label].append(got.plain_events_per_s / top)
            say(
                f"round {index + 1}  {label:6}  cpu_per_request_us={got.cpu_per_request_us:.0f}"
                f" plain {got.plain_events_per_s:.0f}/s ratio={ratios[label][-1]:.2f}"
                f" cpu_per_event_us={got.plain_cpu_per_event_us:.1f}"
            )
    medians = {
        label: (
            statistics.median(f.cpu_per_request_us for f in figures[label]),
            statistics.median(ratios[label]),
            statistics.median(f.plain_cpu_per_event_us for f in figures[label]),
        )
        for label in figures
    }
    (now, now_ratio, now_event), (then, then_ratio, then_event) = medians["now"], medians["before"]
    print(
        f"bench-cpu-ab: now_us={now:.0f} before_us={then:.0f} change={now / then - 1:+.0%}"
        f" ratio_now={now_ratio:.2f} ratio_before={then_ratio:.2f}"
        f" cpu_per_event_us_now={now_event:.1f} cpu_per_event_us_before={then_event:.1f}"
    )


if __name__ == "__main__":
    main()
