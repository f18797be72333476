"""Retry tiers as pure decisions: which tier a hand-off waits in, when it is due, when it has expired."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from config.destination import Destination

_TIER_SUFFIX = ".retry_tier"


@dataclass(frozen=True, slots=True)
class Source:
    """What a consumed topic is to the retrier: a destination's NAME.retry_in (tier None) or a tier."""

    dest: Destination
    tier: int | None


def sources_for(dests: Iterable[Destination], existing: Iterable[str]) -> dict[str, Source]:
    """NAME.retry_in and the tier topics of each destination, including tiers left over from
    a longer `retry_tiers_s` (their events still wait for their due time)."""
    sources: dict[str, Source] = {}
    existing = sorted(existing)
    for dest in dests:
        sources[dest.retry_in_topic] = Source(dest, None)
        for k in range(len(dest.retry_tiers_s)):
            sources[tier_topic(dest.name, k)] = Source(dest, k)
        for topic in existing:
            left_over = tier_of(dest.name, topic)
            if left_over is not None:
                sources[topic] = Source(dest, left_over)
    return sources


def tier_topic(dest_name: str, tier: int) -> str:
    """The topic where events of `dest_name` wait out tier `tier` (0-based)."""
    return f"{dest_name}{_TIER_SUFFIX}{tier}"


def tier_of(dest_name: str, topic: str) -> int | None:
    """The tier index of one of `dest_name`'s tier topics; None for any other topic."""
    match = re.fullmatch(re.escape(dest_name + _TIER_SUFFIX) + r"(0|[1-9][0-9]{0,3})", topic)
    return int(match.group(1)) if match else None


@dataclass(frozen=True, slots=True)
class RetryState:
    """Where a handed-off event stands in its retries (`retrier.record` reads it from its
    `hifi-*` headers)."""

    attempt: int  # hand-offs so far, 1 on the first
    first_failure_ms: int
    handoff_ms: int


@dataclass(frozen=True, slots=True)
class ToTier:
    """Wait in tier `tier` until `due_ms`, then re-offer."""

    tier: int
    due_ms: int


@dataclass(frozen=True, slots=True)
class Wait:
    """Not due yet: hold the partition at this record until `due_ms`."""

    due_ms: int


@dataclass(frozen=True, slots=True)
class ReOffer:
    """Due: produce to NAME.retry_out now, `late_ms` after the due time."""

    late_ms: int


@dataclass(frozen=True, slots=True)
class Expire:
    """Give up: dead-letter with reason `expired`; `why` says which limit was reached."""

    why: str


def route(
    state: RetryState, *, tiers_s: Sequence[float], max_age_s: float, now_ms: int
) -> ToTier | Expire:
    """Where an event arriving on NAME.retry_in goes: the tier of its attempt, or the DLQ.

    The due time is fixed here, from the hand-off time and the tier as configured now, so a
    later change of `retry_tiers_s` does not strand events already waiting.
    """
    tier = state.attempt - 1
    if tier >= len(tiers_s):
        return Expire(f"all {len(tiers_s)} retry tiers used ({state.attempt} hand-offs)")
    if is_too_old(state.first_failure_ms, max_age_s=max_age_s, now_ms=now_ms):
        return _too_old(state.first_failure_ms, max_age_s, now_ms)
    return ToTier(tier, state.handoff_ms + round(tiers_s[tier] * 1000))


def decide_due(
    due_ms: int, *, first_failure_ms: int, max_age_s: float, now_ms: int
) -> Wait | ReOffer | Expire:
    """What to do with the record at the head of a tier partition at `now_ms`."""
    if due_ms > now_ms:
        return Wait(due_ms)
    if is_too_old(first_failure_ms, max_age_s=max_age_s, now_ms=now_ms):
        return _too_old(first_failure_ms, max_age_s, now_ms)
    return ReOffer(now_ms - due_ms)


def is_too_old(first_failure_ms: int, *, max_age_s: float, now_ms: int) -> bool:
    """True once more than `max_age_s` passed since the first failure."""
    return now_ms - first_failure_ms > max_age_s * 1000


def _too_old(first_failure_ms: int, max_age_s: float, now_ms: int) -> Expire:
    age_s = (now_ms - first_failure_ms) / 1000
    return Expire(f"first failure {age_s:.0f}s ago, over max_retry_age_s={max_age_s:g}")
