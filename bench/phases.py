"""The phases of a bench run: connector throughput on a pre-filled topic, and live paced probes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from bench import load, machine, processes
from bench.catalog import DEST, write_catalog
from bench.measure import LagSummary, Probe, cpu_between, delivery_rate, summarize_lag
from bench.receipts import DeliveriesTail
from bench.report import Row, say
from devstack.broker import LocalBroker
from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings

LAG_LIMIT_MS = 1000.0  # a probe holds when its p95 end-to-end lag is under this
_DRAIN_POLL_S = 0.25
_CONNECTOR_IDLE_S = 3.0  # the throughput run ends itself this long after the topic is drained
_LIVE_IDLE_S = 60.0  # live sessions are stopped with SIGTERM; this is only a safety net


@dataclass(frozen=True)
class Throughput:
    """The connector draining a pre-filled topic."""

    events: int
    delivered: int
    events_per_s: float
    peak_rss_kb: int
    requests: int = 0  # requests answered 2xx, as the connector counted them (0: not scraped)
    cpu_s: float = 0.0  # the connector's CPU from the first delivery to the last (0: not sampled)

    @property
    def cpu_per_event_us(self) -> float:
        return self.cpu_s / self.delivered * 1e6 if self.delivered else 0.0


async def throughput(
    work: Path,
    *,
    bootstrap: str,
    topic: str,
    events: int,
    prefix: str,
    timeout_s: float,
    audit: bool = True,
    lookups: Mapping[str, str] | None = None,
    kafka_env: Mapping[str, str] | None = None,
    max_batch_records: int | None = None,
    body_format: str | None = None,
    decode_url: str | None = None,
) -> Throughput:
    """Start a connector on the pre-filled `topic` and measure from its first delivery to its
    last; `audit=False`: with the destination's audit trail off; `lookups`: with tenant
    lookups, and this environment (where Redis is, where the snapshot goes); `kafka_env`: the
    `HIFI_KAFKA_*` of a secured broker (`KafkaSettings.environment()`); `max_batch_records`:
    fewer events per request than the catalog's default."""
    deliveries = work / "deliveries.ndjson"
    with processes.destination(deliveries, work / "destination.log") as url:
        write_catalog(
            work,
            url=url,
            topics=[topic],
            audit=audit,
            lookups=lookups is not None,
            max_batch_records=max_batch_records,
            body_format=body_format,
            decode_url=decode_url,
        )
        connector = processes.ConnectorProcess(
            catalog_dir=work,
            dest=DEST,
            bootstrap=bootstrap,
            log_path=work / "connector.log",
            until_idle_s=_CONNECTOR_IDLE_S,
            env={**(lookups or {}), **(kafka_env or {})},
        )
        connector.start()
        requests = asyncio.create_task(_count_requests(connector))
        try:
            await connector.wait_exit(timeout_s)
        finally:
            requests.cancel()
            await asyncio.gather(requests, return_exceptions=True)
    tail = DeliveriesTail(deliveries)
    tail.read()
    run = tail.runs.get(prefix)
    received = run.received_ms if run else []
    return Throughput(
        events=events,
        delivered=tail.delivered(prefix),
        events_per_s=delivery_rate(received),
        peak_rss_kb=connector.peak_rss_kb,
        requests=connector.requests_2xx,
        cpu_s=cpu_between(connector.cpu_samples, min(received), max(received)) if received else 0.0,
    )


async def fresh_drain(
    work: Path,
    *,
    topic: str,
    prefix: str,
    events: int,
    partitions: int,
    tenants: load.Tenants | None = None,
    lookups: Mapping[str, str] | None = None,
    max_batch_records: int | None = None,
    kafka: KafkaSettings | None = None,
    body_format: str | None = None,
    decode_url: str | None = None,
    transform: Callable[[list[bytes]], Awaitable[list[bytes]]] | None = None,
) -> Throughput:
    """On a fresh broker (or on `kafka`, a Kafka of the caller's): `topic` pre-filled with
    `events` (their tenants from `tenants`), then the connector's drain of it (`throughput`,
    with `lookups` and `max_batch_records`)."""
    work.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as running:
        settings = kafka
        if settings is None:
            broker = running.enter_context(LocalBroker(log_path=work / "broker.log"))
            settings = KafkaSettings(bootstrap=broker.bootstrap)
        await kafka_admin.ensure_topics(settings, [topic], partitions=partitions)
        await load.prefill(
            settings,
            topic,
            partitions=partitions,
            events=events,
            prefix=prefix,
            tenants=tenants,
            transform=transform,
        )
        return await throughput(
            work,
            bootstrap=settings.bootstrap,
            kafka_env=settings.environment(),
            topic=topic,
            events=events,
            prefix=prefix,
            timeout_s=900,
            lookups=lookups,
            max_batch_records=max_batch_records,
            body_format=body_format,
            decode_url=decode_url,
        )


async def _count_requests(connector: processes.ConnectorProcess) -> None:
    """Keep the connector's count of 2xx requests current until cancelled (once a second)."""
    while True:
        await asyncio.sleep(1.0)
        found = await asyncio.to_thread(connector.scrape)
        counted = found.get(f'hifi_connector_requests_total{{dest="{DEST}",status_class="2xx"}}')
        if counted is not None:
            connector.requests_2xx = int(counted)


