"""Prometheus metrics of the connector, all labelled by destination."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

LAG_BUCKETS_S = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    900.0,
    3600.0,
    21600.0,
    86400.0,
)

RECORDS = Counter(
    "hifi_connector_records", "Records by final outcome at this node.", ["dest", "outcome"]
)
REQUESTS = Counter(
    "hifi_connector_requests",
    "HTTP attempts by result: 2xx, 3xx, 4xx, 5xx, timeout or connection.",
    ["dest", "status_class"],
)
LOCAL_RETRIES = Counter("hifi_connector_local_retries", "Requests retried locally.", ["dest"])
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
LAG_IN = Histogram(
    "hifi_connector_lag_in_seconds",
    "Arrival at the connector minus event time.",
    ["dest"],
    buckets=LAG_BUCKETS_S,
)
LAG_OUT = Histogram(
    "hifi_connector_lag_out_seconds",
    "Destination 2xx minus event time: the end-to-end lag at this last node.",
    ["dest"],
    buckets=LAG_BUCKETS_S,
)
REQUEST_DURATION = Histogram(
    "hifi_connector_request_duration_seconds",
    "One HTTP attempt, send to response.",
    ["dest"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
EVENTS_PER_REQUEST = Histogram(
    "hifi_connector_events_per_request",
    "Events carried by one request.",
    ["dest"],
    buckets=(1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000),
)
IN_FLIGHT = Gauge("hifi_connector_in_flight_requests", "Requests being delivered now.", ["dest"])
CONSUMER_LAG = Gauge(
    "hifi_connector_consumer_lag_records",
    "High watermark minus committed offset, per partition.",
    ["dest", "topic", "partition"],
)
PAUSED = Gauge(
    "hifi_connector_intake_paused", "1 while intake is paused for backpressure.", ["dest"]
)
