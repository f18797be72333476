"""The short version of `make bench`'s TLS phase: the same drain in plaintext and through stunnel,
in two pairs of alternating order, the ratio the median pair's."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import load, tls_cost
from devstack.tls import stunnel_missing
from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EVENTS = 20_000


async def _prefill(settings: KafkaSettings, topic: str, prefix: str) -> None:
    await kafka_admin.ensure_topics(settings, [topic], partitions=2)
    await load.prefill(settings, topic, partitions=2, events=EVENTS, prefix=prefix)


async def test_both_drains_deliver_everything_and_the_ratio_is_measured(tmp_path: Path) -> None:
    missing = stunnel_missing()
    if missing:
        pytest.skip(missing)
    cost = await tls_cost.run_phase(tmp_path / "tls", EVENTS, _prefill, pairs=2)  # dir made
    assert cost.tls is not None
    assert len(cost.pairs) == 2
    assert all(pair.tls.throughput.delivered >= EVENTS for pair in cost.pairs)
    assert cost.tls_over_plain == min(pair.ratio for pair in cost.pairs)  # the lower median
    assert cost.report()["pair_ratios"] == [pair.ratio for pair in cost.pairs]
    # the raw consumer read each drain's topic first, through the same listener
    assert all(pair.plain.ceiling_events_per_s > 0 for pair in cost.pairs)
    assert all(pair.tls.ceiling_events_per_s > 0 for pair in cost.pairs)
    assert cost.ceiling_tls_over_plain == min(pair.ceiling_ratio for pair in cost.pairs)
    assert cost.report()["ceiling_pair_ratios"] == [pair.ceiling_ratio for pair in cost.pairs]
    # and the connector's own cost of TLS, by its CPU an event in each drain
    assert all(pair.cpu_ratio > 0 for pair in cost.pairs)
    assert cost.cpu_tls_over_plain == min(pair.cpu_ratio for pair in cost.pairs)
    assert cost.report()["cpu_pair_ratios"] == [pair.cpu_ratio for pair in cost.pairs]
    assert cost.plain.delivered >= EVENTS
    assert cost.tls.delivered >= EVENTS
    assert cost.tls_over_plain is not None
    assert cost.tls_over_plain > 0
    # the connector's CPU over its deliveries is sampled (the tenant phase's CPU per request)
    assert 0 < cost.plain.cpu_s < 60
    assert cost.plain.cpu_per_event_us > 0
    assert [row.phase for row in cost.rows(EVENTS)] == [
        "connector throughput, plaintext (median pair)",
        "connector throughput, TLS via stunnel (median pair)",
    ]
