"""Everything a soak runs: the broker, Redis, two destinations and the daemons, on loopback.

Two destinations: `soak_plain` (topic `soak.plain`, two connectors in one group, fed straight
from Kafka and through the ingest service) and `soak_tenants` (topic `soak.tenants`, each event
routed by its tenant's Redis entry, 1,000 tenants). Each has its retrier and its auditor. Every
daemon is supervised (`chaos.harness.Daemon`: restarted when it exits on its own) and has an ops
port of its own. `connector-plain-a`, `retrier-plain` and `auditor-plain` are never killed:
every kind of daemon has a life of the whole run.

The broker is a Tansu of the run's own, or a Kafka given by its bootstrap (`HIFI_KAFKA_*` say
how to connect): there, whatever an earlier run left, its names carry a suffix of the run's
(`soak_plain_<hex>`, `soak.plain.<hex>`), and so do its topics, groups, retry topics and DLQs.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import redis

from bench.lookups import TENANTS
from chaos.harness import Daemon
from config.streams import hash_token
from devstack.broker import LocalBroker
from devstack.destination import DeliveryHook, Reply, TestDestination
from devstack.ports import free_port
from devstack.redis import RedisServer
from hifi.environment import REDIS_URL_ENV_VAR
from hifi.files import STATE_DIR_ENV_VAR
from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings
from soak import fds
from soak.model import BROKER
from tenants.keys import tenants_key

PLAIN, TENANTS_DEST = "soak_plain", "soak_tenants"
TOPICS = {PLAIN: "soak.plain", TENANTS_DEST: "soak.tenants"}
PARTITIONS = 4
TENANT_FIELD = "tenant"
INGEST_TOKEN = "soak-ingest-token"  # noqa: S105 - the stream file holds its hash
KILLABLE = ("connector-plain-b", "connector-tenants", "retrier-tenants", "auditor-tenants")
JOINER = "connector-plain-c"  # the member that joins and leaves

# A destination as the web has them: a median of 20 ms and a long tail (sigma 0.8: p99 ~ 130
# ms), 1 % of requests 503, 0.5 % 429 with a Retry-After of a second, 0.05 % reset.
LATENCY_MEDIAN_S = 0.020
LATENCY_SIGMA = 0.8
STEADY_FAULT_RATIO = 0.0155
STEADY_FAULTS = (
    *[Reply(503)] * 20,
    *[Reply(429, retry_after="1")] * 10,
    Reply(drop=True),
)
# Tansu answers a held fetch only when it next looks, and its looking costs it CPU for each
# caught-up consumer, the more the shorter the wait: at the connector's default the three
# connectors took half the machine (docs/performance-history.md, "The dev broker's fetch wait").
FETCH_MAX_WAIT_MS = 100


@dataclass
class Stack:
    """The running pieces; `daemons` by name."""

    work: Path
    broker: LocalBroker | None  # None: a Kafka of the caller's, not this machine's to freeze
    redis: RedisServer
    destinations: dict[str, TestDestination]
    settings: KafkaSettings
    catalog: Path
    ingest_url: str
    daemons: dict[str, Daemon] = field(default_factory=dict)
    seed: int = 0
    suffix: str = ""  # of every destination and topic name, on a Kafka of the caller's

    def name(self, dest: str) -> str:
        """`PLAIN` or `TENANTS_DEST` as the catalog names it in this run."""
        return f"{dest}{self.suffix}"

    def topic(self, dest: str) -> str:
        """The source topic of `dest` in this run."""
        return f"{TOPICS[dest]}.{self.suffix[1:]}" if self.suffix else TOPICS[dest]

    @property
    def kafka_ports(self) -> frozenset[int]:
        """The broker ports the daemons connect to (counted as their Kafka connections)."""
        return frozenset(
            int(address.rsplit(":", 1)[1]) for address in self.settings.bootstrap.split(",")
        )

    @property
    def ingest_port(self) -> int:
        return int(self.ingest_url.rsplit(":", 1)[1].split("/", 1)[0])

    @property
    def port_names(self) -> dict[int, str]:
        """What listens on each port of the stack: its fds are named by them (`soak.fds`)."""
        names = dict.fromkeys(self.kafka_ports, fds.KAFKA)
        names[self.redis.port] = "Redis"
        names[self.ingest_port] = "ingest"
        for dest, destination in self.destinations.items():
            names[destination.port] = f"destination {dest}"
        for name, daemon in self.daemons.items():
            names[daemon.metrics_port] = f"{name}'s ops server"
        return names

    def auditor_url(self, dest: str) -> str:
        name = "auditor-plain" if dest == PLAIN else "auditor-tenants"
        return f"http://127.0.0.1:{self.daemons[name].metrics_port}"

    def steady(self, dest: str) -> None:
        """The destination's everyday behaviour (again, after a fault changed it)."""
        destination = self.destinations[dest]
        destination.set_faults(STEADY_FAULT_RATIO, STEADY_FAULTS, seed=self.seed)

    def fill_redis(self) -> None:
        """An entry per tenant (its API key), as after `hifi-tenants` loaded them."""
        client = redis.Redis.from_url(self.redis.url)
        try:
            entries = {
                f"t{rank}": orjson.dumps({"values": {"api_key": f"soak-key-{rank:04d}"}})
                for rank in range(TENANTS)
            }
            client.hset(tenants_key(self.name(TENANTS_DEST)), mapping=entries)  # type: ignore[arg-type]
        finally:
            client.close()

    def connector(self, name: str) -> Daemon:
        """A connector daemon (not started) of `soak_plain` or `soak_tenants` by its name."""
        dest = TENANTS_DEST if "tenants" in name else PLAIN
        env = {STATE_DIR_ENV_VAR: str(self.work / "state" / name)}
        if dest == TENANTS_DEST:
            env[REDIS_URL_ENV_VAR] = self.redis.url
        args = ["--dest", self.name(dest), "--catalog", str(self.catalog)]
        return self._daemon(name, "connector", args, env)

    def processes(self) -> Iterator[tuple[str, int, int]]:
        """(name, pid, ops port) of every daemon running now, and the local broker's (port 0)."""
        if self.broker is not None:
            yield BROKER, self.broker.pid, 0
        for name, daemon in self.daemons.items():
            if daemon.pid is not None:
                yield name, daemon.pid, daemon.metrics_port

    def _daemon(self, name: str, module: str, args: list[str], env: dict[str, str]) -> Daemon:
        return Daemon(
            name,
            module,
            args,
            bootstrap=self.settings.bootstrap,
            log_path=self.work / f"{name}.log",
            env=env,
            metrics_port=free_port(),
        )

    def create_daemons(self) -> None:
        """The daemons of the run, by name (not started)."""
        catalog = ["--catalog", str(self.catalog)]
        for name in ("connector-plain-a", "connector-plain-b", "connector-tenants"):
            self.daemons[name] = self.connector(name)
        for dest, role in ((PLAIN, "plain"), (TENANTS_DEST, "tenants")):
            named = ["--dest", self.name(dest), *catalog]
            self.daemons[f"retrier-{role}"] = self._daemon(f"retrier-{role}", "retrier", named, {})
            archive = ["--archive", str(self.work / f"archive-{role}")]
            self.daemons[f"auditor-{role}"] = self._daemon(
                f"auditor-{role}", "auditor", [*named, *archive], {}
            )
        streams = self.work / "streams"
        port = self.ingest_port
        self.daemons["ingest"] = self._daemon(
            "ingest",
            "ingest",
            ["--streams", str(streams), "--host", "127.0.0.1", "--port", str(port)],
            {},
        )


