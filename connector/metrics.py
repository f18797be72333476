"""Prometheus metrics of the connector, all labelled by destination."""

from __future__ import annotations

import bisect
import itertools
import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge
from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from hifi.audit import EVENTS_WRITTEN as AUDIT_EVENTS
from hifi.audit import FACTS_WRITTEN as AUDIT_FACTS
from hifi.metrics import REQUEST_BUCKETS_S
from hifi.vocabulary import LAG_BUCKETS_S, Outcome, Reason

_INF = float("inf")
_format_le: Callable[[float], str] = floatToGoString  # how Histogram writes `le` (untyped upstream)

# prometheus_client's own switch for the `_created` series, read the same way it reads it.
_USE_CREATED = os.environ.get("PROMETHEUS_DISABLE_CREATED_SERIES", "False").lower() not in (
    "true",
    "1",
    "t",
)


class _PerEventHistogramChild:
    """One label set of a `PerEventHistogram`: bucket counts, sum and creation time."""

    __slots__ = ("_bounds", "counts", "created", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.counts = [0] * len(bounds)
        self.sum = 0.0
        self.created = time.time()

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self._bounds, value)] += 1
        self.sum += value

    def observe_ages(self, now_ms: float, times_ms: Iterable[float]) -> None:
        """Observe `now_ms - t` in seconds for every `t` (0 for a `t` in the future).

        The same counts and sum as one `observe` per value, found with one sort and a bisection
        per bucket instead of a bisection per value: an age is within a bound when its time is
        at or after `now_ms - bound`.
        """
        times = sorted(times_ms)
        if not times:
            return
        counts, seen_newer = self.counts, len(times)
        for index, bound_s in enumerate(self._bounds):
            newer = 0 if bound_s == _INF else bisect.bisect_left(times, now_ms - bound_s * 1000)
            counts[index] += seen_newer - newer
            seen_newer = newer
        past = bisect.bisect_right(times, now_ms)  # future times add 0 to the sum
        self.sum += (past * now_ms - math.fsum(times[:past])) / 1000


class PerEventHistogram:
    """A labelled histogram for per-event observations, exposed exactly like `Histogram`.

    `prometheus_client.Histogram.observe` takes a lock and scans the buckets for every value; at
    one call per event that is a visible share of the connector's CPU. This one bisects into plain
    counters (the connector observes from its event loop thread only) and builds the same
    `_bucket`, `_count`, `_sum` and `_created` samples when scraped.
    """

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        *,
        buckets: Sequence[float],
        registry: CollectorRegistry = REGISTRY,
    ) -> None:
        self._name = name
        self._documentation = documentation
        self._labelnames = tuple(labelnames)
        self._bounds = (*(float(b) for b in buckets), float("inf"))
        self._children: dict[tuple[str, ...], _PerEventHistogramChild] = {}
        registry.register(self)

    def labels(self, *values: str) -> _PerEventHistogramChild:
        key = tuple(str(value) for value in values)
        if len(key) != len(self._labelnames):
            raise ValueError(f"{self._name}: expected labels {self._labelnames}, got {key}")
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = _PerEventHistogramChild(self._bounds)
        return child

    def describe(self) -> list[Metric]:
        return [HistogramMetricFamily(self._name, self._documentation, labels=self._labelnames)]

    def collect(self) -> list[Metric]:
        family = HistogramMetricFamily(self._name, self._documentation, labels=self._labelnames)
        les = [_format_le(bound) for bound in self._bounds]
        for key, child in list(self._children.items()):
            cumulative = itertools.accumulate(float(count) for count in child.counts)
            family.add_metric(key, list(zip(les, cumulative, strict=True)), child.sum)
            if _USE_CREATED:
                labels = dict(zip(self._labelnames, key, strict=True))
                family.samples.append(Sample(f"{self._name}_created", labels, child.created))
        return [family]


LAG_BOUNDS_S = (*LAG_BUCKETS_S, float("inf"))  # the histograms' bucket upper bounds, +Inf last

