"""`make bench`'s TLS phase: the connector draining a pre-filled topic in plaintext and through
a TLS listener (Debian's stunnel4 in front of the broker, `devstack.tls`), each on a fresh broker,
in `pairs` pairs whose order alternates; `tls_over_plain` is the median pair's TLS throughput over
its plaintext one (one pair moved by up to 0.3 from run to run).

On 2 cores the TLS terminator competes with the connector for CPU, as it would not on a Kafka
cluster of its own; issue 44 holds it at 0.9 at least (`bench.run`'s targets). So each drain's
topic is first read by the raw aiokafka consumer (`bench.ceiling`), through the same listener:
`ceiling_tls_over_plain`, the lower median of those pairs' ratios, is what the listener costs a
reader that does nothing with its records. `cpu_tls_over_plain`, the lower median of the pairs'
connector CPU an event in plaintext over through TLS, is what TLS costs the connector itself:
the rate it would keep through TLS with its core to itself, as beside a Kafka of its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from bench import ceiling, machine, phases
from bench.report import Row, say
from devstack.broker import LocalBroker
from devstack.tls import TlsKafka, stunnel_missing
from hifi.kafka.settings import KafkaSettings

Prefill = Callable[[KafkaSettings, str, str], Awaitable[None]]
PAIRS = 3


@dataclass(frozen=True)
class Drain:
    """One drain, the machine's cores busy during it, and the raw consumer's rate before it."""

    throughput: phases.Throughput
    cores: tuple[float, float]
    ceiling_events_per_s: float


@dataclass(frozen=True)
class Pair:
    """A plaintext drain and a TLS drain, run one after the other."""

    plain: Drain
    tls: Drain

    @property
    def ratio(self) -> float:
        plain = self.plain.throughput.events_per_s
        return self.tls.throughput.events_per_s / plain if plain else 0.0

    @property
    def ceiling_ratio(self) -> float:
        """The raw consumer's TLS rate over its plaintext one, on the same topics."""
        plain = self.plain.ceiling_events_per_s
        return self.tls.ceiling_events_per_s / plain if plain else 0.0

    @property
    def cpu_ratio(self) -> float:
        """The connector's CPU an event in plaintext over through TLS (its own cost of TLS)."""
        tls = self.tls.throughput.cpu_per_event_us
        return self.plain.throughput.cpu_per_event_us / tls if tls else 0.0


@dataclass(frozen=True)
class TlsCost:
    """The pairs of drains; with stunnel missing, one plaintext drain and `skipped` says why."""

    plain_only: Drain | None
    pairs: tuple[Pair, ...] = ()
    skipped: str | None = None

    @property
    def median_pair(self) -> Pair | None:
        return _lower_median(self.pairs, lambda pair: pair.ratio)

    @property
    def plain(self) -> phases.Throughput:
        pair = self.median_pair
        drain = pair.plain if pair is not None else self.plain_only
        assert drain is not None
        return drain.throughput

    @property
    def tls(self) -> phases.Throughput | None:
        pair = self.median_pair
        return None if pair is None else pair.tls.throughput

    @property
    def tls_over_plain(self) -> float | None:
        pair = self.median_pair
        return None if pair is None else pair.ratio

    @property
    def ceiling_tls_over_plain(self) -> float | None:
        """The lower median of the pairs' `ceiling_ratio`: the listener's own cost."""
        pair = _lower_median(self.pairs, lambda pair: pair.ceiling_ratio)
        return None if pair is None else pair.ceiling_ratio

    @property
    def cpu_tls_over_plain(self) -> float | None:
        """The lower median of the pairs' `cpu_ratio`: what TLS costs the connector itself."""
        pair = _lower_median(self.pairs, lambda pair: pair.cpu_ratio)
        return None if pair is None else pair.cpu_ratio

    def rows(self, events: int) -> list[Row]:
        pair = self.median_pair
        if pair is None:
            assert self.plain_only is not None
            return [_row("connector throughput, plaintext (once)", events, self.plain_only)]
        return [
            _row("connector throughput, plaintext (median pair)", events, pair.plain),
            _row("connector throughput, TLS via stunnel (median pair)", events, pair.tls),
        ]

    def report(self) -> dict[str, object]:
        return {
            "plain_events_per_s": self.plain.events_per_s,
            "tls_events_per_s": None if self.tls is None else self.tls.events_per_s,
            "tls_over_plain": self.tls_over_plain,
            "pair_ratios": [pair.ratio for pair in self.pairs],
            "ceiling_tls_over_plain": self.ceiling_tls_over_plain,
            "ceiling_pair_ratios": [pair.ceiling_ratio for pair in self.pairs],
            "cpu_tls_over_plain": self.cpu_tls_over_plain,
            "cpu_pair_ratios": [pair.cpu_ratio for pair in self.pairs],
            "cpu_per_event_us": [
                (pair.plain.throughput.cpu_per_event_us, pair.tls.throughput.cpu_per_event_us)
                for pair in self.pairs
            ],
            "median_of": len(self.pairs),
            "skipped": self.skipped,
        }


