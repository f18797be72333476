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
from hifi.headers import read_hand_off
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
        """Read the record's headers once. Missing or unreadable times fall back to the
        record's own timestamp (the first failure to the hand-off), the attempt to 1, the
        origin to the record's position, the event's id to none."""
        hand_off = read_hand_off(record.headers)
        record_ms: int = record.timestamp
        handoff_ms = hand_off.handoff_ms or record_ms
        position = (record.topic, record.partition, record.offset)
        return cls(
            record,
            hand_off.found,
            RetryState(
                attempt=max(1, hand_off.attempt or 1),
                first_failure_ms=hand_off.first_failure_ms or handoff_ms,
                handoff_ms=handoff_ms,
            ),
            hand_off.due_ms or record_ms,
            expiry_reason(hand_off.cause),
            Seen(
                hand_off.origin_parts or position,
                hand_off.event_id,
                hand_off.event_time_ms or record_ms,
                0,
            ),
            hand_off.origin or "/".join(map(str, position)),
        )


def expiry_reason(cause: bytes | None) -> Reason:
    """Why an event whose retries ran out is dead: the cause the connector gave at its last
    hand-off (`hifi-cause`, e.g. `unknown_tenant`) when it names a reason, else `expired`."""
    if cause:
        with contextlib.suppress(ValueError):
            return Reason(cause.decode("ascii", errors="replace"))
    return Reason.EXPIRED