RECORDS = Counter(
    "hifi_connector_records",
    "Records by final outcome at this node (filtered: dropped by a tenant's rule).",
    ["dest", "outcome"],
)
REQUESTS = Counter(
    "hifi_connector_requests",
    "HTTP attempts by result: 2xx, 3xx, 4xx, 5xx, timeout or connection.",
    ["dest", "status_class"],
)
BATCHES = Counter(
    "hifi_connector_batches",
    "Batches sent to the destination, by result: delivered (a 2xx), handed_off (local attempts"
    " ran out) or rejected (refused, then bisected); one per batch, whatever its bisection cost.",
    ["dest", "result"],
)
SENT_EVENTS = Counter(
    "hifi_connector_sent_events",
    "Events of the batches sent to the destination, by outcome: delivered, handed_off or"
    " dead_lettered (refused on their own, or with their group once the bisection budget ran out).",
    ["dest", "outcome"],
)
BISECTION_REQUESTS = Counter(
    "hifi_connector_bisection_requests",
    "Requests that bisected a rejected batch: one per half sent, whatever its local retries.",
    ["dest"],
)
AUTH_REFRESHES = Counter(
    "hifi_connector_auth_refreshes",
    "OAuth2 tokens fetched after the first, by reason: expiring (ahead of expiry) or"
    " unauthorized (the destination answered 401; the request is sent once more).",
    ["dest", "reason"],
)
AUTH_REFRESH_REASONS = ("expiring", "unauthorized")  # the `reason` of `AUTH_REFRESHES`
LOCAL_RETRIES = Counter("hifi_connector_local_retries", "Requests retried locally.", ["dest"])
REPLY_ANOMALIES = Counter(
    "hifi_connector_reply_anomalies",
    "Destination replies read despite something odd, by kind: a header value that does not"
    " parse (retry_after, location), a content coding not known (content_encoding), broken"
    " framing or headers over the cap after a 2xx status line (framing, headers_too_large,"
    " cut_after_2xx, slow_after_2xx).",
    ["dest", "kind"],
)
REPLY_ANOMALY_KINDS = (
    "retry_after",
    "location",
    "content_encoding",
    "framing",
    "headers_too_large",
    "cut_after_2xx",
    "slow_after_2xx",
)
HANDOFFS = Counter(
    "hifi_connector_handoffs", "Events handed to the global retrier (NAME.retry_in).", ["dest"]
)
DEAD_LETTERS = Counter(
    "hifi_connector_dead_letters", "Events written to NAME.dlq, by reason.", ["dest", "reason"]
)
MISSING_FIELDS = Counter(
    "hifi_connector_events_missing_field",
    "Events without an id or event time of their own (a fallback was used).",
    ["dest", "field"],
)
LAG_IN = PerEventHistogram(
    "hifi_connector_lag_in_seconds",
    "Arrival at the connector minus event time.",
    ["dest"],
    buckets=LAG_BUCKETS_S,
)
LAG_OUT = PerEventHistogram(
    "hifi_connector_lag_out_seconds",
    "Destination 2xx minus event time: the end-to-end lag at this last node; attempt is first"
    " (delivered from a source topic) or retried (came back from the retrier).",
    ["dest", "attempt"],
    buckets=LAG_BUCKETS_S,
)
# observed once per request: the lock-free histogram too (a request's CPU is the tenant path's limit)
REQUEST_DURATION = PerEventHistogram(
    "hifi_connector_request_duration_seconds",
    "One HTTP attempt, send to response.",
    ["dest"],
    buckets=REQUEST_BUCKETS_S,
)
EVENTS_PER_REQUEST = PerEventHistogram(
    "hifi_connector_events_per_request",
    "Events carried by one request.",
    ["dest"],
    buckets=(1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000),
)
IN_FLIGHT = Gauge("hifi_connector_in_flight_requests", "Requests being delivered now.", ["dest"])
CONCURRENCY_LIMIT = Gauge(
    "hifi_connector_concurrency_limit",
    "Requests the destination may have in flight now (adaptive, or max_in_flight when fixed).",
    ["dest"],
)
LINGER = Gauge(
    "hifi_connector_linger_seconds",
    "How long a tenant's events wait for its batch to fill now: max_linger_s, longer while its"
    " round of tenants comes late (connector.linger).",
    ["dest"],
)
RTT = Gauge("hifi_connector_rtt_seconds", "The last answered attempt's round-trip time.", ["dest"])
RTT_MEAN = Gauge(
    "hifi_connector_rtt_mean_seconds",
    "Round-trip time averaged over past windows (EWMA), what the adaptive limit compares with.",
    ["dest"],
)
CONSUMER_LAG = Gauge(
    "hifi_connector_consumer_lag_records",
    "High watermark minus committed offset, per partition.",
    ["dest", "topic", "partition"],
)
PAUSED = Gauge(
    "hifi_connector_intake_paused",
    "1 while intake is paused: the buffer holds its bound, or the destination's breaker is open.",
    ["dest"],
)
BREAKER_STATE = Gauge(
    "hifi_connector_breaker_state",
    "The destination's circuit breaker: 0 closed, 1 half-open (one probe out), 2 open (no"
    " request is sent, intake is paused).",
    ["dest"],
)
BREAKER_OPENS = Counter(
    "hifi_connector_breaker_opens",
    "Times a circuit breaker opened from closed: the destination's and its tenant routes'.",
    ["dest"],
)
BREAKER_OPEN_SECONDS = Counter(
    "hifi_connector_breaker_open_seconds",
    "Seconds circuit breakers spent open or half-open, summed over the destination's and its"
    " tenant routes'.",
    ["dest"],
)
BREAKER_OPEN_ROUTES = Gauge(
    "hifi_connector_breaker_open_routes",
    "Tenant routes whose circuit breaker is open or half-open (their events go to the retrier"
    " without a request).",
    ["dest"],
)
RATE_LIMIT = Gauge(
    "hifi_connector_rate_limit_per_s",
    "The destination's configured rate limit, by unit: events or requests a second (0: none).",
    ["dest", "unit"],
)
RATE_LIMIT_UNITS = ("events", "requests")  # the `unit` of `RATE_LIMIT`
RATE_LIMIT_WAIT_SECONDS = Counter(
    "hifi_connector_rate_limit_wait_seconds",
    "Seconds requests waited for rate-limit tokens (the destination's and its tenant routes'),"
    " summed over requests, each holding its in-flight slot meanwhile.",
    ["dest"],
)
RATE_LIMITED_REQUESTS = Counter(
    "hifi_connector_rate_limited_requests",
    "Requests (attempts) that waited for rate-limit tokens before they were sent.",
    ["dest"],
)
RATE_LIMIT_WAITING = Gauge(
    "hifi_connector_rate_limit_waiting_requests",
    "Requests waiting for rate-limit tokens now.",
    ["dest"],
)
PAUSING = Gauge(
    "hifi_connector_pausing_requests",
    "Requests between two attempts now (a retry's backoff or Retry-After), each in its place.",
    ["dest"],
)
RATE_LIMITED_ROUTES = Gauge(
    "hifi_connector_rate_limited_routes",
    "Tenant routes whose entry sets a rate limit (a count, not a label per tenant).",
    ["dest"],
)


