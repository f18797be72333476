"""`make soak` (`python -m soak`): the pipeline for DURATION under a seeded schedule of faults;
the report in `soak/results/`, the summary line last; exits 1 when an event was lost, an
auditor disagreed with the account, a daemon exited on its own or more minutes were late than
the faults' own minutes and the next of each."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import click

from bench.report import say
from hifi.errors import ConfigError
from hifi.kafka.settings import ENV_KEYS, KafkaSettings
from hifi.logging import configure_logging
from soak.model import SoakResult
from soak.report import write_report
from soak.run import SoakPlan, soak
from soak.targets import late_beyond_budget

#: as the tests take it: a Kafka to run on instead of the dev broker
BOOTSTRAP_ENV_VAR = "HIFI_TEST_BOOTSTRAP"
BOOTSTRAP_VAR = ENV_KEYS["bootstrap"]
RESULTS_DIR = Path(__file__).parent / "results"
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h)?$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600}


def parse_duration_s(text: str) -> float:
    """`90s`, `10m`, `1h` or a number of seconds."""
    found = _DURATION.match(text.strip())
    if found is None or float(found[1]) <= 0:
        raise click.BadParameter(f"{text!r} is not a duration such as 90s, 10m or 1h")
    return float(found[1]) * _UNIT_S[found[2] or "s"]


def problems(result: SoakResult) -> list[str]:
    """What fails the run: the targets that must hold however the machine does."""
    found = []
    account = result.account
    if account.lost:
        found.append(f"{account.lost} events lost (e.g. {', '.join(account.lost_sample[:3])})")
    if account.audit_mismatches:
        found.append(f"the auditors disagree: {'; '.join(account.audit_mismatches[:3])}")
    exits = {name: count for name, count in result.exits.items() if count}
    if exits:
        found.append(f"daemons exited on their own: {exits}")
    if beyond := late_beyond_budget(result):
        found.append(
            f"{result.late_minutes} late minutes, {beyond} more than the faults' own minutes"
            " and the next of each"
        )
    return found


def kafka_settings(bootstrap: str | None) -> KafkaSettings | None:
    """How the run connects to a Kafka of the caller's (None: it starts a Tansu of its own)."""
    if not bootstrap:
        return None
    try:
        return KafkaSettings.from_env({**os.environ, BOOTSTRAP_VAR: bootstrap})
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc


async def stoppable(plan: SoakPlan, work: Path) -> SoakResult:
    """`soak`, cancelled by SIGTERM as by Ctrl-C: the broker, Redis, the destinations and every
    daemon stop with it (SIGTERM's default would leave them running, orphaned)."""
    loop = asyncio.get_running_loop()
    run = asyncio.current_task()
    assert run is not None
    loop.add_signal_handler(signal.SIGTERM, run.cancel)
    try:
        return await soak(plan, work)
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--duration", default="60m", show_default=True, help="How long the load runs.")
@click.option("--seed", default=1, show_default=True, help="The fault schedule's and load's.")
@click.option(
    "--load-share",
    type=click.FloatRange(0.01, 1.0),
    default=1 / 3,
    help="The share of the connector's measured capacity offered  [default: a third]",
)
@click.option("--rate", type=click.FloatRange(min=1), help="Total events/s, not measured.")
@click.option("--faults", type=click.IntRange(min=0), help="Faults  [default: 6 an hour, >= 2]")
@click.option("--settle-s", default=300.0, show_default=True, help="The auditors' settle_s.")
@click.option(
    "--bootstrap",
    envvar=BOOTSTRAP_ENV_VAR,
    help="A Kafka to run on; HIFI_KAFKA_* say how to connect  [default: a Tansu of its own]",
)
@click.option("--keep-work", is_flag=True, help="Keep every log (else only on a failure).")
@click.option(
    "--results-dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=RESULTS_DIR,
    show_default=True,
)
def main(
    duration: str,
    seed: int,
    load_share: float,
    rate: float | None,
    faults: int | None,
    settle_s: float,
    bootstrap: str | None,
    keep_work: bool,
    results_dir: Path,
) -> None:
    """Run the pipeline under faults for DURATION and write its report."""
    configure_logging("console", "WARNING")
    plan = SoakPlan(
        duration_s=parse_duration_s(duration),
        seed=seed,
        load_share=load_share,
        rate_per_s=rate,
        faults=faults,
        settle_s=settle_s,
        kafka=kafka_settings(bootstrap),
    )
    work = Path(tempfile.mkdtemp(prefix="hifi-soak-"))
    try:
        result = asyncio.run(stoppable(plan, work))
    except KeyboardInterrupt:
        say(f"soak stopped; logs kept in {work}")
        sys.exit(130)
    except asyncio.CancelledError:  # SIGTERM
        say(f"soak stopped; logs kept in {work}")
        sys.exit(143)
    except Exception:
        say(f"soak failed; logs kept in {work}")
        raise
    stamp = datetime.fromtimestamp(result.started_ms / 1000, UTC).strftime("%Y%m%dT%H%M%SZ")
    report = write_report(result, results_dir / f"soak-{stamp}")
    found = problems(result)
    for problem in found:
        say(f"soak: {problem}")
    if found or keep_work:
        say(f"logs kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    print(f"report: {report}")
    print(result.summary_line())
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
