"""Prometheus metrics of the ingest service (`hifi_ingest_*`), labelled by stream.

A request for a path that names no stream of the catalog is counted under stream `-`, so a
caller cannot make up label values.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from hifi.metrics import REQUEST_BUCKETS_S
from hifi.vocabulary import LAG_BUCKETS_S

UNKNOWN_STREAM = "-"


REQUESTS = Counter(
    "hifi_ingest_requests",
    "Requests answered, by stream and HTTP status (a streamed request when it ends).",
    ["stream", "status"],
)
EVENTS_ACCEPTED = Counter(
    "hifi_ingest_events_accepted",
    "Events acknowledged by Kafka and answered as accepted.",
    ["stream"],
)
EVENTS_REJECTED = Counter(
    "hifi_ingest_events_rejected",
    "Events answered as rejected, by reason (a hifi.vocabulary.Rejection); a request refused"
    " as a whole counts in hifi_ingest_requests only.",
    ["stream", "reason"],
)
LAG_IN = Histogram(
    "hifi_ingest_lag_in_seconds",
    "Arrival minus event time, per accepted event that has a time of its own.",
    ["stream"],
    buckets=LAG_BUCKETS_S,
)
INGEST_TIME = Histogram(
    "hifi_ingest_time_seconds",
    "From the request's last body byte to its response (every event acknowledged).",
    ["stream"],
    buckets=REQUEST_BUCKETS_S,
)
IN_FLIGHT_REQUESTS = Gauge(
    "hifi_ingest_in_flight_requests",
    "Requests being read, produced or answered now (bounded by --max-in-flight).",
)
IN_FLIGHT_BYTES = Gauge(
    "hifi_ingest_in_flight_bytes",
    "Body bytes held by the requests in flight (bounded by --max-in-flight-bytes).",
)
SHED = Counter(
    "hifi_ingest_shed_requests",
    "Requests answered 503 with Retry-After because a bound was reached or Kafka did not"
    " acknowledge, by cause (in_flight, kafka, draining).",
    ["cause"],
)
IDEMPOTENCY = Counter(
    "hifi_ingest_idempotency_keys",
    "Requests with an Idempotency-Key, by what became of the key (the Idempotency-Status header).",
    ["status"],
)