_OUTCOMES = (Outcome.DELIVERED, Outcome.HANDED_OFF, Outcome.DEAD_LETTERED)
BATCH_RESULTS = ("delivered", "handed_off", "rejected")  # the `result` of `BATCHES`
_SENT = (Outcome.DELIVERED, Outcome.HANDED_OFF, Outcome.DEAD_LETTERED)  # `SENT_EVENTS`' outcomes


class _Labelled(Protocol):
    def labels(self, *labelvalues: str) -> Any: ...


# The metrics labelled by the destination alone: each gets its series in `create_series`.
_BY_DEST_ONLY: tuple[_Labelled, ...] = (
    BISECTION_REQUESTS,
    LOCAL_RETRIES,
    HANDOFFS,
    LAG_IN,
    REQUEST_DURATION,
    EVENTS_PER_REQUEST,
    IN_FLIGHT,
    CONCURRENCY_LIMIT,
    RTT,
    RTT_MEAN,
    PAUSED,
    BREAKER_STATE,
    BREAKER_OPENS,
    BREAKER_OPEN_SECONDS,
    BREAKER_OPEN_ROUTES,
    RATE_LIMIT_WAIT_SECONDS,
    RATE_LIMITED_REQUESTS,
    RATE_LIMIT_WAITING,
    RATE_LIMITED_ROUTES,
)


