"""hifi's one vocabulary: what can become of an event, why a dead letter is dead, why ingest
refused an event and where it read its time, and how a partition was seen to start over.

All are `str` enums: a member goes as it is into a Kafka header, a metric label, a JSON
document or a CLI choice list, and every one of those places uses these and only these names.
"""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    """What became of an event at a node of the chain."""

    #: the destination answered 2xx
    DELIVERED = "delivered"
    #: local attempts ran out; written to NAME.retry_in for the retrier
    HANDED_OFF = "handed_off"
    #: the retrier placed a hand-off in the retry tier of its attempt
    ROUTED = "routed"
    #: the retrier produced a due event to NAME.retry_out, for the connector to try again
    RE_OFFERED = "re_offered"
    #: written to NAME.dlq, with a `Reason`
    DEAD_LETTERED = "dead_lettered"
    #: dropped on purpose by an explicit rule of the destination; never sent
    FILTERED = "filtered"
    #: the ingest service had it acknowledged by Kafka (acks=all) before its 2xx to the sender:
    #: not an outcome at a destination but where accounting begins (audit format 1.3)
    ACCEPTED = "accepted"


class Reason(StrEnum):
    """Why an event was dead-lettered: the `hifi-reason` header of every record in NAME.dlq."""

    #: the destination refused the event itself (a 4xx other than 429, isolated by bisection)
    HTTP_4XX = "http_4xx"
    #: a hand-off's cause, never a dead letter's reason any more: the destination answered
    #: 301/302/303 (or a 307/308 not followed, or more than 3 hops); it moved
    REDIRECT = "redirect"
    #: a tenant's URL resolves to a loopback, link-local or private address and the catalog
    #: does not set `allow_private_destinations`
    FORBIDDEN_DESTINATION = "forbidden_destination"
    #: the record is not one JSON object of UTF-8 text (or has no value at all)
    MALFORMED = "malformed"
    #: the record alone is larger than `max_batch_bytes`
    TOO_LARGE = "too_large"
    #: the retry tiers ran out, or `max_retry_age_s` passed since the first failure
    EXPIRED = "expired"
    #: the record is in a Schema Registry's wire format the registry cannot explain: an unknown
    #: schema id, no wire header, a payload that does not match its schema (with `[decode]`)
    UNDECODABLE = "undecodable"
    #: a request header taken from the event (its id, key or a record header, with `[webhook]`)
    #: is not printable ASCII on one line: the event cannot be sent as the catalog asks
    BAD_HEADER = "bad_header"
    #: the event's tenant has no entry (a destination with `[lookups]`): after the retry tiers,
    #: or at once when the event names no tenant at all
    UNKNOWN_TENANT = "unknown_tenant"
    #: the tenant's entry is disabled (`enabled = false`) and does not say to filter instead
    TENANT_DISABLED = "tenant_disabled"


class Rejection(StrEnum):
    """Why the ingest service refused one event of a request (the others may be accepted): the
    `reason` of that event's result and the label of `hifi_ingest_events_rejected_total`."""

    #: not JSON (an NDJSON line, or a whole body, that does not parse)
    NOT_JSON = "not_json"
    #: JSON, but not an object
    NOT_AN_OBJECT = "not_an_object"
    #: not UTF-8 text
    NOT_UTF8 = "not_utf8"
    #: the stream's id field holds neither a non-empty string nor an integer
    INVALID_ID = "invalid_id"
    #: larger than the stream's `max_event_bytes` (a streamed event: in a request it is a 413)
    TOO_LARGE = "too_large"


class EventTimeFrom(StrEnum):
    """Where the ingest service took an event's time from: the `hifi-event-time` header of its
    record and the `event_time` of its result (only `arrival` is written: the usual case is
    not repeated on every record)."""

    #: the event's own time field, readable as epoch ms or RFC 3339
    EVENT = "event"
    #: the field was missing or unreadable: the arrival time stands in (the record's timestamp)
    ARRIVAL = "arrival"


class StartedOver(StrEnum):
    """How a consumer noticed that a partition started over: its topic was deleted and created
    again under its name (or the cluster was replaced), so its offsets begin again below where
    the consumer had read. The `cause` of the `partition_started_over` log line and of
    `/status`."""

    #: a poll's records began below the offset read up to: the broker answered
    #: OFFSET_OUT_OF_RANGE and the consumer's position was reset to the earliest offset
    OFFSETS_WENT_BACK = "offsets_went_back"
    #: the partition's end stayed below the offset read up to, and its leader confirmed it:
    #: a broker that answers a fetch beyond the end with no error (Tansu) and no records
    END_BELOW_POSITION = "end_below_position"


# The buckets of every lag histogram (seconds), one set so a dashboard compares the nodes.
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
