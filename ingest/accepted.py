"""The accepted facts of a request's acknowledged events: written to the audit topic and acknowledged before any 2xx.

An event is hifi's to deliver from the moment its sender got a 2xx, so the auditor counts loss
from the ingest service's accepted facts (`hifi.audit.accepted`, docs/accounting.md). Their
acknowledgement (acks=all) is awaited within the same `ack_timeout_s` as the events': when it
does not come, or the producer fails, the request is answered as if its events had not been
acknowledged (503, resend the whole request; for a stream, an error line) and nothing is
promised. A resent request repeats facts (the auditor counts an origin once), never loses one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Protocol

from config.streams import Stream
from hifi.audit.accepted import Seen, accepted_event
from hifi.errors import BrokerUnavailable, HifiError
from ingest.answers import Written
from ingest.events import Checked


class Trail(Protocol):
    """What the facts are written with: `hifi.audit.accepted.AcceptedTrail`, or a fake in tests."""

    async def write(
        self, events: Sequence[Seen], *, accepted_ms: int | None = None
    ) -> Awaitable[None]: ...


class Accepted:
    """Writes the accepted facts of one process's streams and waits, within `ack_timeout_s`,
    until Kafka acknowledged them. `trail` None: no stream writes facts (`audit = false`)."""

    def __init__(self, trail: Trail | None, *, ack_timeout_s: float) -> None:
        self._trail = trail
        self.ack_timeout_s = ack_timeout_s

    async def write(
        self, stream: Stream, events: Sequence[Checked], written: Sequence[Written], arrival_ms: int
    ) -> None:
        """The facts of `events`, acknowledged where `written` says, once Kafka acknowledged
        them; `BrokerUnavailable` otherwise (a hifi error from the producer, or the deadline
        passed). Nothing to do for a stream with `audit = false` or no accepted event."""
        if self._trail is None or not stream.audit or not written:
            return
        facts = [
            accepted_event(
                stream.topic,
                place.partition,
                place.offset,
                event.id,
                arrival_ms if event.event_time_ms is None else event.event_time_ms,
                arrival_ms,
            )
            for event, place in zip(events, written, strict=True)
        ]
        try:
            async with asyncio.timeout(self.ack_timeout_s):
                acknowledged = await self._trail.write(facts)
                await acknowledged
        except TimeoutError:
            raise BrokerUnavailable(
                f"Kafka did not acknowledge the events' accepted facts within"
                f" {self.ack_timeout_s:g} s"
            ) from None
        except BrokerUnavailable:
            raise
        except HifiError as exc:
            raise BrokerUnavailable(f"the events' accepted facts: {exc}") from exc
