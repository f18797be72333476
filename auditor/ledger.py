"""One destination's accounts: what entered, what became of each event, per 1-minute event-time bucket.

Loss is a set difference. The auditor observes every record entering a destination's source
topics itself, and notes it by origin (`topic/partition/offset`) in the bucket of its event
time: one roaring bitmap of offsets per partition and minute. The audit facts of the
connector and the retrier set bits in per-partition outcome bitmaps (delivered, dead-lettered
by reason, filtered, handed off). A bucket's counts are intersections of the two, so 15
million events waiting to settle cost a few bytes each, and ids are resolved (from the
archive) only for what is missing.

A bucket is provisional until `settle_s` after its minute ends, measured on the auditor's
progress clock (`Ledger.advance`): what it has read, not the wall clock, so an auditor that
catches up after an outage settles minutes only once it has read what was written in them.
When a bucket settles its counts, percentiles and availability are fixed and only the events
without a final outcome (waiting in the retrier, or missing) stay in memory; a later outcome
for one of them still moves it from `in_retry` (or `missing`) to `delivered` or
`dead_lettered`.

End-to-end lag is the 2xx time minus the event time, over the first delivery of each event;
percentiles are exact (nearest rank). Lag-in (taken in at the connector minus event time) and
the connector's process duration (2xx time minus taken in) are approximate: a log-spaced
histogram with 2 % wide bins.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from operator import sub
from typing import Any

import msgspec
from pyroaring import BitMap

from config.catalog import Accounting
from hifi.audit import Fact
from hifi.vocabulary import Outcome

MINUTE_MS = 60_000
# An event time further ahead of the record's Kafka timestamp than this is a clock problem.
FUTURE_TOLERANCE_MS = 60_000
LATE_RATIO_MAX = 0.05  # a final minute with more undelivered (waiting) events than this is late
_LAG_MAX_MS = 2**31 - 1
_HIST_GROWTH = 1.02  # bin width of the approximate histograms
_HIST_BINS = int(math.log(86_400_000) / math.log(_HIST_GROWTH)) + 2  # 1 ms .. 1 day
MAX_MISSING_IDS = 1000  # ids of missing events named per final minute (live and in the reconciliation)
SEEN_FACTS_KEEP_MS = (
    30 * MINUTE_MS
)  # a repeated fact comes within minutes (a producer retry, a crash)

Partition = tuple[str, int]


class Problem(StrEnum):
    """Why an entered record is odd (counted per destination; the `problem` of its archive row)."""

    #: not one JSON object of UTF-8 text; accounted by origin, the connector dead-letters it
    MALFORMED = "malformed"
    #: larger than `max_batch_bytes`; the connector dead-letters it
    TOO_LARGE = "too_large"
    #: no readable id: accounted by origin
    NO_ID = "no_id"
    #: event time more than a minute ahead of the Kafka timestamp: bucketed by the Kafka timestamp
    TIME_FUTURE = "time_future"
    #: event time in a minute already final: bucketed by the Kafka timestamp
    TIME_PAST = "time_past"


def minute_of(epoch_ms: int) -> int:
    return epoch_ms - epoch_ms % MINUTE_MS


def rank_of(pct: int, n: int) -> int:
    """The nearest rank of the `pct` percentile among `n` values, 1-based: ceil(pct * n / 100),
    in integers (no float rounding), at least 1. Spark's and DuckDB's checks use the same rule."""
    return max(1, -(-pct * n // 100))


def nearest_rank(sorted_values: array[int] | list[int], pct: int) -> int | None:
    """The `pct` percentile by nearest rank: the smallest value with at least pct % at or below."""
    n = len(sorted_values)
    if n == 0:
        return None
    return int(sorted_values[rank_of(pct, n) - 1])


def nearest_rank_counted(counted: list[tuple[int, int]], pct: int) -> int | None:
    """`nearest_rank` over (value, how many) pairs sorted by value: the same answer as over the
    values one by one."""
    total = sum(count for _, count in counted)
    if total == 0:
        return None
    rank = rank_of(pct, total)
    seen = 0
    for value, count in counted:
        seen += count
        if seen >= rank:
            return value
    return None


def _bin(value_ms: int) -> int:
    return 0 if value_ms < 1 else min(_HIST_BINS - 1, 1 + int(math.log(value_ms, _HIST_GROWTH)))


class LogHistogram:
    """Counts of milliseconds in log-spaced bins; percentiles within 2 %."""

    __slots__ = ("counts",)

    def __init__(self, counts: array[int] | None = None) -> None:
        self.counts = counts if counts is not None else array("q", bytes(8 * _HIST_BINS))

    def add(self, value_ms: int) -> None:
        self.counts[_bin(value_ms)] += 1

    def add_many(self, values_ms: Iterable[int]) -> None:
        """Add values, one logarithm per distinct value (a fact's events share a few)."""
        counts = self.counts
        for value_ms, n in Counter(values_ms).items():
            counts[_bin(value_ms)] += n

    def percentile(self, pct: float) -> int | None:
        total = sum(self.counts)
        if total == 0:
            return None
        rank = max(1, math.ceil(pct / 100 * total))
        seen = 0
        for index, count in enumerate(self.counts):
            seen += count
            if seen >= rank:
                return 0 if index == 0 else round(_HIST_GROWTH ** (index - 0.5))
        return None


@dataclass(slots=True)
class Counts:
    """A bucket's table row, counted."""

    entered: int = 0
    delivered: int = 0
    dead_lettered_by_reason: dict[str, int] = field(default_factory=dict)
    filtered: int = 0
    in_retry: int = 0
    missing: int = 0

    @property
    def dead_lettered(self) -> int:
        return sum(self.dead_lettered_by_reason.values())


def judge(
    counts: Counts, lag_p95_ms: int | None, on_time: int, settings: Accounting
) -> tuple[bool, str | None]:
    """Whether a final minute was up, and if not why (`loss` or `lag`): no event missing, p95
    end-to-end lag within `lag_sla_s`, and at most 5 % of its events (dead letters and filtered
    ones aside) late: waiting when it became final, or delivered after (`on_time` counts the
    first deliveries at most `settle_s` after the minute ended). The reconciliation judges
    with this too."""
    if counts.missing:
        return False, "loss"
    undelivered = counts.entered - counts.dead_lettered - counts.filtered
    late = max(counts.in_retry + counts.missing, undelivered - on_time)
    late_ratio = late / undelivered if undelivered > 0 else 0.0
    if (lag_p95_ms is not None and lag_p95_ms > settings.lag_sla_s * 1000) or (
        late_ratio > LATE_RATIO_MAX
    ):
        return False, "lag"
    return True, None


@dataclass(slots=True)
class Lags:
    """A bucket's lag figures in milliseconds; None when nothing was delivered."""

    p50_ms: int | None = None
    p95_ms: int | None = None
    p99_ms: int | None = None
    lag_in_p95_ms: int | None = None
    process_p95_ms: int | None = None


class Outcomes:
    """What the facts say of the events of one origin partition, by offset."""

    __slots__ = ("dead", "dead_by_reason", "delivered", "filtered", "handed")

    def __init__(self) -> None:
        self.delivered = BitMap()
        self.dead = BitMap()
        self.dead_by_reason: dict[str, BitMap] = {}
        self.filtered = BitMap()
        self.handed = BitMap()  # handed off to the retrier (or re-offered by it) at least once

    def resolved(self) -> BitMap:
        return self.delivered | self.dead | self.filtered

    def forget(self, offsets: BitMap) -> None:
        for bitmap in (self.delivered, self.dead, self.filtered, self.handed):
            bitmap.difference_update(offsets)
        for bitmap in self.dead_by_reason.values():
            bitmap.difference_update(offsets)

    def forget_below(self, offset: int) -> None:
        """Drop what no bucket can ask about any more: offsets below every remaining bucket's."""
        if offset <= 0:
            return
        for bitmap in (self.delivered, self.dead, self.filtered, self.handed):
            bitmap.remove_range(0, offset)
        for bitmap in self.dead_by_reason.values():
            bitmap.remove_range(0, offset)

    def is_empty(self) -> bool:
        return not (self.delivered or self.dead or self.filtered or self.handed)


@dataclass(slots=True)
class Bucket:
    """One destination minute (UTC, by event time)."""

    minute_ms: int
    entered: dict[Partition, BitMap] = field(default_factory=dict)
    problems: Counter[str] = field(default_factory=Counter)
    # end-to-end lag of the first deliveries, as ms -> how many: exact percentiles for a few
    # bytes per distinct value instead of 4 per event
    lags_ms: dict[int, int] = field(default_factory=dict)
    lag_in: LogHistogram = field(default_factory=LogHistogram)
    process: LogHistogram = field(default_factory=LogHistogram)
    duplicates: int = 0
    on_time: int = 0  # first deliveries at most settle_s after the minute ended
    final: bool = False
    # once final
    counts: Counts | None = None
    lags: Lags | None = None
    waiting: dict[Partition, BitMap] = field(default_factory=dict)  # no final outcome yet
    retrying: dict[Partition, BitMap] = field(default_factory=dict)  # waiting, handed off
    up: bool | None = None
    down_reason: str | None = None  # "loss" or "lag" (late events are lag)
    missing_ids: list[str] | None = None  # resolved from the archive, when any are missing

    @property
    def end_ms(self) -> int:
        return self.minute_ms + MINUTE_MS

    def entered_count(self) -> int:
        return sum(len(bitmap) for bitmap in self.entered.values())

    def waiting_count(self) -> int:
        return sum(len(bitmap) for bitmap in self.waiting.values())


@dataclass(slots=True)
class Settled:
    """A bucket that became final in one `advance()`, with what it means for alarms and metrics."""

    bucket: Bucket
    loss_ratio: float
    alarm: bool


@dataclass(slots=True)
class Change:
    """Counts a late outcome moved in a final bucket (for the metrics' counters)."""

    minute_ms: int
    delivered: int = 0
    dead_lettered: int = 0
    filtered: int = 0


class Ledger:
    """The accounts of one destination; fed by the auditor's event loop only."""

    def __init__(self, dest: str, settings: Accounting) -> None:
        self.dest = dest
        self.settings = settings
        self.buckets: dict[int, Bucket] = {}
        self.outcomes: dict[Partition, Outcomes] = {}
        self.seen_facts: dict[str, int] = {}  # fact id -> outcome time, recent ones
        self.first_minute_ms: int | None = None  # the first minute this ledger ever held
        self.closed_before_ms = 0  # minutes before this are final or gone
        self.repeated_facts = 0
        self.unattributed_lags = 0  # first deliveries whose minute was final already
        self.down_minutes: dict[int, str] = {}  # final down minutes of the last 24 h: reason
        self.last_final_ms: int | None = None  # start of the newest final minute

    # --- what entered ------------------------------------------------------------------

    def bucket_for_entry(self, event_time_ms: int, kafka_ms: int) -> tuple[int, Problem | None]:
        """The minute an entered event is counted in, and why not its event time's, if so."""
        if event_time_ms > kafka_ms + FUTURE_TOLERANCE_MS:
            return minute_of(kafka_ms), Problem.TIME_FUTURE
        minute = minute_of(event_time_ms)
        if minute < self.closed_before_ms:
            return max(minute_of(kafka_ms), self.closed_before_ms), Problem.TIME_PAST
        return minute, None

    def buckets_for_entries(
        self, event_times_ms: list[int], kafka_ms: list[int]
    ) -> tuple[list[int], list[str | None]]:
        """`bucket_for_entry` for the events of one poll: their minutes, and their problems
        (all None in the common case, found with two C-level scans)."""
        minutes = [t - t % MINUTE_MS for t in event_times_ms]
        problems: list[str | None] = [None] * len(minutes)
        if minutes and (
            min(minutes) < self.closed_before_ms
            or max(map(sub, event_times_ms, kafka_ms)) > FUTURE_TOLERANCE_MS
        ):
            for i, (event_ms, at_ms) in enumerate(zip(event_times_ms, kafka_ms, strict=True)):
                minutes[i], problems[i] = self.bucket_for_entry(event_ms, at_ms)
        return minutes, problems

    def enter(self, minute_ms: int, tp: Partition, offsets: Iterable[int]) -> None:
        """Note records that entered `tp`, all of one minute (idempotent by offset)."""
        bucket = self._open_bucket(minute_ms)
        bitmap = bucket.entered.get(tp)
        if bitmap is None:
            bitmap = bucket.entered[tp] = BitMap()
        bitmap.update(offsets)

    def note_problem(self, minute_ms: int, problem: Problem, count: int = 1) -> None:
        self._open_bucket(minute_ms).problems[problem] += count

    def _open_bucket(self, minute_ms: int) -> Bucket:
        bucket = self.buckets.get(minute_ms)
        if bucket is None:
            bucket = self.buckets[minute_ms] = Bucket(minute_ms)
            if self.first_minute_ms is None or minute_ms < self.first_minute_ms:
                self.first_minute_ms = minute_ms
        return bucket

    # --- what became of it -------------------------------------------------------------

    def apply(self, fact: Fact) -> list[Change]:
        """Take one audit fact in; a repeated fact (same `fact_id`) counts once."""
        if fact.fact_id in self.seen_facts:
            self.repeated_facts += 1
            return []
        self.seen_facts[fact.fact_id] = fact.outcome_ms
        outcome = fact.outcome
        changes: dict[int, Change] = {}
        for part in fact.slices:
            tp = (part.topic, part.partition)
            offsets = BitMap(part.offsets)
            known = self.outcomes.get(tp)
            if known is None:
                known = self.outcomes[tp] = Outcomes()
            self._resolve_waiting(tp, offsets, fact, changes)
            if outcome == Outcome.DELIVERED:
                first = offsets - known.delivered
                known.delivered |= offsets
                if len(first) != len(part.offsets) or not self._note_on_time_minute(
                    part.event_times_ms, part.taken_ms, fact.outcome_ms
                ):
                    self._note_deliveries(
                        part.offsets, part.event_times_ms, part.taken_ms, first, fact
                    )
            elif outcome == Outcome.DEAD_LETTERED:
                known.dead |= offsets
                reason = fact.reason or "unknown"
                by_reason = known.dead_by_reason.get(reason)
                if by_reason is None:
                    by_reason = known.dead_by_reason[reason] = BitMap()
                by_reason |= offsets
            elif outcome == Outcome.FILTERED:
                known.filtered |= offsets
            elif outcome in (Outcome.HANDED_OFF, Outcome.RE_OFFERED):
                known.handed |= offsets
        return list(changes.values())

    def _note_deliveries(
        self,
        offsets: list[int],
        event_times_ms: list[int],
        taken_ms: list[int],
        first: BitMap,
        fact: Fact,
    ) -> None:
        """Lag of each first delivery, and duplicates, in the bucket of the event's time.

        A delivery is judged by its own time, not by when the auditor reads it: one later than
        `settle_s` after its minute ended adds no lag and is not on time, so an auditor catching
        up after an outage judges a minute as one that read every fact as it was written.
        """
        done_ms = fact.outcome_ms
        settle_ms = round(self.settings.settle_s * 1000)
        closed_before = self.closed_before_ms
        all_first = len(first) == len(offsets)
        minute, bucket = -1, None
        timings: dict[int, tuple[Bucket, list[int], list[int]]] = {}  # minute: lag-in, process
        lag_in_ms: list[int] = []
        process_ms: list[int] = []
        for offset, event_ms, taken in zip(offsets, event_times_ms, taken_ms, strict=True):
            event_minute = event_ms - event_ms % MINUTE_MS
            if event_minute != minute:
                minute = event_minute
                bucket = self._lag_bucket(minute, closed_before, done_ms)
                if bucket is not None:
                    _, lag_in_ms, process_ms = timings.setdefault(minute, (bucket, [], []))
            if bucket is None:
                self.unattributed_lags += 1
                continue
            if not all_first and offset not in first:
                bucket.duplicates += 1
                continue
            if done_ms > bucket.end_ms + settle_ms:
                continue  # after the minute settled: late, judged as undelivered
            bucket.on_time += 1
            if taken and event_ms > taken + FUTURE_TOLERANCE_MS:
                continue  # a clock problem: no lag to speak of
            lag_ms = min(_LAG_MAX_MS, max(0, done_ms - event_ms))
            lags = bucket.lags_ms
            lags[lag_ms] = lags.get(lag_ms, 0) + 1
            if taken:
                lag_in_ms.append(taken - event_ms)
                process_ms.append(done_ms - taken)
        for bucket, lag_in, process in timings.values():
            bucket.lag_in.add_many(lag_in)
            bucket.process.add_many(process)

    def _note_on_time_minute(
        self, event_times_ms: list[int], taken_ms: list[int], done_ms: int
    ) -> bool:
        """`_note_deliveries` for the common slice, a column at a time: first deliveries of
        one minute, on time, every event with its taken-in time and no clock problem. False
        (nothing noted) for any other slice."""
        if not event_times_ms or not min(taken_ms):
            return False
        minute = minute_of(event_times_ms[0])
        if min(event_times_ms) < minute or max(event_times_ms) >= minute + MINUTE_MS:
            return False
        if max(map(sub, event_times_ms, taken_ms)) > FUTURE_TOLERANCE_MS:
            return False
        bucket = self._lag_bucket(minute, self.closed_before_ms, done_ms)
        if bucket is None or done_ms > bucket.end_ms + round(self.settings.settle_s * 1000):
            return False
        bucket.on_time += len(event_times_ms)
        lags = bucket.lags_ms
        for lag_ms, count in Counter(map(done_ms.__sub__, event_times_ms)).items():
            lag_ms = min(_LAG_MAX_MS, max(0, lag_ms))
            lags[lag_ms] = lags.get(lag_ms, 0) + count
        bucket.lag_in.add_many(map(sub, taken_ms, event_times_ms))
        bucket.process.add_many(map(done_ms.__sub__, taken_ms))
        return True

    def _lag_bucket(self, minute_ms: int, closed_before_ms: int, done_ms: int) -> Bucket | None:
        if minute_ms < closed_before_ms or minute_ms > done_ms + FUTURE_TOLERANCE_MS:
            return None
        return self._open_bucket(minute_ms)

    def _resolve_waiting(
        self, tp: Partition, offsets: BitMap, fact: Fact, changes: dict[int, Change]
    ) -> None:
        """A late outcome for events of final buckets still waiting for one."""
        outcome = fact.outcome
        for bucket in self.buckets.values():
            waiting = bucket.waiting.get(tp)
            if not waiting or bucket.counts is None:
                continue
            hit = waiting & offsets
            if not hit:
                continue
            counts, n = bucket.counts, len(hit)
            retrying = bucket.retrying.setdefault(tp, BitMap())
            change = changes.setdefault(bucket.minute_ms, Change(bucket.minute_ms))
            if outcome in (Outcome.HANDED_OFF, Outcome.RE_OFFERED):
                new = hit - retrying
                retrying |= new
                counts.in_retry += len(new)
                counts.missing -= len(new)
                continue
            was_retrying = len(hit & retrying)
            counts.in_retry -= was_retrying
            counts.missing -= n - was_retrying
            waiting.difference_update(hit)
            retrying.difference_update(hit)
            if outcome == Outcome.DELIVERED:
                counts.delivered += n
                change.delivered += n
            elif outcome == Outcome.DEAD_LETTERED:
                reason = fact.reason or "unknown"
                by_reason = counts.dead_lettered_by_reason
                by_reason[reason] = by_reason.get(reason, 0) + n
                change.dead_lettered += n
            else:
                counts.filtered += n
                change.filtered += n

    # --- counting ------------------------------------------------------------------------

    def tally(self, bucket: Bucket) -> Counts:
        """The bucket's counts now: final ones as kept, provisional ones from the bitmaps."""
        if bucket.counts is not None:
            return bucket.counts
        counts = Counts()
        by_reason: Counter[str] = Counter()
        for tp, entered in bucket.entered.items():
            n = len(entered)
            counts.entered += n
            known = self.outcomes.get(tp)
            if known is None:
                counts.missing += n
                continue
            delivered = entered & known.delivered
            dead = (entered & known.dead) - delivered
            taken = BitMap(delivered)
            for reason, bitmap in known.dead_by_reason.items():
                mine = (dead & bitmap) - taken
                if mine:
                    by_reason[reason] += len(mine)
                    taken |= mine
            filtered = (entered & known.filtered) - delivered - dead
            retrying = (entered & known.handed) - delivered - dead - filtered
            counts.delivered += len(delivered)
            counts.filtered += len(filtered)
            counts.in_retry += len(retrying)
            counts.missing += n - len(delivered) - len(dead) - len(filtered) - len(retrying)
        counts.dead_lettered_by_reason = dict(by_reason)
        return counts

    def lags(self, bucket: Bucket) -> Lags:
        if bucket.lags is not None:
            return bucket.lags
        counted = sorted(bucket.lags_ms.items())
        return Lags(
            nearest_rank_counted(counted, 50),
            nearest_rank_counted(counted, 95),
            nearest_rank_counted(counted, 99),
            bucket.lag_in.percentile(95),
            bucket.process.percentile(95),
        )

    # --- settling ------------------------------------------------------------------------

    def advance(self, progress_ms: int) -> list[Settled]:
        """Settle every bucket whose minute ended `settle_s` before `progress_ms`; age out old ones."""
        settle_ms = round(self.settings.settle_s * 1000)
        settled = []
        for minute in sorted(self.buckets):
            bucket = self.buckets[minute]
            if bucket.final:
                continue
            if bucket.end_ms + settle_ms > progress_ms:
                break
            settled.append(self._settle(bucket))
        horizon = minute_of(progress_ms - settle_ms) - MINUTE_MS
        if horizon + MINUTE_MS > self.closed_before_ms:
            self.closed_before_ms = horizon + MINUTE_MS
            if self.last_final_ms is None or horizon > self.last_final_ms:
                self.last_final_ms = horizon
        self._age_out(progress_ms)
        return settled

    def _settle(self, bucket: Bucket) -> Settled:
        counts = self.tally(bucket)
        lags = self.lags(bucket)
        for tp, entered in bucket.entered.items():
            known = self.outcomes.get(tp)
            if known is None:
                bucket.waiting[tp] = BitMap(entered)
                continue
            waiting = entered - known.resolved()
            if waiting:
                bucket.waiting[tp] = waiting
                retrying = waiting & known.handed
                if retrying:
                    bucket.retrying[tp] = retrying
            known.forget(entered - waiting)
        bucket.counts, bucket.lags, bucket.final = counts, lags, True
        bucket.entered = {}
        bucket.lags_ms = {}
        bucket.lag_in = bucket.process = LogHistogram()
        settings = self.settings
        loss_ratio = counts.missing / counts.entered if counts.entered else 0.0
        bucket.up, bucket.down_reason = judge(counts, lags.p95_ms, bucket.on_time, settings)
        if not bucket.up and bucket.down_reason is not None:
            self.down_minutes[bucket.minute_ms] = bucket.down_reason
        if self.last_final_ms is None or bucket.minute_ms > self.last_final_ms:
            self.last_final_ms = bucket.minute_ms
        alarm = counts.missing > 0 and loss_ratio > settings.loss_alarm_ratio
        return Settled(bucket, loss_ratio, alarm)

    def _age_out(self, progress_ms: int) -> None:
        keep_from = minute_of(progress_ms) - self.settings.retention_min * MINUTE_MS
        for minute in [m for m, b in self.buckets.items() if b.final and m < keep_from]:
            if not self.buckets[minute].waiting_count():
                del self.buckets[minute]
        day_ago = progress_ms - 86_400_000
        for minute in [m for m in self.down_minutes if m < day_ago]:
            del self.down_minutes[minute]
        fact_horizon = progress_ms - SEEN_FACTS_KEEP_MS
        stale = []
        for fact_id, outcome_ms in self.seen_facts.items():  # in the order read: oldest first
            if outcome_ms >= fact_horizon:
                break
            stale.append(fact_id)
        for fact_id in stale:
            del self.seen_facts[fact_id]
        lowest = self._lowest_offsets()
        for tp, known in list(self.outcomes.items()):
            if tp in lowest:
                known.forget_below(lowest[tp])
            elif known.is_empty():
                del self.outcomes[tp]

    def _lowest_offsets(self) -> dict[Partition, int]:
        """Per partition, the lowest offset any bucket still holds one by one."""
        lowest: dict[Partition, int] = {}
        for bucket in self.buckets.values():
            for bitmaps in (bucket.entered, bucket.waiting):
                for tp, bitmap in bitmaps.items():
                    if bitmap:
                        low = bitmap.min()
                        lowest[tp] = min(low, lowest.get(tp, low))
        return lowest

    # --- reading ------------------------------------------------------------------------

    def unsettled(self) -> int:
        return sum(1 for b in self.buckets.values() if not b.final)

    def waiting_events(self) -> int:
        """Events held per event: unsettled ones, and final ones without a final outcome."""
        return sum(
            b.waiting_count() if b.final else b.entered_count() for b in self.buckets.values()
        )

    def availability(self, now_progress_ms: int, *, window_ms: int = 86_400_000) -> float | None:
        """The share of final minutes in the last `window_ms` that were up (empty minutes are up)."""
        if self.first_minute_ms is None or self.last_final_ms is None:
            return None
        start = max(self.first_minute_ms, minute_of(now_progress_ms - window_ms))
        minutes = (self.last_final_ms - start) // MINUTE_MS + 1
        if minutes <= 0:
            return None
        down = sum(1 for m in self.down_minutes if start <= m <= self.last_final_ms)
        return 1 - down / minutes

    def rows(self, *, from_ms: int | None = None, to_ms: int | None = None) -> Iterator[Bucket]:
        for minute in sorted(self.buckets):
            if (from_ms is None or minute >= from_ms) and (to_ms is None or minute < to_ms):
                yield self.buckets[minute]

    # --- snapshot -----------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Everything needed to carry on after a restart, as plain values (bitmaps serialized)."""
        return {
            "dest": self.dest,
            "first_minute_ms": self.first_minute_ms,
            "closed_before_ms": self.closed_before_ms,
            "last_final_ms": self.last_final_ms,
            "down_minutes": [[m, r] for m, r in self.down_minutes.items()],
            "seen_facts": [[k, v] for k, v in self.seen_facts.items()],
            "outcomes": [
                [tp[0], tp[1], _outcomes_state(known)] for tp, known in self.outcomes.items()
            ],
            "buckets": [_bucket_state(b) for b in self.buckets.values()],
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        self.first_minute_ms = state["first_minute_ms"]
        self.closed_before_ms = state["closed_before_ms"]
        self.last_final_ms = state["last_final_ms"]
        self.down_minutes = {int(m): str(r) for m, r in state["down_minutes"]}
        self.seen_facts = {str(k): int(v) for k, v in state["seen_facts"]}
        self.outcomes = {(t, int(p)): _outcomes_from(s) for t, p, s in state["outcomes"]}
        self.buckets = {}
        for raw in state["buckets"]:
            bucket = _bucket_from(raw)
            self.buckets[bucket.minute_ms] = bucket


def _bitmaps(bitmaps: Mapping[Partition, BitMap]) -> list[list[Any]]:
    return [[tp[0], tp[1], bitmap.serialize()] for tp, bitmap in bitmaps.items()]


def _bitmaps_from(raw: Iterable[list[Any]]) -> dict[Partition, BitMap]:
    return {(t, int(p)): BitMap.deserialize(data) for t, p, data in raw}


def _outcomes_state(known: Outcomes) -> dict[str, Any]:
    return {
        "delivered": known.delivered.serialize(),
        "dead": known.dead.serialize(),
        "filtered": known.filtered.serialize(),
        "handed": known.handed.serialize(),
        "dead_by_reason": {r: b.serialize() for r, b in known.dead_by_reason.items()},
    }


def _outcomes_from(raw: Mapping[str, Any]) -> Outcomes:
    known = Outcomes()
    known.delivered = BitMap.deserialize(raw["delivered"])
    known.dead = BitMap.deserialize(raw["dead"])
    known.filtered = BitMap.deserialize(raw["filtered"])
    known.handed = BitMap.deserialize(raw["handed"])
    known.dead_by_reason = {r: BitMap.deserialize(b) for r, b in raw["dead_by_reason"].items()}
    return known


def _bucket_state(bucket: Bucket) -> dict[str, Any]:
    return {
        "minute_ms": bucket.minute_ms,
        "entered": _bitmaps(bucket.entered),
        "problems": dict(bucket.problems),
        "lags_ms": list(bucket.lags_ms.items()),
        "lag_in": memoryview(bucket.lag_in.counts).cast("B"),
        "process": memoryview(bucket.process.counts).cast("B"),
        "duplicates": bucket.duplicates,
        "on_time": bucket.on_time,
        "final": bucket.final,
        "counts": None if bucket.counts is None else msgspec.to_builtins(bucket.counts),
        "lags": None if bucket.lags is None else msgspec.to_builtins(bucket.lags),
        "waiting": _bitmaps(bucket.waiting),
        "retrying": _bitmaps(bucket.retrying),
        "up": bucket.up,
        "down_reason": bucket.down_reason,
        "missing_ids": bucket.missing_ids,
    }


def _bucket_from(raw: Mapping[str, Any]) -> Bucket:
    lags_ms = {int(value): int(count) for value, count in raw["lags_ms"]}
    lag_in, process = array("q"), array("q")
    lag_in.frombytes(raw["lag_in"])
    process.frombytes(raw["process"])
    counts = raw["counts"]
    lags = raw["lags"]
    return Bucket(
        minute_ms=int(raw["minute_ms"]),
        entered=_bitmaps_from(raw["entered"]),
        problems=Counter(raw["problems"]),
        lags_ms=lags_ms,
        lag_in=LogHistogram(lag_in),
        process=LogHistogram(process),
        duplicates=int(raw["duplicates"]),
        on_time=int(raw["on_time"]),
        final=bool(raw["final"]),
        counts=None if counts is None else msgspec.convert(counts, Counts),
        lags=None if lags is None else msgspec.convert(lags, Lags),
        waiting=_bitmaps_from(raw["waiting"]),
        retrying=_bitmaps_from(raw["retrying"]),
        up=raw["up"],
        down_reason=raw["down_reason"],
        missing_ids=raw["missing_ids"],
    )
