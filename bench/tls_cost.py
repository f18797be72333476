"""`make bench`'s TLS phase: the connector draining a pre-filled topic in plaintext and then
through a TLS listener (Debian's stunnel4 in front of the broker, `devstack.tls`), once each,
back to back; `tls_over_plain` is the second's throughput over the first's.

A figure to report, not a target: on 2 cores the TLS terminator competes with the connector
for CPU, as it would not on a Kafka cluster of its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from bench import machine, phases
from bench.report import Row, say
from devstack.broker import LocalBroker
from devstack.tls import TlsKafka, stunnel_missing
from hifi.kafka.settings import KafkaSettings

Prefill = Callable[[KafkaSettings, str, str], Awaitable[None]]


@dataclass(frozen=True)
class TlsCost:
    """The two drains; `tls` is None when stunnel is not installed (`skipped` says so)."""

    plain: phases.Throughput
    plain_cores: tuple[float, float]
    tls: phases.Throughput | None
    tls_cores: tuple[float, float]
    skipped: str | None = None

    @property
    def tls_over_plain(self) -> float | None:
        if self.tls is None or not self.plain.events_per_s:
            return None
        return self.tls.events_per_s / self.plain.events_per_s

    def rows(self, events: int) -> list[Row]:
        rows = [
            Row(
                "connector throughput, plaintext (once)",
                None,
                events,
                self.plain.delivered,
                self.plain.events_per_s,
                *self.plain_cores,
            )
        ]
        if self.tls is not None:
            rows.append(
                Row(
                    "connector throughput, TLS via stunnel (once)",
                    None,
                    events,
                    self.tls.delivered,
                    self.tls.events_per_s,
                    *self.tls_cores,
                )
            )
        return rows

    def report(self) -> dict[str, object]:
        return {
            "plain_events_per_s": self.plain.events_per_s,
            "tls_events_per_s": None if self.tls is None else self.tls.events_per_s,
            "tls_over_plain": self.tls_over_plain,
            "skipped": self.skipped,
        }


async def run_phase(work: Path, events: int, prefill: Prefill) -> TlsCost:
    """Drain `events` pre-filled by `prefill(settings, topic, prefix)` in plaintext, then
    through TLS, each on a fresh broker."""
    say("2c. TLS: connector throughput in plaintext, then through a TLS listener (once each)")
    work.mkdir(parents=True, exist_ok=True)
    with LocalBroker(log_path=work / "broker-plain.log") as broker:
        plain, plain_cores = await _drain(
            work / "plain", KafkaSettings(bootstrap=broker.bootstrap), events, prefill, "plain"
        )
    missing = stunnel_missing()
    if missing is not None:
        say(f"   TLS skipped: {missing}")
        return TlsCost(plain, plain_cores, None, (0.0, 0.0), skipped=missing)
    (work / "tls").mkdir(parents=True, exist_ok=True)
    with TlsKafka(work / "tls") as listener:
        tls, tls_cores = await _drain(work / "tls", listener.settings(), events, prefill, "tls")
    cost = TlsCost(plain, plain_cores, tls, tls_cores)
    say(
        f"   plaintext {plain.events_per_s:.0f}/s, TLS {tls.events_per_s:.0f}/s,"
        f" tls_over_plain {cost.tls_over_plain:.2f}"
    )
    return cost


async def _drain(
    work: Path, settings: KafkaSettings, events: int, prefill: Prefill, label: str
) -> tuple[phases.Throughput, tuple[float, float]]:
    topic, prefix = f"bench.{label}", f"{label}"
    await prefill(settings, topic, prefix)
    watch = machine.CpuWatch()
    drained = await phases.throughput(
        work / "throughput",
        bootstrap=settings.bootstrap,
        topic=topic,
        events=events,
        prefix=prefix,
        timeout_s=600,
        kafka_env=settings.environment(),
    )
    cores = watch.cores()
    if drained.delivered < events:
        raise RuntimeError(f"{label}: {drained.delivered} of {events} delivered")
    return drained, cores