def _lower_median(pairs: tuple[Pair, ...], key: Callable[[Pair], float]) -> Pair | None:
    """The pair at the lower median of `key`; None without pairs."""
    ranked = sorted(pairs, key=key)
    return ranked[(len(ranked) - 1) // 2] if ranked else None


def _row(phase: str, events: int, drain: Drain) -> Row:
    got = drain.throughput
    return Row(phase, None, events, got.delivered, got.events_per_s, *drain.cores)


async def run_phase(work: Path, events: int, prefill: Prefill, *, pairs: int = PAIRS) -> TlsCost:
    """Drain `events` pre-filled by `prefill(settings, topic, prefix)` in plaintext and through
    TLS, `pairs` times, each drain on a fresh broker, the order alternating pair by pair."""
    say(f"2c. TLS: connector throughput in plaintext and through a TLS listener ({pairs} pairs)")
    work.mkdir(parents=True, exist_ok=True)
    missing = stunnel_missing()
    if missing is not None:
        say(f"   TLS skipped: {missing}")
        return TlsCost(await _plain(work / "plain", events, prefill), skipped=missing)
    done: list[Pair] = []
    for index in range(pairs):
        if index % 2 == 0:
            plain = await _plain(work / f"plain{index}", events, prefill)
            tls = await _tls(work / f"tls{index}", events, prefill)
        else:
            tls = await _tls(work / f"tls{index}", events, prefill)
            plain = await _plain(work / f"plain{index}", events, prefill)
        done.append(Pair(plain, tls))
        say(
            f"   pair {index + 1}: plaintext {plain.throughput.events_per_s:.0f}/s,"
            f" TLS {tls.throughput.events_per_s:.0f}/s, ratio {done[-1].ratio:.2f}"
            f" (raw consumer {plain.ceiling_events_per_s:.0f}/s, {tls.ceiling_events_per_s:.0f}/s,"
            f" {done[-1].ceiling_ratio:.2f}; the connector's CPU an event"
            f" {plain.throughput.cpu_per_event_us:.2f} and {tls.throughput.cpu_per_event_us:.2f} µs,"
            f" {done[-1].cpu_ratio:.2f})"
        )
    cost = TlsCost(plain_only=None, pairs=tuple(done))
    say(
        f"   tls_over_plain {cost.tls_over_plain:.2f} (the median of"
        f" {', '.join(f'{pair.ratio:.2f}' for pair in done)}); the raw consumer's"
        f" {cost.ceiling_tls_over_plain:.2f}; by the connector's CPU {cost.cpu_tls_over_plain:.2f}"
    )
    return cost


async def _plain(work: Path, events: int, prefill: Prefill) -> Drain:
    work.mkdir(parents=True, exist_ok=True)
    with LocalBroker(log_path=work / "broker.log") as broker:
        return await _drain(
            work, KafkaSettings(bootstrap=broker.bootstrap), events, prefill, "plain"
        )


async def _tls(work: Path, events: int, prefill: Prefill) -> Drain:
    work.mkdir(parents=True, exist_ok=True)
    with TlsKafka(work) as listener:
        return await _drain(work, listener.settings(), events, prefill, "tls")


async def _drain(
    work: Path, settings: KafkaSettings, events: int, prefill: Prefill, label: str
) -> Drain:
    topic, prefix = f"bench.{label}", f"{label}"
    await prefill(settings, topic, prefix)
    raw = await ceiling.consume_and_commit(
        settings, topic, events=events, group_id=f"bench.ceiling.{label}", timeout_s=300
    )
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
    return Drain(drained, cores, raw)
