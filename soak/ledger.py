"""The soak's own count, by event id: what was accepted, what each destination answered 2xx, and when.

An hour at thousands of events a second is tens of millions of ids: each source (`k` straight
to Kafka, `t` tenants, `i` through ingest) numbers its events `SOURCE-SEQ`, and the ledger keeps
arrays indexed by SEQ (the minute an accepted event belongs to, its deliveries) instead of sets
of strings, and the lag of each first delivery in its event-time minute.

An event accepted once can still be in its source topic twice: a batch ingest answered 503 (or a
producer retried) after the broker wrote it, resent and written again. The auditors count
records, so at the end the run reads its source topics and counts each id's records (`written`):
what an auditor must count in a minute is then the records of its accepted ids.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from chaos.audit import MINUTE_MS, Expected, minute_of
from devstack.destination import Delivery

_MAX_COUNT = 255  # deliveries of one id are counted up to this


@dataclass(frozen=True)
class Lags:
    """The lag of one event-time minute's first deliveries."""

    events: int
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None


class _Source:
    """One source's events by SEQ: 0 = not accepted, else 1 + its minute's index."""

    def __init__(self, dest: str) -> None:
        self.dest = dest
        self.minute = array("H")
        self.deliveries = bytearray()
        self.copies = bytearray()  # records of each SEQ found in the source topic

    def arrays(
        self,
    ) -> tuple[np.ndarray[Any, np.dtype[np.uint16]], np.ndarray[Any, np.dtype[np.uint8]]]:
        """The minute and delivery arrays as numpy views (for the account at the end)."""
        return np.frombuffer(self.minute, dtype=np.uint16), np.frombuffer(
            self.deliveries, dtype=np.uint8
        )

    def grow(self, seq: int) -> None:
        if seq >= len(self.deliveries):
            more = max(seq + 1 - len(self.deliveries), len(self.deliveries) // 2, 65_536)
            self.deliveries.extend(bytes(more))
            self.copies.extend(bytes(more))
            self.minute.extend(array("H", bytes(2 * more)))


class Ledger:
    """Accepted events and their deliveries, by source and sequence; `on_delivery` is the
    destinations' hook (`devstack.destination.DeliveryHook`)."""

    def __init__(self, started_ms: int, sources: Mapping[str, str]) -> None:
        """`sources`: each source's letter and the destination its events go to."""
        self.started_ms = minute_of(started_ms)
        self._sources = {letter: _Source(dest) for letter, dest in sources.items()}
        self._lags: dict[int, array[int]] = {}  # event-time minute (epoch ms) -> first lags
        self.repeats_by_s: Counter[int] = Counter()  # epoch second -> deliveries beyond the first
        self.foreign = 0  # deliveries of ids no source of this run made
        self.first_deliveries = 0  # ids answered 2xx, accepted yet or not (a running count)
        self.topics_read = False  # whether `written` counted the source topics' records

    def accepted(self, source: str, seq: int, event_ms: int) -> None:
        """SEQ of `source` was accepted (acks=all, or ingest's 2xx) with this event time."""
        entry = self._sources[source]
        entry.grow(seq)
        entry.minute[seq] = 1 + (minute_of(event_ms) - self.started_ms) // MINUTE_MS

    def accepted_all(self, source: str, events: Iterable[tuple[int, int]]) -> None:
        for seq, event_ms in events:
            self.accepted(source, seq, event_ms)

    def on_delivery(self, deliveries: Sequence[Delivery]) -> None:
        for delivery in deliveries:
            source, _, number = delivery.id.partition("-")
            entry = self._sources.get(source)
            if entry is None or not number.isdigit():
                self.foreign += 1
                continue
            seq = int(number)
            entry.grow(seq)
            count = entry.deliveries[seq]
            if count < _MAX_COUNT:
                entry.deliveries[seq] = count + 1
            if count:
                self.repeats_by_s[delivery.received_ms // 1000] += 1
                continue
            self.first_deliveries += 1
            if isinstance(delivery.event_time, int):
                lags = self._lags.setdefault(minute_of(delivery.event_time), array("I"))
                lags.append(max(0, delivery.received_ms - delivery.event_time))

    def written(self, event_ids: Iterable[str]) -> None:
        """One record of each of `event_ids` was found in its source topic."""
        self.topics_read = True
        for event_id in event_ids:
            source, _, number = event_id.partition("-")
            entry = self._sources.get(source)
            if entry is None or not number.isdigit():
                continue
            seq = int(number)
            entry.grow(seq)
            entry.copies[seq] = min(entry.copies[seq] + 1, _MAX_COUNT)

    def written_again(self) -> int:
        """Records in the source topics beyond the first of an accepted id."""
        total = 0
        for entry in self._sources.values():
            minute = entry.arrays()[0]
            copies = np.frombuffer(entry.copies, dtype=np.uint8).astype(np.int64)
            total += int(np.clip(copies - 1, 0, None)[minute > 0].sum())
        return total

    def delivered(self, source: str, seq: int) -> bool:
        entry = self._sources[source]
        return seq < len(entry.deliveries) and entry.deliveries[seq] > 0

    def missing(self) -> dict[str, list[int]]:
        """Per source, the accepted sequences no destination answered 2xx for (yet)."""
        found: dict[str, list[int]] = {}
        for letter, entry in self._sources.items():
            minute, deliveries = entry.arrays()
            found[letter] = np.flatnonzero((minute > 0) & (deliveries == 0)).tolist()
        return found

    def accepted_count(self) -> int:
        return sum(int(np.count_nonzero(e.arrays()[0])) for e in self._sources.values())

    def delivered_count(self) -> int:
        """Accepted events answered 2xx at least once."""
        total = 0
        for entry in self._sources.values():
            minute, deliveries = entry.arrays()
            total += int(np.count_nonzero((minute > 0) & (deliveries > 0)))
        return total

    def duplicates(self) -> int:
        """Deliveries beyond the first, of every id."""
        total = 0
        for entry in self._sources.values():
            deliveries = entry.arrays()[1].astype(np.int64)
            total += int(np.clip(deliveries - 1, 0, None).sum())
        return total

    def lags(self) -> dict[int, Lags]:
        """Each event-time minute's lag percentiles (nearest rank), oldest first."""
        return {minute: percentiles(self._lags[minute]) for minute in sorted(self._lags)}

    def expected_minutes(
        self, dead_lettered: Mapping[str, Collection[str]]
    ) -> dict[str, dict[int, Expected]]:
        """Per destination, per event-time minute: what its auditor must count there (accepted
        events, those delivered, those only dead-lettered); `dead_lettered`: per destination,
        the ids in its DLQ. Once the source topics were read (`written`), an event counts once
        per record of it there, as the auditors count."""
        found: dict[str, dict[int, Expected]] = {}
        for letter, entry in self._sources.items():
            minutes = found.setdefault(entry.dest, {})
            minute, deliveries = entry.arrays()
            accepted = minute > 0
            dead = np.zeros(len(minute), dtype=bool)
            for event_id in dead_lettered.get(entry.dest, ()):
                source, _, number = event_id.partition("-")
                if source == letter and number.isdigit() and int(number) < len(dead):
                    dead[int(number)] = True
            columns = (
                accepted,
                accepted & (deliveries > 0),
                accepted & (deliveries == 0) & dead,
            )
            records = np.ones(len(minute), dtype=np.int64)
            if self.topics_read:  # an accepted event is in its topic at least once
                records = np.maximum(np.frombuffer(entry.copies, dtype=np.uint8), 1)
            entered, delivered, only_dead = (
                np.bincount(minute[mask], weights=records[mask], minlength=1).astype(np.int64)
                for mask in columns
            )
            for index in np.flatnonzero(entered):
                at = self.started_ms + (int(index) - 1) * MINUTE_MS
                expected = minutes.setdefault(at, Expected())
                expected.entered += int(entered[index])
                expected.delivered += int(delivered[index]) if index < len(delivered) else 0
                expected.dead_lettered += int(only_dead[index]) if index < len(only_dead) else 0
        return found


def percentiles(values: array[int]) -> Lags:
    """Nearest-rank p50, p95 and p99 of `values` (ms), and how many there are."""
    ordered = sorted(values)
    if not ordered:
        return Lags(0, None, None, None)

    def rank(share: float) -> float:
        return float(ordered[max(0, math.ceil(share * len(ordered)) - 1)])

    return Lags(len(ordered), rank(0.50), rank(0.95), rank(0.99))
