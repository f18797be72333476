"""`python -m auditor` as a process of the bench: started on a catalog, watched through `/metrics` and /proc."""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from bench.processes import ReaderProcess
from devstack.ports import free_port
from hifi.audit import AUDIT_TOPIC_ENV_VAR

_HTTP_TIMEOUT_S = 2.0


def write_catalog(directory: Path, *, dest: str, topic: str, settle_s: float) -> None:
    """`DEST.toml`: a destination on `topic` with an `[accounting]` table settling in `settle_s`."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{dest}.toml").write_text(
        f'url = "http://127.0.0.1:9/"\nsource_topics = ["{topic}"]\n\n'
        f"[accounting]\nsettle_s = {settle_s!r}\n"
    )


@dataclass(frozen=True)
class Scrape:
    """What one read of the auditor's `/metrics` says."""

    at_s: float  # time.monotonic() when read
    lag: dict[tuple[str, int], int]  # hifi_auditor_consumer_lag_records by (topic, partition)
    tracked_events: int
    unsettled_minutes: int
    archive_rows: int
    odd_records: dict[str, int]  # hifi_auditor_odd_records_total by problem
    rss_kb: int
    records: dict[str, int] = field(default_factory=dict)  # hifi_auditor_records_total by topic

    def lag_of(self, topic: str) -> int | None:
        """Records left to read on `topic`; None until every partition of it reports."""
        lags = [lag for (name, _), lag in self.lag.items() if name == topic]
        return sum(lags) if lags else None


class AuditorProcess(ReaderProcess):
    """The auditor of one destination, its own archive, metrics on a free port; ready on `/readyz`."""

    name = "auditor"

    def __init__(
        self,
        *,
        catalog_dir: Path,
        dest: str,
        bootstrap: str,
        archive_dir: Path,
        audit_topic: str,
        log_path: Path,
        roll_s: float,
        until_idle_s: float,
        group_id: str | None = None,
    ) -> None:
        """`group_id`: the auditor's consumer group (`--group`); the default one when None."""
        self.metrics_port = free_port()
        self.scrapes: list[Scrape] = []
        args = [
            "-m",
            "auditor",
            "--dest",
            dest,
            "--catalog",
            str(catalog_dir),
            "--archive",
            str(archive_dir),
            "--archive-roll-s",
            str(roll_s),
            "--metrics-port",
            str(self.metrics_port),
            "--until-idle",
            str(until_idle_s),
            "--log-format",
            "json",
            "--log-level",
            "WARNING",
            *(["--group", group_id] if group_id else []),
        ]
        env = {**os.environ, "HIFI_KAFKA_BOOTSTRAP": bootstrap, AUDIT_TOPIC_ENV_VAR: audit_topic}
        super().__init__(args, log_path=log_path, env=env)

    async def owned_shares(self) -> list[str]:
        """The shares (`topic/partition`) its `/status` says it owns now; none if it does not answer."""
        text = await asyncio.to_thread(_get, f"http://127.0.0.1:{self.metrics_port}/status")
        try:
            owned = json.loads(text)["owned_shares"] if text is not None else []
        except (ValueError, KeyError, TypeError):
            return []
        return [str(share) for share in owned] if isinstance(owned, list) else []

    async def is_ready(self) -> bool:
        return (
            await asyncio.to_thread(_get, f"http://127.0.0.1:{self.metrics_port}/readyz")
            is not None
        )

    async def scrape(self) -> Scrape | None:
        """Read `/metrics` and VmRSS now; None if the auditor does not answer."""
        text = await asyncio.to_thread(_get, f"http://127.0.0.1:{self.metrics_port}/metrics")
        self.sample_rss()
        if text is None:
            return None
        scrape = parse_metrics(text, at_s=time.monotonic(), rss_kb=read_rss_kb(self.pid) or 0)
        self.scrapes.append(scrape)
        return scrape


def parse_metrics(text: str, *, at_s: float, rss_kb: int) -> Scrape:
    """The figures the bench follows, from the Prometheus text of one auditor."""
    lag: dict[tuple[str, int], int] = {}
    single = {"hifi_auditor_tracked_events": 0, "hifi_auditor_unsettled_minutes": 0}
    archive_rows = 0
    odd: dict[str, int] = {}
    records: dict[str, int] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "hifi_auditor_consumer_lag_records":
                tp = (sample.labels["topic"], int(sample.labels["partition"]))
                lag[tp] = int(sample.value)
            elif sample.name in single:
                single[sample.name] += int(sample.value)
            elif sample.name == "hifi_auditor_archive_rows_total":
                archive_rows = int(sample.value)
            elif sample.name == "hifi_auditor_records_total":
                records[sample.labels["topic"]] = int(sample.value)
            elif sample.name == "hifi_auditor_odd_records_total":
                problem = sample.labels["problem"]
                odd[problem] = odd.get(problem, 0) + int(sample.value)
    return Scrape(
        at_s=at_s,
        lag=lag,
        tracked_events=single["hifi_auditor_tracked_events"],
        unsettled_minutes=single["hifi_auditor_unsettled_minutes"],
        archive_rows=archive_rows,
        odd_records=odd,
        rss_kb=rss_kb,
        records=records,
    )


def read_rss_kb(pid: int, proc: Path = Path("/proc")) -> int | None:
    """VmRSS (resident set now, kB) of a live process; None if it is gone."""
    try:
        text = (proc / str(pid) / "status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return None


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=_HTTP_TIMEOUT_S) as response:  # noqa: S310 - loopback URL we built
            if response.status != 200:
                return None
            return str(response.read().decode())
    except OSError:
        return None
