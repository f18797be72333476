"""The group's snapshot of an auditor before shares (`auditor-GROUP`, format 1), split into shares.

An auditor upgraded to shares finds its accounts in one snapshot for the whole group; a share
without a snapshot of its own starts from its part of it: the bitmaps of its partition (what
entered, what became of it, what still waits), how far it was read, its incarnations, and the
audit topic's offsets the group had read. What a final minute fixed for the destination as a
whole (its counts, lags and judgement) and the minute-wide figures of the others (lags,
duplicates, problems) go to the destination's lead share, the others' counting zero there, so
the sum over the shares is the minute as the old auditor had it; a late outcome still moves
the share of its event. The lead share also starts with what the old auditor had written of
the final minutes, so none is written twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
from aiokafka import TopicPartition

from auditor.shares import Share
from hifi.accounting.incarnations import split
from hifi.errors import HifiError

LEGACY_FORMAT = 1
_ZERO_COUNTS = {
    "entered": 0,
    "accepted": 0,
    "delivered": 0,
    "dead_lettered_by_reason": {},
    "filtered": 0,
    "in_retry": 0,
    "waiting": 0,
    "missing": 0,
}


class LegacySnapshot:
    """A format 1 snapshot, read once, handed out share by share."""

    def __init__(self, state: Mapping[str, Any]) -> None:
        self._state = state

    @classmethod
    def read(cls, data: bytes, root: Path, name: str) -> LegacySnapshot:
        try:
            state = msgspec.msgpack.decode(data)
            if state.get("format") != LEGACY_FORMAT:
                raise ValueError(f"format {state.get('format')!r}, not {LEGACY_FORMAT}")
            if not isinstance(state.get("ledgers"), dict) or "progress" not in state:
                raise ValueError("it is not an auditor's snapshot")
        except (msgspec.DecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise HifiError(
                f"archive {root}: snapshot {name} cannot be read: {exc}; move it away to start"
                " the tables afresh from the committed offsets"
            ) from None
        return cls(state)

    def share_state(
        self,
        tp: TopicPartition,
        share: Share,
        *,
        leads: Mapping[str, TopicPartition | None],
        audit_topic: str,
    ) -> dict[str, Any]:
        """Restore `share` from its part; what else its snapshot would hold (`progress`,
        `incarnations`, `held_facts`)."""
        state = self._state
        mine = (tp.topic, tp.partition)
        for name, ledger in share.ledgers.items():
            raw = state["ledgers"].get(name)
            if raw is not None:
                ledger.restore(_ledger_part(raw, mine, lead=leads.get(name) == tp))
                if leads.get(name) == tp:
                    share.lead[name] = {
                        "before_ms": raw["closed_before_ms"] or None,
                        "first_ms": raw["first_minute_ms"],
                        "down": raw["down_minutes"],
                    }
        share.audit_next = {
            int(p): int(o) for t, p, o, _ in state["progress"] if t == audit_topic and o is not None
        }
        return {
            "progress": [row for row in state["progress"] if (row[0], row[1]) == mine],
            "incarnations": [
                row for row in state.get("incarnations", ()) if (row[0], row[1]) == mine
            ],
            "held_facts": state.get("held_facts", ()),
            "health": state.get("health", {}),
        }


def _ledger_part(raw: Mapping[str, Any], mine: tuple[str, int], *, lead: bool) -> dict[str, Any]:
    def ours(rows: Any) -> list[Any]:
        return [r for r in rows if (split(r[0])[0], int(r[1])) == mine]

    part = dict(raw)
    part["down_minutes"] = raw["down_minutes"] if lead else []
    part["outcomes"] = ours(raw["outcomes"])
    part["entered_from"] = ours(raw.get("entered_from", ()))
    part["buckets"] = [_bucket_part(b, ours, lead=lead) for b in raw["buckets"]]
    return part


def _bucket_part(raw: Mapping[str, Any], ours: Any, *, lead: bool) -> dict[str, Any]:
    part = dict(raw)
    for name in ("entered", "accepted", "waiting", "retrying"):
        part[name] = ours(raw.get(name, ()))
    if lead:
        return part
    zero_hist = bytes(len(raw["lag_in"]))
    part.update(
        problems={},
        lags_ms=[],
        lag_in=zero_hist,
        process=zero_hist,
        duplicates=0,
        on_time=0,
        counts=None if raw["counts"] is None else dict(_ZERO_COUNTS),
        lags=None,
        missing_ids=None,
    )
    return part
