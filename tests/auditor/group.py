"""Builders of the auditor-group tests: a destination over four partitions, a minute that becomes
final when the test says, members of one group and a single auditor beside them."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from auditor.daemon import Auditor
from config.destination import Destination
from hifi.accounting.tables import iso_minute
from hifi.kafka import admin as kafka_admin
from hifi.kafka.settings import KafkaSettings
from tests.auditor.support import (
    COUNTS,
    JUDGEMENT,
    audited_destination,
    by_minute,
    last_minute_final_in,
)

PARTITIONS = 4
FIGURES = (*COUNTS, *JUDGEMENT)


@dataclass(frozen=True)
class Scene:
    """One destination, its audit topic, and where its group of auditors keeps its archive."""

    dest: Destination
    settings: KafkaSettings
    audit_topic: str
    group_id: str
    work: Path
    minute_ms: int  # the minute of the test's events; final about `final_in_s` after the start

    def member(self) -> Auditor:
        """A member of the group (all share one archive)."""
        return self._auditor(self.group_id, self.work / "archive")

    def single(self) -> Auditor:
        """An auditor alone in its group, over every partition: the reference."""
        return self._auditor(f"{self.group_id}.single", self.work / "single")

    def _auditor(self, group_id: str, archive: Path) -> Auditor:
        return Auditor(
            [self.dest],
            self.settings,
            archive_dir=archive,
            roll_s=0.5,
            topic=self.audit_topic,
            group_id=group_id,
            metrics_port=0,
        )

    def events(self, prefix: str, count: int) -> list[dict[str, Any]]:
        """`count` events of the scene's minute, keyed by id over the partitions."""
        at_ms = self.minute_ms + 30_000
        return [{"id": f"{prefix}-{i}", "event_time": at_ms, "seq": i} for i in range(count)]


async def scene(
    settings: KafkaSettings, catalog_dir: Path, work: Path, name: str, url: str, final_in_s: float
) -> Scene:
    """A destination whose events (of the last minute) become final `final_in_s` from now:
    its `settle_s` is set so (a settled minute's row does not wait a minute's end in a test)."""
    minute_ms, settle_s = last_minute_final_in(final_in_s)
    await kafka_admin.ensure_topics(settings, [name], partitions=PARTITIONS)
    dest = audited_destination(
        catalog_dir, name, url, name, settle_s=settle_s, lag_sla_s=600.0, retention_min=30
    )
    return Scene(dest, settings, f"{name}.audit", f"{name}.auditors", work, minute_ms)


def figures(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return by_minute(rows, FIGURES)


def truth(scene: Scene, entered: int, missing: int = 0) -> dict[str, Mapping[str, Any]]:
    """What the run counted of the scene's minute: everything entered delivered but `missing`."""
    return {
        iso_minute(scene.minute_ms): {
            "entered": entered,
            "delivered": entered - missing,
            "missing": missing,
            "in_retry": 0,
            "final": True,
        }
    }


def cut(table: Mapping[str, Mapping[str, Any]], keys: Mapping[str, Any]) -> dict[str, Any]:
    """Each minute of `table` cut to the keys of `keys`' minutes."""
    first = next(iter(keys.values()))
    return {minute: {k: row[k] for k in first} for minute, row in table.items()}


async def owning(member: Auditor, timeout_s: float = 30.0) -> set[Any]:
    """Wait until `member` owns shares and is not between two assignments; its shares."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        accounts = member.accounts
        if accounts is not None and accounts.shares and not accounts.rebalancing:
            return set(accounts.shares)
        assert loop.time() < deadline, "the member never got its shares"
        await asyncio.sleep(0.1)
