"""A consumed hand-off or tier record as the retrier reads it: its `hifi-*` headers parsed once.

A dead letter the retrier writes says `hifi-reason: expired`, unless the connector's last
hand-off named the cause of its failures in `hifi-cause` (`unknown_tenant`): that reason then
travels to the letter, so the DLQ tools and the dashboard filter on what really went wrong.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hifi.audit import Seen
from hifi.headers import (
    HDR_ATTEMPT,
    HDR_CAUSE,
    HDR_DUE_MS,
    HDR_EVENT_ID,
    HDR_EVENT_TIME_MS,
    HDR_FIRST_FAILURE_MS,
    HDR_HANDOFF_MS,
    HDR_ORIGIN,
    header_int,
    header_map,
    parse_origin,
)
from hifi.vocabulary import Reason
from retrier.tiers import RetryState


@dataclass(frozen=True, slots=True)
class RetryRecord:
    """One record of NAME.retry_in or a tier, read once: what the tier decision, the expiry
    check and the plan need of it, and the record itself for what is written on."""

    record: Any  # the aiokafka record: its key, value, position and headers travel on
    found: Mapping[str, bytes]  # its headers by name, last value winning
    state: RetryState  # where it stands in its retries
    due_ms: int  # when a tier record is due (its own timestamp when it carries no due time)
    reason: Reason  # the reason of its dead letter, should it expire
    seen: Seen  # what the audit fact of its re-offer or expiry says of it
    origin: str  # where it first entered hifi, as its `hifi-origin` says (for the logs)

    @classmethod
    def read(cls, record: Any) -> RetryRecord:
        """Read the record's headers; missing or unreadable values fall back to the record's
        own timestamp and position (`retry_state`, `seen_of`, `expiry_reason`)."""
        found = header_map(record.headers)
        record_ms: int = record.timestamp
        raw_origin = found.get(HDR_ORIGIN)
        return cls(
            record,
            found,
            retry_state(found, record_ms=record_ms),
            header_int(found.get(HDR_DUE_MS)) or record_ms,
            expiry_reason(found),
            seen_of(record, found),
            raw_origin.decode("utf-8", errors="replace")
            if raw_origin
            else f"{record.topic}/{record.partition}/{record.offset}",
        )


def seen_of(record: Any, found: Mapping[str, bytes]) -> Seen:
    """A hand-off as its audit facts name it, from the headers the connector wrote: origin
    (else this record's position), id (else none), event time (else the record's timestamp)."""
    origin = parse_origin(found.get(HDR_ORIGIN))
    event_id = found.get(HDR_EVENT_ID)
    return Seen(
        origin or (record.topic, record.partition, record.offset),
        event_id.decode("utf-8", errors="replace") if event_id else None,
        header_int(found.get(HDR_EVENT_TIME_MS)) or record.timestamp,
        0,
    )


def expiry_reason(found: Mapping[str, bytes]) -> Reason:
    """Why an event whose retries ran out is dead: the cause the connector gave at its last
    hand-off (`hifi-cause`, e.g. `unknown_tenant`) when it names a reason, else `expired`."""
    cause = found.get(HDR_CAUSE)
    if cause:
        with contextlib.suppress(ValueError):
            return Reason(cause.decode("ascii", errors="replace"))
    return Reason.EXPIRED


def retry_state(found: Mapping[str, bytes], *, record_ms: int) -> RetryState:
    """The hand-off headers as a `RetryState`; missing or unreadable values fall back to `record_ms`."""
    handoff_ms = header_int(found.get(HDR_HANDOFF_MS)) or record_ms
    return RetryState(
        attempt=max(1, header_int(found.get(HDR_ATTEMPT)) or 1),
        first_failure_ms=header_int(found.get(HDR_FIRST_FAILURE_MS)) or handoff_ms,
        handoff_ms=handoff_ms,
    )
