"""`cpu_per_request_us` of two versions of the connector, alternated on one machine.

`make bench` reports the CPU per request of one version; a change is judged against the code
before it on the same machine in the same hour. Each round drains, for each version in turn, a
plain topic and a Zipf topic of 1,000 tenants (`bench.lookups`) of `--events` events each on
fresh brokers, and prints `cpu_per_request_us` as `make bench` defined it before its fit over
two tenant drains (`docs/performance.md`; that definition also charges requests the drain's
time-bound CPU). `python -m bench.request_cost --tree . --tree TREE` alternates the fit.
The connector of a version runs from its source tree (`PYTHONPATH`),
the bench, broker and Redis are this tree's:

    git worktree add --detach /tmp/before COMMIT
    .venv/bin/python -m bench.cpu_ab --before /tmp/before [--rounds 2] [--events 200000]
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import tempfile
from pathlib import Path

import click
import redis

from bench import load, lookups, phases
from bench.catalog import DEST
from bench.report import say
from devstack.redis import RedisServer
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


async def cpu_per_request_us(tree: Path, events: int) -> float:
    """One plain and one tenant drain by the connector of `tree`; its CPU per request."""
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
    return (tenant.cpu_s - tenant.delivered * per_event_s) / tenant.requests * 1e6


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
    """Alternate the two versions; the last line has each one's median."""
    figures: dict[str, list[float]] = {"before": [], "now": []}
    for index in range(rounds):
        for label, tree in (("now", THIS_TREE), ("before", before.resolve())):
            value = asyncio.run(cpu_per_request_us(tree, events))
            figures[label].append(value)
            say(f"round {index + 1}  {label:6}  cpu_per_request_us={value:.0f}")
    now, then = statistics.median(figures["now"]), statistics.median(figures["before"])
    print(f"bench-cpu-ab: now_us={now:.0f} before_us={then:.0f} change={now / then - 1:+.0%}")


if __name__ == "__main__":
    main()