def _make_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)


def _write_catalog(built: Stack, urls: dict[str, str], streams: Path, settle_s: float) -> None:
    catalog = built.catalog
    catalog.mkdir(parents=True, exist_ok=True)
    accounting = f"\n[accounting]\nsettle_s = {settle_s}\n"
    fetch = f"fetch_max_wait_ms = {FETCH_MAX_WAIT_MS}\n"
    (catalog / f"{built.name(PLAIN)}.toml").write_text(
        f'url = "{urls[PLAIN]}/plain"\nsource_topics = ["{built.topic(PLAIN)}"]\n'
        f"{fetch}{accounting}"
    )
    (catalog / f"{built.name(TENANTS_DEST)}.toml").write_text(
        f'url = "{urls[TENANTS_DEST]}/{{tenant}}"\n'
        f'source_topics = ["{built.topic(TENANTS_DEST)}"]\n'
        f"{fetch}"
        "allow_private_destinations = true\n"
        f'\n[lookups]\ntenant_field = "{TENANT_FIELD}"\n'
        '\n[headers]\nX-Api-Key = "{api_key}"\n'
        f"{accounting}"
    )
    streams.mkdir(parents=True, exist_ok=True)
    (streams / f"{built.name(PLAIN)}.toml").write_text(
        f'topic = "{built.topic(PLAIN)}"\ntokens_sha256 = ["{hash_token(INGEST_TOKEN)}"]\n'
    )


@contextlib.asynccontextmanager
async def stack(
    work: Path,
    on_delivery: DeliveryHook,
    *,
    seed: int,
    settle_s: float,
    kafka: KafkaSettings | None = None,
) -> AsyncIterator[Stack]:
    """Start the broker (none with `kafka`: that one), Redis and both destinations (their steady
    faults on), create the topics and the catalog; the daemons are created, not started."""
    _make_dir(work)
    async with contextlib.AsyncExitStack() as running:
        broker = None
        if kafka is None:
            broker = running.enter_context(LocalBroker(log_path=work / "broker.log"))
            kafka = KafkaSettings(bootstrap=broker.bootstrap)
        redis_server = running.enter_context(RedisServer())
        destinations = {
            dest: await running.enter_async_context(
                TestDestination(record_bodies=False, keep_history=False, on_delivery=on_delivery)
            )
            for dest in (PLAIN, TENANTS_DEST)
        }
        suffix = "" if broker is not None else f"_{secrets.token_hex(3)}"
        ingest_url = f"http://127.0.0.1:{free_port()}/v1/events/{PLAIN}{suffix}"
        built = Stack(
            work,
            broker,
            redis_server,
            destinations,
            kafka,
            work / "catalog",
            ingest_url,
            seed=seed,
            suffix=suffix,
        )
        topics = [built.topic(dest) for dest in TOPICS]
        await kafka_admin.ensure_topics(kafka, topics, partitions=PARTITIONS)
        urls = {dest: target.url.rstrip("/") for dest, target in destinations.items()}
        _write_catalog(built, urls, work / "streams", settle_s)
        built.fill_redis()
        for index, (dest, destination) in enumerate(destinations.items()):
            destination.set_latency(LATENCY_MEDIAN_S, LATENCY_SIGMA, seed=seed + index)
            built.steady(dest)
        built.create_daemons()
        try:
            yield built
        finally:
            for daemon in built.daemons.values():
                await daemon.stop()
