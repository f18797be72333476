"""What a reconciled minute and a destination's range count as, for the outputs, the page and
the CLI alike: a minute's state (up, down for loss or lag, pending, outside) and the headline
on loss. Below `outputs` and `report`, which both read them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["loss_verdict", "minute_state"]


def loss_verdict(about: Mapping[str, Any]) -> tuple[str, str]:
    """The headline on loss, and its tone (`good`, `warn`, `bad`): never "lossless" while
    minutes of the range are not final."""
    missing, pending = about["totals"]["missing"], about["pending_minutes"]
    if missing:
        return f"{missing:,} events missing", "bad"
    if pending:
        return f"no loss so far, {pending:,} minutes not final", "warn"
    return "lossless", "good"


def minute_state(
    row: Mapping[str, Any] | None,
    minute_ms: int,
    *,
    counted_from_ms: int,
    final_before_ms: int,
    to_ms: int,
) -> str:
    """What a minute of a destination counts as: `up`, `loss` or `lag` (down), `pending` (not
    final), or `outside` (not in the range, or before the archive's first minute of it).
    A minute without a row is up once final (no event, nothing lost), pending before."""
    if not counted_from_ms <= minute_ms < to_ms:
        return "outside"
    if row is None:
        return "up" if minute_ms < final_before_ms else "pending"
    if not row["final"]:
        return "pending"
    if row["up"] is False:
        return str(row["down_reason"] or "loss")
    return "up"