# The metrics labelled by the destination and one more label: each value gets its series.
_BY_DEST_AND: tuple[tuple[_Labelled, tuple[str, ...]], ...] = (
    (SENT_EVENTS, tuple(_OUTCOMES)),
    (BATCHES, tuple(BATCH_RESULTS)),
    (AUTH_REFRESHES, tuple(AUTH_REFRESH_REASONS)),
    (REPLY_ANOMALIES, REPLY_ANOMALY_KINDS),
    (DEAD_LETTERS, tuple(Reason)),
    (REQUESTS, ("2xx", "3xx", "4xx", "5xx", "timeout", "connection")),
    (MISSING_FIELDS, ("id", "event_time")),
    (LAG_OUT, ("first", "retried")),
    (RATE_LIMIT, tuple(RATE_LIMIT_UNITS)),
)


def create_series(dest: str, *, audit: bool, lookups: bool = False) -> None:
    """Every series of `dest` at 0, so the first scrape shows them (alerts see 0, not nothing);
    the audit trail's (`hifi/audit/facts.py`) when it writes one; `filtered` with tenant lookups."""
    for outcome in (*_OUTCOMES, Outcome.FILTERED) if lookups else _OUTCOMES:
        RECORDS.labels(dest, outcome)
        if audit:
            AUDIT_FACTS.labels(dest, outcome)
            AUDIT_EVENTS.labels(dest, outcome)
    for metric, second_labels in _BY_DEST_AND:
        for label in second_labels:
            metric.labels(dest, label)
    for labelled_by_dest in _BY_DEST_ONLY:
        labelled_by_dest.labels(dest)


class DeliveryMeters:
    """The children of one destination's delivery metrics, found once: `labels()` is a lookup
    under a lock, and a request touches several of them."""

    def __init__(self, dest: str) -> None:
        self._dest = dest
        self.lag_out_first = LAG_OUT.labels(dest, "first")
        self.lag_out_retried = LAG_OUT.labels(dest, "retried")
        self.batches = {result: BATCHES.labels(dest, result) for result in BATCH_RESULTS}
        self.sent_events = {outcome: SENT_EVENTS.labels(dest, outcome) for outcome in _SENT}
        self.bisection_requests = BISECTION_REQUESTS.labels(dest)
        self.events_per_request = EVENTS_PER_REQUEST.labels(dest)
        self.request_duration = REQUEST_DURATION.labels(dest)
        self.delivered_records = RECORDS.labels(dest, Outcome.DELIVERED)
        self._requests: dict[str, Counter] = {}
        self._anomalies: dict[str, Counter] = {}

    def anomaly(self, kind: str) -> None:
        """Count a reply read despite something odd (`hifi_connector_reply_anomalies_total`)."""
        child = self._anomalies.get(kind)
        if child is None:
            child = self._anomalies[kind] = REPLY_ANOMALIES.labels(self._dest, kind)
        child.inc()

    def requests(self, status_class: str) -> Counter:
        """The `hifi_connector_requests_total` child of a status class (`2xx`, `timeout`...)."""
        child = self._requests.get(status_class)
        if child is None:
            child = self._requests[status_class] = REQUESTS.labels(self._dest, status_class)
        return child
