"""Small archives for the reconciliation tests, written with the auditor's own archive writer."""

from __future__ import annotations

import uuid
from pathlib import Path

from auditor.archive import Archive, EnteredColumns, write_settings
from config.destination import Accounting
from hifi.accounting.buckets import MINUTE_MS
from hifi.audit import FORMAT_MAJOR, FORMAT_MINOR, Fact, Slice
from hifi.vocabulary import Outcome, Reason

T0 = 1_790_000_000_000 - 1_790_000_000_000 % 86_400_000 + 10 * 3_600_000  # 10:00 UTC on a day
DAY = "2026-09-21"  # T0's date
TOPIC = "orders"


class Built:
    """An archive being written: entered rows and facts of one destination, then `close()`."""

    def __init__(
        self, root: Path, dest: str = "shop", *, settle_s: float = 60.0, lag_sla_s: float = 1.0
    ) -> None:
        self.root, self.dest = root, dest
        self.archive = Archive(root)
        settings = Accounting(settle_s=settle_s, lag_sla_s=lag_sla_s, retention_min=60)
        write_settings(root, dest, settings.model_dump(), now_ms=T0)

    def enter(
        self,
        minute_ms: int,
        offsets: list[int],
        *,
        partition: int = 0,
        event_ms: int | None = None,
        ids: list[str | None] | None = None,
        kafka_ms: int | None = None,
        problem: str | None = None,
        epoch: int = 0,
    ) -> None:
        at = minute_ms + 1000 if event_ms is None else event_ms
        n = len(offsets)
        columns = EnteredColumns(
            [minute_ms] * n,
            list(offsets),
            ids if ids is not None else [f"{TOPIC}-{partition}-{o}" for o in offsets],
            [at] * n,
            [kafka_ms if kafka_ms is not None else at + 5] * n,
            [problem] * n,
        )
        self.archive.entered_many(self.dest, TOPIC, partition, at + 50, columns, epoch=epoch)

    def fact(
        self,
        outcome: Outcome,
        offsets: list[int],
        *,
        at_ms: int,
        minute_ms: int,
        partition: int = 0,
        event_ms: int | None = None,
        reason: Reason | None = None,
        fact_id: str | None = None,
        taken_ms: int | None = None,
        node: str = "connector@test:1",
        epoch: int = 0,
    ) -> Fact:
        at = minute_ms + 1000 if event_ms is None else event_ms
        n = len(offsets)
        part = Slice(
            TOPIC,
            partition,
            list(offsets),
            [f"{TOPIC}-{partition}-{o}" for o in offsets],
            [at] * n,
            [at + 10 if taken_ms is None else taken_ms] * n,
        )
        fact = Fact(
            FORMAT_MAJOR,
            FORMAT_MINOR,
            fact_id or uuid.uuid4().hex,
            self.dest,
            node,
            str(outcome),
            None if reason is None else str(reason),
            None,
            at_ms,
            [part],
        )
        self.archive.outcomes(self.dest, [minute_ms] * n, fact, part, epoch=epoch)
        return fact

    def again(self, fact: Fact, minute_ms: int) -> None:
        """The same fact archived a second time (a crash repeats a roll)."""
        for part in fact.slices:
            self.archive.outcomes(self.dest, [minute_ms] * len(part.offsets), fact, part)

    def close(self) -> None:
        self.archive.take().write()


def minute(index: int) -> int:
    return T0 + index * MINUTE_MS


def small_archive(root: Path) -> Path:
    """One destination over three minutes: 8 delivered, a dead letter, 2 missing (one in a
    minute of its own)."""
    built = Built(root)
    m0 = minute(0)
    built.enter(m0, list(range(8)))
    built.fact(Outcome.DELIVERED, list(range(6)), at_ms=m0 + 1400, minute_ms=m0)
    built.fact(Outcome.DEAD_LETTERED, [6], at_ms=m0 + 1400, minute_ms=m0, reason=Reason.REDIRECT)
    built.enter(minute(3), [8, 9])
    built.fact(Outcome.DELIVERED, [8, 9], at_ms=minute(3) + 1100, minute_ms=minute(3))
    built.enter(minute(30), [10])
    built.close()
    return root
