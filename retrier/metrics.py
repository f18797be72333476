"""Prometheus metrics of the retrier, all labelled by destination."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from hifi.audit import EVENTS_WRITTEN as AUDIT_EVENTS
from hifi.audit import FACTS_WRITTEN as AUDIT_FACTS
from hifi.vocabulary import Outcome

#: `tier` labels of `WAITING` beside the tier indexes ("0", "1", ...), an event's path around them
RETRY_IN, RETRY_OUT = "retry_in", "retry_out"
WAITING = Gauge(
    "hifi_retrier_waiting_events",
    "Events waiting in a retry stage, for the whole topic (every member reports it; aggregate"
    " with max): tier retry_in (not yet routed) and 0, 1, ... (not yet re-offered), high"
    " watermark minus the retrier group's committed offset; tier retry_out (re-offered, not yet"
    " taken back by the connector), minus the connector group's.",
    ["dest", "tier"],
)
OLDEST_WAITING_AGE = Gauge(
    "hifi_retrier_oldest_waiting_age_seconds",
    "Time since the first failure of the oldest event held at the head of a tier partition"
    " this member owns.",
    ["dest"],
)
ROUTED = Counter(
    "hifi_retrier_routed", "Events from NAME.retry_in placed in a tier topic.", ["dest", "tier"]
)
REOFFERED = Counter(
    "hifi_retrier_reoffered", "Events produced to NAME.retry_out once due.", ["dest"]
)
EXPIRED = Counter(
    "hifi_retrier_expired",
    "Events dead-lettered because their retries ran out (tiers used up or too old): reason"
    " expired, or the cause the connector named (unknown_tenant).",
    ["dest"],
)
REOFFER_DELAY = Histogram(
    "hifi_retrier_reoffer_delay_seconds",
    "Re-offer acknowledged by the broker minus the event's due time.",
    ["dest"],
    buckets=(0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0),
)
MAX_RETRY_AGE = Gauge(
    "hifi_retrier_max_retry_age_seconds",
    "The destination's max_retry_age_s: an event waiting longer since its first failure is"
    " dead-lettered (expired).",
    ["dest"],
)
IN_FLIGHT = Gauge(
    "hifi_retrier_in_flight_records", "Records being produced now, not yet acknowledged.", ["dest"]
)
DLQ_RECORDS = Gauge(
    "hifi_retrier_dlq_records",
    "Records in NAME.dlq: sum of its high watermarks (aggregate with max).",
    ["dest"],
)


def create_series(dest: str, tiers: int, *, audit: bool, max_retry_age_s: float) -> None:
    """Every series of `dest` at 0, so the first scrape shows them; the audit trail's
    (`hifi/audit/facts.py`) when it writes one."""
    if audit:
        for outcome in (Outcome.RE_OFFERED, Outcome.DEAD_LETTERED):
            AUDIT_FACTS.labels(dest, outcome)
            AUDIT_EVENTS.labels(dest, outcome)
    for tier in range(tiers):
        ROUTED.labels(dest, str(tier))
        WAITING.labels(dest, str(tier))
    for stage in (RETRY_IN, RETRY_OUT):
        WAITING.labels(dest, stage)
    for series in (REOFFERED, EXPIRED, REOFFER_DELAY, IN_FLIGHT, DLQ_RECORDS, OLDEST_WAITING_AGE):
        series.labels(dest)
    MAX_RETRY_AGE.labels(dest).set(max_retry_age_s)
