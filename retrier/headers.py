"""Header rewrites: how a record's `hifi-*` headers change on its way to a tier, NAME.retry_out or NAME.dlq."""

from __future__ import annotations

from collections.abc import Iterable

from hifi.headers import (
    HDR_ATTEMPT,
    HDR_DEST,
    HDR_DUE_MS,
    HDR_HISTORY,
    HDR_ORIGIN,
    HDR_REASON,
    HIFI_HEADERS,
)
from hifi.kafka.clients import Headers
from hifi.vocabulary import Reason

# A replayed dead letter starts over as a fresh event: it keeps only where it came from, for whom,
# and what happened to it before.
_RESET_ON_REPLAY = HIFI_HEADERS - {HDR_ORIGIN, HDR_DEST, HDR_HISTORY}


def _without(headers: Iterable[tuple[str, bytes]] | None, names: Iterable[str]) -> Headers:
    drop = frozenset(names)
    return [(name, value) for name, value in (headers or ()) if name not in drop]


def to_tier(headers: Iterable[tuple[str, bytes]] | None, *, due_ms: int) -> Headers:
    """Every header of the hand-off, plus the due time fixed at routing."""
    return [*_without(headers, [HDR_DUE_MS]), (HDR_DUE_MS, str(due_ms).encode())]


def to_retry_out(headers: Iterable[tuple[str, bytes]] | None) -> Headers:
    """Every header including hifi-attempt, so the connector keeps counting; no due time."""
    return _without(headers, [HDR_DUE_MS])


def to_dlq(headers: Iterable[tuple[str, bytes]] | None, *, reason: Reason) -> Headers:
    """Every header and the failure history, with `hifi-reason` (`RetryRecord.reason`)."""
    return [*_without(headers, [HDR_DUE_MS, HDR_REASON]), (HDR_REASON, reason.encode())]


def replayed(headers: Iterable[tuple[str, bytes]] | None) -> Headers:
    """A dead letter as a fresh event: attempt 0, no first failure or reason; origin, history kept."""
    return [*_without(headers, _RESET_ON_REPLAY), (HDR_ATTEMPT, b"0")]
