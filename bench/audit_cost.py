"""`make bench`'s audit phase: the connector's drain of a pre-filled topic with its audit trail
on, then off (`[accounting] audit = false`), once each, back to back on fresh brokers; every
other figure of the bench is with it on, the default."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from bench import machine, phases
from bench.report import Row, say
from devstack.broker import LocalBroker
from hifi.kafka.settings import KafkaSettings

Prefill = Callable[[KafkaSettings, str, str], Awaitable[None]]


@dataclass(frozen=True)
class AuditCost:
    """The connector draining a pre-filled topic with its audit trail on, then off, once each."""

    on: phases.Throughput
    on_cores: tuple[float, float]
    off: phases.Throughput
    off_cores: tuple[float, float]

    @property
    def on_over_off(self) -> float:
        """Throughput with the trail as a fraction of throughput without it."""
        return self.on.events_per_s / self.off.events_per_s if self.off.events_per_s else 0.0

    def rows(self, events: int) -> list[Row]:
        return [
            Row(
                f"connector throughput, audit trail {label} (once)",
                None,
                events,
                run.delivered,
                run.events_per_s,
                *cores,
            )
            for label, run, cores in (
                ("on", self.on, self.on_cores),
                ("off", self.off, self.off_cores),
            )
        ]


async def _drain_once(
    work: Path, events: int, prefill: Prefill, *, audit: bool
) -> tuple[phases.Throughput, tuple[float, float]]:
    """On a fresh broker, pre-fill a topic and drain it with the connector, its audit trail on
    or off; the run and the cores it used."""
    label = "on" if audit else "off"
    with LocalBroker(log_path=work / f"broker-audit-{label}.log") as broker:
        settings = KafkaSettings(bootstrap=broker.bootstrap)
        topic, prefix = f"bench.audit_{label}", f"audit_{label}"
        await prefill(settings, topic, prefix)
        watch = machine.CpuWatch()
        drained = await phases.throughput(
            work / f"throughput-audit-{label}",
            bootstrap=broker.bootstrap,
            topic=topic,
            events=events,
            prefix=prefix,
            timeout_s=600,
            audit=audit,
        )
        cores = watch.cores()
    if drained.delivered < events:
        raise RuntimeError(f"audit {label}: {drained.delivered} of {events} delivered")
    say(f"   audit trail {label}: connector {drained.events_per_s:.0f}/s")
    return drained, cores


async def run_phase(work: Path, events: int, prefill: Prefill) -> AuditCost:
    """The connector's drain of `events` pre-filled by `prefill`, its trail on then off."""
    say("2b. the audit trail's cost: connector throughput with it on, then off (once each)")
    on, on_cores = await _drain_once(work, events, prefill, audit=True)
    off, off_cores = await _drain_once(work, events, prefill, audit=False)
    return AuditCost(on, on_cores, off, off_cores)
