"""Retry tiers that `max_retry_age_s` cuts off: an event expires by age before their turn comes.

That is legitimate (the README's `expired`: a destination down for longer than
`max_retry_age_s` should not be retried for days), but silent it looks like a tier that works:
the retrier's `--check` and its start say which tiers can never re-offer an event.
"""

from __future__ import annotations

import itertools

from config.destination import Destination
from hifi.durations import for_people


def tiers_never_run(dest: Destination) -> list[int]:
    """The tiers (0 = NAME.retry_tier0) whose re-offer comes after `max_retry_age_s`: the k-th
    re-offer is due no sooner than the sum of the first k+1 tiers after the first failure, and
    an event older than `max_retry_age_s` then is dead-lettered instead."""
    due_after_s = itertools.accumulate(dest.retry_tiers_s)
    return [tier for tier, after_s in enumerate(due_after_s) if after_s > dest.max_retry_age_s]


def tiers_warning(dest: Destination) -> str | None:
    """One line naming the tiers that can never run, or None when every tier can."""
    cut = tiers_never_run(dest)
    if not cut:
        return None
    named = ", ".join(
        f"{dest.name}.retry_tier{tier} ({for_people(dest.retry_tiers_s[tier])})" for tier in cut
    )
    total_s = sum(dest.retry_tiers_s)
    return (
        f"destination {dest.name}: max_retry_age_s ({for_people(dest.max_retry_age_s)}) is"
        f" shorter than the sum of retry_tiers_s ({for_people(total_s)}); tier"
        f"{'s' * (len(cut) > 1)} {named} can never re-offer an event: it expires by age"
        " before. Raise max_retry_age_s if they should run"
    )
