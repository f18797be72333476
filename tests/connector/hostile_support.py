"""The hostile run: real `connector --dest` processes against `devstack.hostile`, one tenant per
behaviour, until every event has an outcome; what the destination, Kafka and the processes said."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson
import redis

from devstack.hostile import BEHAVIOURS, Expect, HostileServer
from devstack.ports import free_port
from hifi.headers import HDR_CAUSE, HDR_ERROR, HDR_REASON, header_map
from hifi.kafka import admin as kafka_admin
from hifi.kafka.clients import Record
from hifi.kafka.producing import open_producer
from hifi.kafka.reading import read_topic
from hifi.kafka.settings import KafkaSettings
from hifi.vocabulary import Reason

TIMEOUT_S = 2.0
LOCAL_ATTEMPTS = 2
EVENTS_PER_CASE = 3
TOKEN = "hostile-token-0123456789abcdef"
SETTLE_DEADLINE_S = 100.0


def api_key(name: str) -> str:
    """A tenant's X-Api-Key: nothing like its name, which masking would hide from the logs."""
    return "k-" + hashlib.sha256(name.encode()).hexdigest()[:24]


@dataclass(frozen=True, slots=True)
class Case:
    """One behaviour met by one connector process (`run`), and what it must end as."""

    run: str  # main (follows 307/308), nofollow, tls, private
    name: str
    expect: Expect
    reason: Reason | None = None

    @property
    def ids(self) -> list[str]:
        return [f"{self.run}-{self.name}-{i}" for i in range(EVENTS_PER_CASE)]

    def __str__(self) -> str:
        return f"{self.run}:{self.name}"


def cases() -> list[Case]:
    """Every behaviour in the run that meets it, with the outcome it demands there."""
    found = [
        Case("main", b.name, b.expect, b.reason)
        for b in BEHAVIOURS.values()
        if b.listener == "main"
    ]
    found += [Case("nofollow", b.name, b.unfollowed) for b in BEHAVIOURS.values() if b.unfollowed]
    found.append(Case("tls", "tls_client_cert", BEHAVIOURS["tls_client_cert"].expect))
    found.append(Case("private", "ok_200", Expect.DEAD_LETTERED, Reason.FORBIDDEN_DESTINATION))
    return found


@dataclass(slots=True)
class Process:
    """One connector process and what it left behind."""

    run: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    ops_port: int
    peak_rss_kib: int = 0
    metrics: str = ""
    exit_code: int | None = None

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@dataclass(slots=True)
class Outcomes:
    """Everything the checks read, once the run is over."""

    server: HostileServer
    processes: dict[str, Process]
    handoffs: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # id: (cause, error)
    dead: dict[str, list[str]] = field(default_factory=dict)  # id: reasons
    settled_s: float = 0.0

    def delivered(self, case: Case) -> Counter[str]:
        return Counter(self.server.record(case.name, case.run).delivered)


def _catalog(run: str, server: HostileServer, ca_file: Path) -> str:
    common = (
        f'source_topics = ["SOURCE"]\nmax_batch_records = 10\nmax_in_flight = 48\n'
        f'concurrency = "fixed"\nrequest_timeout_s = {TIMEOUT_S}\n'
        f"local_retry_attempts = {LOCAL_ATTEMPTS}\nlocal_retry_max_backoff_s = 0.1\n"
        "retry_after_max_s = 0.5\nretry_tiers_s = [3600.0]\ncommit_interval_s = 0.2\n"
        "shutdown_timeout_s = 10.0\ninternal_topic_partitions = 1\nbreaker_failures = 100\n"
    )
    if run == "tls":
        return (
            f'url = "{server.url("tls_client_cert", "tls")}"\ntls_ca_file = "{ca_file}"\n' + common
        )
    main = server.origins["main"]
    keys = {
        "main": f"follow_redirects = true\nallow_private_destinations = true\n"
        f'redirect_trusted_origins = ["{server.origins["trusted"]}"]\n',
        "nofollow": "follow_redirects = false\nallow_private_destinations = true\n",
        "private": "",
    }[run]
    return (
        f'url = "{main}/b/{{b}}/{run}"\n{common}{keys}'
        '[lookups]\ntenant_field = "customer"\nmax_linger_s = 0.05\n'
        '[headers]\nX-Api-Key = "{api_key}"\nAuthorization = "Bearer ${HOSTILE_TOKEN}"\n'
    )


