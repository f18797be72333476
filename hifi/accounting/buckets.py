"""A destination's 1-minute event-time buckets: what entered, outcomes per partition, counts, lags."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from operator import sub

import msgspec
from pyroaring import BitMap

from hifi.accounting.percentiles import LogHistogram, nearest_rank_counted
from hifi.accounting.settings import AccountingSettings
from hifi.vocabulary import Reason

MINUTE_MS = 60_000

LAG_MAX_MS = 2**31 - 1  # the largest lag counted (about 24 days)
LATE_RATIO_MAX = 0.05  # a final minute with more undelivered (waiting) events than this is late
Partition = tuple[str, int]


class Problem(StrEnum):
    """Why an entered record is odd (counted per destination; the `problem` of its archive row)."""

    #: not one JSON object of UTF-8 text; accounted by origin, the connector dead-letters it
    MALFORMED = Reason.MALFORMED.value
    #: larger than `max_batch_bytes`; the connector dead-letters it
    TOO_LARGE = Reason.TOO_LARGE.value
    #: in a Schema Registry's wire format the registry cannot explain; accounted by origin, the
    #: connector dead-letters it
    UNDECODABLE = Reason.UNDECODABLE.value
    #: no readable id: accounted by origin
    NO_ID = "no_id"
    #: event time more than a minute ahead of the Kafka timestamp: bucketed by the Kafka timestamp
    TIME_FUTURE = "time_future"
    #: event time in a minute already final: bucketed by the Kafka timestamp
    TIME_PAST = "time_past"


def minute_of(epoch_ms: int) -> int:
    return epoch_ms - epoch_ms % MINUTE_MS


_NONE = BitMap()


def held_in(offsets: BitMap, from_offset: int) -> int:
    """How many of `offsets` are at or after `from_offset`."""
    return len(offsets) if from_offset <= 0 else len(offsets) - offsets.rank(from_offset - 1)


@dataclass(slots=True)
class Counts:
    """A bucket's table row, counted."""

    entered: int = 0
    accepted: int = (
        0  # acknowledged to a sender by the ingest service (`hifi/accounting/accepted.py`)
    )
    delivered: int = 0
    dead_lettered_by_reason: dict[str, int] = field(default_factory=dict)
    filtered: int = 0
    in_retry: int = 0
    # not in retry, no outcome, still in a source partition the delivering group has not
    # committed past (`auditor/held.py`): late, not lost
    waiting: int = 0
    missing: int = 0

    @property
    def dead_lettered(self) -> int:
        return sum(self.dead_lettered_by_reason.values())

    @property
    def accounted(self) -> int:
        """The events accounted for: those entered, and those accepted but never seen entering."""
        return (
            self.delivered
            + self.dead_lettered
            + self.filtered
            + self.in_retry
            + self.waiting
            + self.missing
        )


def judge(
    counts: Counts, lag_p95_ms: int | None, on_time: int, settings: AccountingSettings
) -> tuple[bool, str | None]:
    """Whether a final minute was up, and if not why (`loss` or `lag`): no event missing, p95
    end-to-end lag within `lag_sla_s`, and at most 5 % of its events (dead letters and filtered
    ones aside) late: waiting when it became final, or delivered after (`on_time` counts the
    first deliveries at most `settle_s` after the minute ended). The reconciliation judges
    with this too."""
    if counts.missing:
        return False, "loss"
    undelivered = counts.accounted - counts.dead_lettered - counts.filtered
    late = max(counts.in_retry + counts.waiting + counts.missing, undelivered - on_time)
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
    # accepted by the ingest service: counted in the minute of its entry once seen entering
    accepted: dict[Partition, BitMap] = field(default_factory=dict)
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
    # waiting, accepted but never seen entering: no copy in the partition, never held there
    unseen: dict[Partition, BitMap] = field(default_factory=dict)
    up: bool | None = None
    down_reason: str | None = None  # "loss", "lag", or "late" (loss whose events came later)
    missing_ids: list[str] | None = None  # resolved from the archive, when any are missing
    # once final: the lag distributions it was judged on, packed (`pack_spread`): what several
    # auditors' shares of one minute merge into exact percentiles (`auditor/share_rows.py`)
    spread: bytes | None = None
    # while open: its distributions as last packed, and its `on_time` then (`packed_spread`)
    packed: tuple[int, bytes] | None = None

    @property
    def end_ms(self) -> int:
        return self.minute_ms + MINUTE_MS

    def entered_count(self) -> int:
        return sum(len(bitmap) for bitmap in self.entered.values())

    def population(self) -> dict[Partition, BitMap]:
        """What missing is counted from: the entered events, and the accepted ones."""
        if not self.accepted:
            return self.entered
        both = dict(self.entered)
        for tp, accepted in self.accepted.items():
            entered = both.get(tp)
            both[tp] = accepted if entered is None else entered | accepted
        return both

    def waiting_count(self) -> int:
        return sum(len(bitmap) for bitmap in self.waiting.values())

    def packed_spread(self) -> bytes:
        """An open bucket's distributions packed (`pack_spread`; a final one's are `spread`),
        packed again only when a first delivery was counted since (each adds to `on_time`)."""
        if self.packed is None or self.packed[0] != self.on_time:
            self.packed = (self.on_time, pack_spread(self))
        return self.packed[1]

    def add_on_time(self, event_times_ms: list[int], taken_ms: list[int], done_ms: int) -> None:
        """First deliveries on time, done at `done_ms`: their lags, lags-in and process times."""
        self.on_time += len(event_times_ms)
        lags = self.lags_ms
        for lag_ms, count in Counter(map(done_ms.__sub__, event_times_ms)).items():
            lag_ms = min(LAG_MAX_MS, max(0, lag_ms))
            lags[lag_ms] = lags.get(lag_ms, 0) + count
        self.lag_in.add_many(map(sub, taken_ms, event_times_ms))
        self.process.add_many(map(done_ms.__sub__, taken_ms))


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