@dataclass(frozen=True)
class LiveResult:
    """One paced probe: what was offered, what arrived, and its end-to-end lag."""

    label: str
    offered: load.Offered
    delivered: int
    lag: LagSummary

    @property
    def probe(self) -> Probe:
        return Probe(
            rate=self.offered.rate,
            p95_ms=self.lag.p95_ms,
            complete=self.delivered >= self.offered.events,
        )


class LiveSession:
    """A destination that stays up, and per probe a fresh broker, topic and connector.

    A fresh broker per probe: Tansu keeps every record in memory and slows down as it fills (a
    bare consumer's p95 lag went from 35 to 380 ms over 1.2 M events on one topic; a connector
    probe at 51k events/s had a p95 of 786 ms after the scale probes had put ~5 M events into the
    broker, and 151 ms on a fresh one). A connector per probe: subscribed to every probe topic
    at once, one connector made the broker serve ~40 partitions per fetch, most of them idle.
    """

    def __init__(
        self,
        work: Path,
        *,
        topics: list[str],
        partitions: int,
        fault_ratio: float = 0.0,
        fault: str | None = None,
        lookups: Mapping[str, str] | None = None,
        tenants: load.Tenants | None = None,
        concurrency: str | None = None,
    ) -> None:
        """`lookups`: connectors with tenant lookups and this environment; `tenants`: what the
        load draws each event's tenant from; `concurrency`: the destination's over its default."""
        self._work = work
        self._topics = topics
        self._partitions = partitions
        self._fault_ratio = fault_ratio
        self._fault = fault
        self._lookups = lookups
        self._tenants = tenants
        self._concurrency = concurrency
        self._stack = contextlib.ExitStack()
        self._tail = DeliveriesTail(work / "deliveries.ndjson")
        self._url = ""
        self.peak_rss_kb = 0

    async def __aenter__(self) -> LiveSession:
        self._url = self._stack.enter_context(
            processes.destination(
                self._work / "deliveries.ndjson",
                self._work / "destination.log",
                fault_ratio=self._fault_ratio,
                fault=self._fault,
            )
        )
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._stack.close()

    async def probe(
        self,
        label: str,
        *,
        index: int,
        rate: float,
        duration_s: float,
        drain_s: float,
        floor: bool = False,
    ) -> LiveResult:
        """Offer `rate` events/s for `duration_s` on the `index`th topic; wait for every delivery.

        With `floor`, the connector's intake alone (`bench.floor`) reads the topic instead.
        """
        topic = self._topics[index]
        catalog = self._work / f"catalog{index}"
        write_catalog(
            catalog,
            url=self._url,
            topics=[topic],
            lookups=self._lookups is not None,
            concurrency=self._concurrency,
        )
        with LocalBroker(log_path=self._work / f"broker-{topic}.log") as broker:
            settings = KafkaSettings(bootstrap=broker.bootstrap)
            await kafka_admin.ensure_topics(settings, [topic], partitions=self._partitions)
            reader = self._reader(catalog, topic, broker.bootstrap, floor=floor)
            reader.start()
            try:
                await reader.wait_ready()
                offered = await load.paced(
                    settings,
                    topic,
                    partitions=self._partitions,
                    rate=rate,
                    duration_s=duration_s,
                    prefix=topic,
                    tenants=self._tenants,
                )
                await self._wait_delivered(topic, offered.events, drain_s)
            finally:
                reader.stop()
                if not floor:
                    self.peak_rss_kb = max(self.peak_rss_kb, reader.peak_rss_kb)
        run = self._tail.runs.get(topic)
        return LiveResult(
            label=label,
            offered=offered,
            delivered=self._tail.delivered(topic),
            lag=summarize_lag(run.lags_ms if run else []),
        )

    def _reader(
        self, catalog: Path, topic: str, bootstrap: str, *, floor: bool
    ) -> processes.ReaderProcess:
        if floor:
            return processes.FloorProcess(
                bootstrap=bootstrap,
                topic=topic,
                deliveries_file=self._work / "deliveries.ndjson",
                log_path=self._work / f"floor-{topic}.log",
            )
        return processes.ConnectorProcess(
            catalog_dir=catalog,
            dest=DEST,
            bootstrap=bootstrap,
            log_path=self._work / "connector.log",
            until_idle_s=_LIVE_IDLE_S,
            env=self._lookups,
        )

    async def _wait_delivered(self, prefix: str, events: int, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            self._tail.read()
            if self._tail.delivered(prefix) >= events:
                return
            await asyncio.sleep(_DRAIN_POLL_S)


async def measured_probe(
    session: LiveSession,
    label: str,
    index: int,
    rate: float,
    duration_s: float,
    *,
    floor: bool = False,
) -> tuple[LiveResult, Row]:
    """One probe of `session`, with the cores used while it ran, as a row of the table."""
    watch = machine.CpuWatch()
    result = await session.probe(
        label,
        index=index,
        rate=rate,
        duration_s=duration_s,
        drain_s=max(15.0, duration_s),
        floor=floor,
    )
    ours, others = watch.cores()
    say(f"   {label}: p95 {result.lag.p95_ms:.0f} ms, {result.delivered} delivered")
    row = Row(
        phase=label,
        offered_per_s=result.offered.rate,
        events=result.offered.events,
        delivered=result.delivered,
        events_per_s=result.offered.rate,
        ours_cores=ours,
        others_cores=others,
        p50_ms=result.lag.p50_ms,
        p95_ms=result.lag.p95_ms,
        p99_ms=result.lag.p99_ms,
        held=result.probe.held(LAG_LIMIT_MS),
    )
    return result, row