async def run_all(
    server: HostileServer, settings: KafkaSettings, redis_url: str, base: Path, unique: str
) -> Outcomes:
    """Start one connector per run, produce every case's events, wait for their outcomes, stop."""
    ca_file = base / "hostile-ca.pem"
    ca_file.write_bytes(server.ca_pem)
    catalog = base / "catalog"
    catalog.mkdir()
    by_run: dict[str, list[Case]] = defaultdict(list)
    for case in cases():
        by_run[case.run].append(case)
    names = {run: f"{unique}{run}" for run in by_run}
    store = redis.Redis.from_url(redis_url)
    try:
        for run, dest in names.items():
            text = _catalog(run, server, ca_file).replace("SOURCE", dest)
            (catalog / f"{dest}.toml").write_text(text)
            entries = {
                f"t-{c.name}": orjson.dumps({"values": {"b": c.name, "api_key": api_key(c.name)}})
                for c in by_run[run]
            }
            store.hset(f"hifi:tenants:{dest}", mapping=entries)  # type: ignore[arg-type]
    finally:
        store.close()
    await kafka_admin.ensure_topics(settings, list(names.values()), partitions=1)
    await _produce(settings, names, by_run)
    processes = {
        run: _start(run, dest, catalog, base, settings, redis_url) for run, dest in names.items()
    }
    outcomes = Outcomes(server, processes)
    started = time.monotonic()
    try:
        await _settle(outcomes, settings, names, by_run)
    finally:
        outcomes.settled_s = time.monotonic() - started
        await _stop(processes.values())
    await _read_outcomes(outcomes, settings, names)
    return outcomes


async def _produce(
    settings: KafkaSettings, names: dict[str, str], by_run: dict[str, list[Case]]
) -> None:
    now_ms = int(time.time() * 1000)
    records: list[Record] = []
    for run, dest in names.items():
        for case in by_run[run]:
            for event_id in case.ids:
                event = {"id": event_id, "customer": f"t-{case.name}", "event_time": now_ms}
                records.append((dest, event_id.encode(), orjson.dumps(event), []))
    async with open_producer(settings) as producer:
        await producer.send_all(records)


def _start(
    run: str, dest: str, catalog: Path, base: Path, settings: KafkaSettings, redis_url: str
) -> Process:
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.update(
        HIFI_KAFKA_BOOTSTRAP=settings.bootstrap,
        HIFI_REDIS_URL=redis_url,
        HIFI_STATE_DIR=str(base / f"state-{run}"),
        HOSTILE_TOKEN=TOKEN,
    )
    port = free_port()
    log_path = base / f"connector-{run}.log"
    args = ["--dest", dest, "--catalog", str(catalog), "--metrics-port", str(port)]
    with open(log_path, "ab") as log:
        popen = subprocess.Popen(
            [sys.executable, "-m", "connector", *args, "--log-format", "json"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    return Process(run, popen, log_path, port)


async def _settle(
    outcomes: Outcomes,
    settings: KafkaSettings,
    names: dict[str, str],
    by_run: dict[str, list[Case]],
) -> None:
    """Wait until every event was answered 2xx, handed off or dead-lettered (or the deadline)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_DEADLINE_S
    while loop.time() < deadline:
        await asyncio.sleep(2.0)
        if any(p.popen.poll() is not None for p in outcomes.processes.values()):
            return
        await _read_outcomes(outcomes, settings, names)
        if all(_settled(outcomes, case) for cases_ in by_run.values() for case in cases_):
            await asyncio.sleep(1.0)  # a duplicate or a late write would show by now
            return


def _settled(outcomes: Outcomes, case: Case) -> bool:
    delivered = outcomes.delivered(case)
    return all(delivered[i] or i in outcomes.handoffs or i in outcomes.dead for i in case.ids)


async def _read_outcomes(
    outcomes: Outcomes, settings: KafkaSettings, names: dict[str, str]
) -> None:
    handoffs: dict[str, list[tuple[str, str]]] = defaultdict(list)
    dead: dict[str, list[str]] = defaultdict(list)
    for dest in names.values():
        for record in await read_topic(settings, f"{dest}.retry_in"):
            headers = header_map(record.headers)
            cause = headers.get(HDR_CAUSE, b"").decode()
            handoffs[orjson.loads(record.value)["id"]].append(
                (cause, headers.get(HDR_ERROR, b"").decode(errors="replace"))
            )
        for record in await read_topic(settings, f"{dest}.dlq"):
            reason = header_map(record.headers).get(HDR_REASON, b"?").decode()
            dead[orjson.loads(record.value)["id"]].append(reason)
    outcomes.handoffs, outcomes.dead = dict(handoffs), dict(dead)


async def _stop(processes: Iterable[Process]) -> None:
    """Read each process's peak RSS and metrics, then SIGTERM it and wait for its exit."""
    processes = list(processes)
    for process in processes:
        process.peak_rss_kib = _peak_rss_kib(process.popen.pid)
        async with httpx.AsyncClient(timeout=5) as client:
            try:
                found = await client.get(f"http://127.0.0.1:{process.ops_port}/metrics")
                process.metrics = found.text
            except httpx.HTTPError:
                process.metrics = ""
        if process.popen.poll() is None:
            process.popen.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.exit_code = await asyncio.wait_for(asyncio.to_thread(process.popen.wait), 60)
        except TimeoutError:
            process.popen.kill()
            process.exit_code = await asyncio.to_thread(process.popen.wait)


def _peak_rss_kib(pid: int) -> int:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    found = re.search(r"VmHWM:\s+(\d+) kB", text)
    return int(found.group(1)) if found else 0