def tally(
    bucket: Bucket,
    outcomes: Mapping[Partition, Outcomes],
    held_from: Mapping[Partition, int] | None = None,
) -> Counts:
    """The bucket's counts now: final ones as kept, provisional ones from the bitmaps; events
    without an outcome at or after `held_from` of their partition are waiting, not missing."""
    if bucket.counts is not None:
        return bucket.counts
    counts = Counts()
    by_reason: Counter[str] = Counter()
    counts.entered = bucket.entered_count()
    counts.accepted = sum(len(bitmap) for bitmap in bucket.accepted.values())
    for tp, entered in bucket.population().items():
        n = len(entered)
        known = outcomes.get(tp)
        held = None if held_from is None else held_from.get(tp)
        seen = bucket.entered.get(tp, _NONE)  # an accepted event never seen is held nowhere
        if known is None:
            waiting = 0 if held is None else held_in(entered & seen, held)
            counts.waiting += waiting
            counts.missing += n - waiting
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
        unresolved = n - len(delivered) - len(dead) - len(filtered) - len(retrying)
        if held is not None and unresolved:
            waiting = held_in((entered & seen) - (known.resolved() | known.handed), held)
            counts.waiting += waiting
            unresolved -= waiting
        counts.missing += unresolved
    counts.dead_lettered_by_reason = dict(by_reason)
    return counts


def lags_of(bucket: Bucket) -> Lags:
    """The bucket's lag percentiles: final ones as kept, provisional ones computed now."""
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


def lowest_offsets(buckets: Iterable[Bucket]) -> dict[Partition, int]:
    """Per partition, the lowest offset any bucket still holds one by one."""
    lowest: dict[Partition, int] = {}
    for bucket in buckets:
        for bitmaps in (bucket.entered, bucket.accepted, bucket.waiting):
            for tp, bitmap in bitmaps.items():
                if bitmap:
                    low = bitmap.min()
                    lowest[tp] = min(low, lowest.get(tp, low))
    return lowest


def finalize(
    bucket: Bucket,
    outcomes: Mapping[Partition, Outcomes],
    held_from: Mapping[Partition, int] | None = None,
) -> tuple[Counts, Lags]:
    """Fix the bucket's counts and lags; keep only its events without a final outcome."""
    counts = tally(bucket, outcomes, held_from)
    lags = lags_of(bucket)
    for tp, entered in bucket.population().items():
        known = outcomes.get(tp)
        if known is None:
            bucket.waiting[tp] = BitMap(entered)
            unseen = entered - bucket.entered.get(tp, _NONE)
            if unseen:
                bucket.unseen[tp] = unseen
            continue
        waiting = entered - known.resolved()
        if waiting:
            bucket.waiting[tp] = waiting
            unseen = waiting - bucket.entered.get(tp, _NONE)
            if unseen:
                bucket.unseen[tp] = unseen
            retrying = waiting & known.handed
            if retrying:
                bucket.retrying[tp] = retrying
        known.forget(entered - waiting)
    bucket.counts, bucket.lags, bucket.final = counts, lags, True
    bucket.spread = pack_spread(bucket)
    bucket.packed = None
    bucket.entered, bucket.accepted = {}, {}
    bucket.lags_ms = {}
    bucket.lag_in = bucket.process = LogHistogram.spent()
    return counts, lags


def pack_spread(bucket: Bucket) -> bytes:
    """A bucket's lag distributions (end-to-end lags by value, lag-in and process histograms by
    bin, the empty bins left out) as compact bytes."""
    return msgspec.msgpack.encode(
        [
            sorted(bucket.lags_ms.items()),
            [(i, n) for i, n in enumerate(bucket.lag_in.counts) if n],
            [(i, n) for i, n in enumerate(bucket.process.counts) if n],
        ]
    )
