"""Prometheus metrics of the auditor: the loss tables' figures and the auditor's own health."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from hifi.accounting.buckets import MINUTE_MS, Change, Counts, Settled
from hifi.vocabulary import Outcome

# The `kind` label of `EVENTS`: what entered, the outcomes the auditor counts, what is missing.
ENTERED, MISSING = "entered", "missing"
EVENT_KINDS = (ENTERED, Outcome.DELIVERED, Outcome.DEAD_LETTERED, Outcome.FILTERED, MISSING)

EVENTS = Counter(
    "hifi_auditor_events",
    "Events of final minutes, by what became of them when the minute settled (kind: entered,"
    " delivered, dead_lettered, filtered, missing; accepted for a destination fed by an ingest"
    " stream); later outcomes add to delivered and dead_lettered.",
    ["dest", "kind"],
)
LOSS_RATIO = Gauge(
    "hifi_auditor_loss_ratio",
    "missing / entered of the last final minute (entered or accepted, for an ingest stream's).",
    ["dest"],
)
LAG_P95 = Gauge(
    "hifi_auditor_lag_p95_seconds",
    "End-to-end lag (2xx time minus event time) p95 of the last final minute with deliveries.",
    ["dest"],
)
AVAILABILITY = Gauge(
    "hifi_auditor_availability_ratio",
    "Share of the final minutes of the last 24 h that were up (on time and lossless).",
    ["dest"],
)
# The counters of final minutes an availability burn rate divides (the SLI: up minutes / final
# minutes); a down minute is down for `loss` or `lag` (`hifi.accounting.buckets.judge`), counted once,
# for the reason it first went down for: one down for loss that turns `late` after
# (`hifi.accounting.late.rejudged`) stays counted under loss, so the sum over reasons stays exact.
DOWN_REASONS = ("loss", "lag")
FINAL_MINUTES = Counter(
    "hifi_auditor_final_minutes",
    "Minutes that became final, with or without events (the availability's denominator).",
    ["dest"],
)
DOWN_MINUTES = Counter(
    "hifi_auditor_down_minutes",
    "Final minutes that were down, by the reason each first went down for (loss, lag).",
    ["dest", "reason"],
)
LAG_SLA = Gauge(
    "hifi_auditor_lag_sla_seconds",
    "The destination's lag_sla_s: a final minute whose p95 lag is above it is down for lag.",
    ["dest"],
)
LOSS_ALARMS = Counter(
    "hifi_auditor_loss_alarms",
    "Final minutes whose missing / entered was above loss_alarm_ratio.",
    ["dest"],
)
LOSS_ALARM = Gauge(
    "hifi_auditor_loss_alarm", "1 while the last final minute is in loss alarm, else 0.", ["dest"]
)
RECORDS = Counter(
    "hifi_auditor_records",
    "Records read, by topic (the destinations' source topics and the audit topic).",
    ["topic"],
)
UNSETTLED = Gauge("hifi_auditor_unsettled_minutes", "Minutes not final yet.", ["dest"])
WAITING = Gauge(
    "hifi_auditor_tracked_events",
    "Events held one by one: those of unsettled minutes, and those of final minutes still"
    " without a final outcome.",
    ["dest"],
)
REMEMBERED_FACTS = Gauge(
    "hifi_auditor_remembered_facts",
    "Audit fact ids kept to count a repeated fact once, until the minutes it can change are final.",
    ["dest"],
)
PROBLEMS = Counter(
    "hifi_auditor_odd_records",
    "Entered records that are odd, by problem (malformed, too_large, undecodable, no_id, time_future,"
    " time_past); each is still accounted by origin.",
    ["dest", "problem"],
)
REFUSED = Counter(
    "hifi_auditor_refused_facts",
    "Audit records the auditor could not use, by reason (undecodable, newer_major,"
    " unknown_outcome, inconsistent).",
    ["reason"],
)
REPEATED = Counter(
    "hifi_auditor_repeated_facts", "Audit facts read again (same fact id), counted once.", ["dest"]
)
MISSING_TOPICS = Gauge(
    "hifi_auditor_missing_source_topics",
    "Source topics of a destination that do not exist (nothing can enter from them).",
    ["dest"],
)
CONSUMER_LAG = Gauge(
    "hifi_auditor_consumer_lag_records",
    "High watermark minus the auditor's read position, per partition it owns.",
    ["topic", "partition"],
)
ARCHIVE_ROWS = Counter("hifi_auditor_archive_rows", "Rows written to closed archive files.", [])
ARCHIVE_WRITE = Histogram(
    "hifi_auditor_archive_write_seconds",
    "Time to write one roll of archive files and the state snapshot.",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)


def create_series(dest: str, *, lag_sla_s: float) -> None:
    """Every per-destination series at 0, so dashboards and alerts see it from the start."""
    for kind in EVENT_KINDS:
        EVENTS.labels(dest, kind)
    FINAL_MINUTES.labels(dest)
    for reason in DOWN_REASONS:
        DOWN_MINUTES.labels(dest, reason)
    LAG_SLA.labels(dest).set(lag_sla_s)
    LOSS_ALARMS.labels(dest)
    LOSS_ALARM.labels(dest).set(0)
    UNSETTLED.labels(dest).set(0)
    WAITING.labels(dest).set(0)
    REPEATED.labels(dest)


def count_late(dest: str, change: Change) -> None:
    """Outcomes a late fact gave events of a final minute."""
    if change.delivered:
        EVENTS.labels(dest, Outcome.DELIVERED).inc(change.delivered)
    if change.dead_lettered:
        EVENTS.labels(dest, Outcome.DEAD_LETTERED).inc(change.dead_lettered)
    if change.filtered:
        EVENTS.labels(dest, Outcome.FILTERED).inc(change.filtered)


def count_final(
    dest: str, first_minute_ms: int | None, final_before_ms: int | None, final_ms: int | None
) -> None:
    """The last final minute of `dest` moved from `final_before_ms` to `final_ms`: the minutes
    between became final, those without events (no bucket to settle) included."""
    if final_before_ms is not None:
        since_ms = final_before_ms
    elif first_minute_ms is not None:
        since_ms = first_minute_ms - MINUTE_MS
    else:
        return
    if final_ms is not None and final_ms > since_ms:
        FINAL_MINUTES.labels(dest).inc((final_ms - since_ms) // MINUTE_MS)


def lost_since(dest: str, missing: int, *, alarm: bool) -> None:
    """`missing` events of a final minute of `dest` were lost after it became final."""
    EVENTS.labels(dest, MISSING).inc(missing)
    LOSS_ALARM.labels(dest).set(int(alarm))
    if alarm:
        LOSS_ALARMS.labels(dest).inc()


def count_settled(dest: str, counts: Counts, lag_p95_ms: int | None, settled: Settled) -> None:
    """A minute of `dest` became final with `counts`."""
    loss_ratio, alarm = settled.loss_ratio, settled.alarm
    EVENTS.labels(dest, ENTERED).inc(counts.entered)
    EVENTS.labels(dest, Outcome.DELIVERED).inc(counts.delivered)
    EVENTS.labels(dest, Outcome.DEAD_LETTERED).inc(counts.dead_lettered)
    EVENTS.labels(dest, Outcome.FILTERED).inc(counts.filtered)
    EVENTS.labels(dest, MISSING).inc(counts.missing)
    if counts.accepted:  # a destination fed by an ingest stream; others have no such series
        EVENTS.labels(dest, Outcome.ACCEPTED).inc(counts.accepted)
    LOSS_RATIO.labels(dest).set(loss_ratio)
    if lag_p95_ms is not None:
        LAG_P95.labels(dest).set(lag_p95_ms / 1000)
    LOSS_ALARM.labels(dest).set(int(alarm))
    if alarm:
        LOSS_ALARMS.labels(dest).inc()
    if settled.bucket.down_reason is not None:
        DOWN_MINUTES.labels(dest, settled.bucket.down_reason).inc()
