"""The topics hifi creates keep their records as long as hifi may need them."""

from __future__ import annotations

from pathlib import Path

from config.topics import ensure_destination_topics, retention_wanted
from hifi.check import too_short
from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings
from tests.helpers import make_destination

DAY_MS = 86_400_000


async def test_created_topics_carry_their_retention(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str
) -> None:
    """Retry and tier topics keep records max_retry_age_s plus a day; the DLQ and its replay
    records dlq_retention_days."""
    dest = make_destination(
        catalog_dir,
        unique,
        "http://127.0.0.1:1/",
        unique,
        max_retry_age_s=7200,
        dlq_retention_days=45,
    )
    tiers = [f"{unique}.retry_tier0"]
    await ensure_destination_topics(kafka_settings, dest, tiers)
    found = await kafka_admin.retention_ms(kafka_settings, sorted(retention_wanted(dest, tiers)))
    assert found == {
        dest.retry_in_topic: 7_200_000 + DAY_MS,
        dest.retry_out_topic: 7_200_000 + DAY_MS,
        tiers[0]: 7_200_000 + DAY_MS,
        dest.dlq_topic: 45 * DAY_MS,
        dest.dlq_replays_topic: 45 * DAY_MS,
    }


async def test_dlq_retention_zero_keeps_dead_letters_forever(
    kafka_settings: KafkaSettings, catalog_dir: Path, unique: str
) -> None:
    """dlq_retention_days = 0 creates the DLQ and its replay records with retention.ms -1 (no
    deletion by time)."""
    dest = make_destination(
        catalog_dir, unique, "http://127.0.0.1:1/", unique, dlq_retention_days=0
    )
    await ensure_destination_topics(kafka_settings, dest)
    topics = [dest.dlq_topic, dest.dlq_replays_topic]
    assert await kafka_admin.retention_ms(kafka_settings, topics) == dict.fromkeys(topics, -1)


def test_too_short_compares_with_what_is_wanted() -> None:
    """Shorter than wanted, or finite where forever is wanted, is too short; unknown is not."""
    assert too_short(DAY_MS, 2 * DAY_MS)
    assert too_short(30 * DAY_MS, -1)
    assert not too_short(-1, 2 * DAY_MS)
    assert not too_short(None, 2 * DAY_MS)
    assert not too_short(3 * DAY_MS, 2 * DAY_MS)
