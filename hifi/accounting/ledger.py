"""One destination's accounts: what entered, what became of each event, per 1-minute event-time bucket.

Loss is a set difference. The auditor observes every record entering a destination's source
topics itself, and notes it by origin (`topic/partition/offset`) in the bucket of its event
time: one roaring bitmap of offsets per partition and minute. The audit facts of the
connector and the retrier set bits in per-partition outcome bitmaps (delivered, dead-lettered
by reason, filtered, handed off). A bucket's counts are intersections of the two, so 15
million events waiting to settle cost a few bytes each, and ids are resolved (from the
archive) only for what is missing. For a destination fed by an ingest stream, the events the
ingest service accepted (its facts) are noted too (`hifi/accounting/accepted.py`): missing is then
counted from the entered and the accepted events together.

A bucket is provisional until `settle_s` after its minute ends, measured on the auditor's
progress clock (`Ledger.advance`): what it has read, not the wall clock, so an auditor that
catches up after an outage settles minutes only once it has read what was written in them.
When a bucket settles its counts, percentiles and availability are fixed and only the events
without a final outcome (waiting in the retrier, or missing) stay in memory; a later outcome
for one of them still moves it from `in_retry` (or `missing`) to `delivered` or
`dead_lettered`, and a minute down for `loss` left with nothing missing is down for `late`.

End-to-end lag is the 2xx time minus the event time, over the first delivery of each event;
percentiles are exact (nearest rank). Lag-in (taken in at the connector minus event time) and
the connector's process duration (2xx time minus taken in) are approximate: a log-spaced
histogram with 2 % wide bins.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from operator import sub
from typing import Any

from pyroaring import BitMap

from hifi.accounting.accepted import Acceptance
from hifi.accounting.bucket_state import bucket_from, bucket_state, outcomes_from, outcomes_state
from hifi.accounting.buckets import (
    LAG_MAX_MS,
    MINUTE_MS,
    Bucket,
    Change,
    Counts,
    Lags,
    Outcomes,
    Partition,
    Problem,
    Settled,
    finalize,
    judge,
    lags_of,
    lowest_offsets,
    minute_of,
    tally,
)
from hifi.accounting.incarnations import key
from hifi.accounting.late import hold_again, note_verdicts, resolve_waiting
from hifi.accounting.settings import AccountingSettings
from hifi.audit import Fact
from hifi.vocabulary import Outcome

# An event time further ahead of the record's Kafka timestamp than this is a clock problem.
FUTURE_TOLERANCE_MS = 60_000
# ids of missing events named per final minute (live and in the reconciliation)
MAX_MISSING_IDS = 1000
# Fact ids are kept (about 155 bytes each) until every minute a repeat could change is final,
# plus this margin (`Ledger.facts_kept_ms`); a tenant destination writes about a fact an event.
SEEN_FACTS_MARGIN_MS = 2 * MINUTE_MS


class Ledger:
    """The accounts of one destination; fed by the auditor's event loop only."""

    def __init__(self, dest: str, settings: AccountingSettings) -> None:
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
        self.acceptance = Acceptance(self.buckets, self._open_bucket, self.bucket_for_entry)
        # per origin partition, the first offset still held there (`auditor/held.py`); None:
        # not known to this ledger, every event without an outcome at the end is missing
        self.held_from: dict[Partition, int] | None = None

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

    def enter(self, minute_ms: int, tp: Partition, offsets: Sequence[int]) -> None:
        """Note records that entered `tp`, all of one minute (idempotent by offset)."""
        bucket = self._open_bucket(minute_ms)
        bitmap = bucket.entered.get(tp)
        if bitmap is None:
            bitmap = bucket.entered[tp] = BitMap()
        bitmap.update(offsets)
        acceptance = self.acceptance
        if offsets and (tp in acceptance.partitions or tp not in acceptance.entered_from):
            acceptance.entered(minute_ms, tp, offsets)

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

    def apply(self, fact: Fact, epochs: Sequence[int] = ()) -> list[Change]:
        """Take one audit fact in; a repeated fact (same `fact_id`) counts once. `epochs`: the
        incarnation of each slice's topic (`hifi.accounting.incarnations`), all 0 when empty."""
        if fact.fact_id in self.seen_facts:
            self.repeated_facts += 1
            return []
        self.seen_facts[fact.fact_id] = fact.outcome_ms
        if fact.outcome == Outcome.ACCEPTED:  # not an outcome: what missing is counted from
            self.acceptance.take(fact, epochs)
            return []
        return self._apply_outcome(fact, epochs)

    def _apply_outcome(self, fact: Fact, epochs: Sequence[int]) -> list[Change]:
        outcome = fact.outcome
        changes: dict[int, Change] = {}
        for i, part in enumerate(fact.slices):
            tp = (key(part.topic, epochs[i]) if epochs else part.topic, part.partition)
            offsets = BitMap(part.offsets)
            known = self.outcomes.get(tp)
            if known is None:
                known = self.outcomes[tp] = Outcomes()
            resolve_waiting(self.buckets.values(), tp, offsets, fact, changes, self.held_from)
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
        note_verdicts(self.buckets, changes, self.down_minutes)
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
            lag_ms = min(LAG_MAX_MS, max(0, done_ms - event_ms))
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
        bucket.add_on_time(event_times_ms, taken_ms, done_ms)
        return True

    def _lag_bucket(self, minute_ms: int, closed_before_ms: int, done_ms: int) -> Bucket | None:
        if minute_ms < closed_before_ms or minute_ms > done_ms + FUTURE_TOLERANCE_MS:
            return None
        return self._open_bucket(minute_ms)

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
        if settled:
            self.acceptance.settled()
        horizon = minute_of(progress_ms - settle_ms) - MINUTE_MS
        if horizon + MINUTE_MS > self.closed_before_ms:
            self.closed_before_ms = horizon + MINUTE_MS
            if self.last_final_ms is None or horizon > self.last_final_ms:
                self.last_final_ms = horizon
        self._age_out(progress_ms)
        return settled

    def tally(self, bucket: Bucket) -> Counts:
        """The bucket's counts now: final ones as kept, provisional ones from the bitmaps."""
        return tally(bucket, self.outcomes, self.held_from)

    def lags(self, bucket: Bucket) -> Lags:  # final ones as judged (their spread is packed)
        return bucket.lags if bucket.final and bucket.lags is not None else lags_of(bucket)

    def _settle(self, bucket: Bucket) -> Settled:
        self.acceptance.unjudged(bucket)
        counts, lags = finalize(bucket, self.outcomes, self.held_from)
        settings = self.settings
        loss_ratio = counts.missing / counts.accounted if counts.accounted else 0.0
        bucket.up, bucket.down_reason = judge(counts, lags.p95_ms, bucket.on_time, settings)
        if not bucket.up and bucket.down_reason is not None:
            self.down_minutes[bucket.minute_ms] = bucket.down_reason
        if self.last_final_ms is None or bucket.minute_ms > self.last_final_ms:
            self.last_final_ms = bucket.minute_ms
        alarm = counts.missing > 0 and loss_ratio > settings.loss_alarm_ratio
        return Settled(bucket, loss_ratio, alarm)

    def hold(self, held_from: dict[Partition, int] | None) -> tuple[list[int], list[int]]:
        """Where the partitions hold events now: the final minutes whose waiting and missing
        events it moved, and of those the ones whose `missing` rose (down for loss; a minute
        down for loss with none missing now is down for late). Nothing moves while it is
        where it was (a late outcome splits its minute again as it comes: `late.py`)."""
        if held_from == self.held_from:
            return [], []
        self.held_from = held_from
        moved, rose = hold_again(self.buckets.values(), held_from)
        note_verdicts(self.buckets, moved, self.down_minutes)
        return moved, rose

    def facts_kept_ms(self) -> int:
        """How long, in fact time, a fact id is kept to count its repeat (a producer retry)
        once: a fact's events are no later than it, and their minutes are final once the
        auditor's progress is settle_s past their end. A later repeat changes no count (its
        offsets are forgotten, its lags unattributed)."""
        return round(self.settings.settle_s * 1000) + MINUTE_MS + SEEN_FACTS_MARGIN_MS

    def _age_out(self, progress_ms: int) -> None:
        keep_from = minute_of(progress_ms) - self.settings.retention_min * MINUTE_MS
        for minute in [m for m, b in self.buckets.items() if b.final and m < keep_from]:
            if not self.buckets[minute].waiting_count():
                del self.buckets[minute]
        day_ago = progress_ms - 86_400_000
        for minute in [m for m in self.down_minutes if m < day_ago]:
            del self.down_minutes[minute]
        fact_horizon = progress_ms - self.facts_kept_ms()
        stale = []
        for fact_id, outcome_ms in self.seen_facts.items():  # in the order read: oldest first
            if outcome_ms >= fact_horizon:
                break
            stale.append(fact_id)
        for fact_id in stale:
            del self.seen_facts[fact_id]
        lowest = lowest_offsets(self.buckets.values())
        for tp, known in list(self.outcomes.items()):
            if tp in lowest:
                known.forget_below(lowest[tp])
            elif known.is_empty():
                del self.outcomes[tp]

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
                [tp[0], tp[1], outcomes_state(known)] for tp, known in self.outcomes.items()
            ],
            "buckets": [bucket_state(b) for b in self.buckets.values()],
            "entered_from": self.acceptance.state(),
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        self.first_minute_ms = state["first_minute_ms"]
        self.closed_before_ms = state["closed_before_ms"]
        self.last_final_ms = state["last_final_ms"]
        self.down_minutes = {int(m): str(r) for m, r in state["down_minutes"]}
        self.seen_facts = {str(k): int(v) for k, v in state["seen_facts"]}
        self.outcomes = {(t, int(p)): outcomes_from(s) for t, p, s in state["outcomes"]}
        self.buckets.clear()  # the same dict: `acceptance` holds it
        for raw in state["buckets"]:
            bucket = bucket_from(raw)
            self.buckets[bucket.minute_ms] = bucket
        self.acceptance.restore(state.get("entered_from", ()))  # older snapshots: none
