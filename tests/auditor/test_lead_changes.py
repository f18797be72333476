"""The lead's member rewrites a final minute that another member's share changed, whenever it reads the change."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiokafka import TopicPartition

from auditor.lead import serve
from auditor.merged import DestinationView, share_entry
from auditor.shares import Share
from hifi.accounting.buckets import MINUTE_MS
from tests.auditor.support import audited_destination
from tests.auditor.test_share_merge import P0, P1, SETTLED_MS, T0, TOPIC, _member

RETENTION_MS = 30 * MINUTE_MS


def _entries(
    members: list[dict[TopicPartition, Share]], changed: dict[TopicPartition, dict[int, int]]
) -> dict[TopicPartition, dict[str, Any]]:
    """The board as the members posted their shares, each with the changes its member made."""
    return {
        tp: {
            "member": f"m{i}",
            "written_ms": SETTLED_MS,
            "progress_ms": SETTLED_MS,
            "dests": {
                "d": share_entry(
                    share.ledgers["d"],
                    horizon_ms=0,
                    changed=changed.get(tp, {}),
                    now_ms=SETTLED_MS,
                )
            },
        }
        for i, member in enumerate(members)
        for tp, share in member.items()
    }


def test_a_change_posted_after_the_leads_next_look_still_gets_a_new_row(
    catalog_dir: Path, tmp_path: Path
) -> None:
    """P1's member names the missing ids of a final minute at t; the lead looks at t + 0.5 s
    before the board has it, then reads it: the minute gets a new row with the ids, once."""
    dest = audited_destination(catalog_dir, "d", "http://d.test/in", TOPIC)
    lead, other = _member(dest, [P0], tmp_path / "a"), _member(dest, [P1], tmp_path / "b")
    view = DestinationView(dest, [P0, P1])
    state: dict[str, Any] = {}
    written: list[dict[str, Any]] = []

    def look(now_ms: int) -> None:
        serve(view, state, write_row=written.append, now_ms=now_ms, retention_ms=RETENTION_MS)

    view.update(_entries([lead, other], {}))
    look(SETTLED_MS)
    assert [r["minute_ms"] for r in written] == [T0, T0 + MINUTE_MS]  # both final
    assert written[0]["missing"] == 2
    assert written[0]["missing_ids"] == []

    other[P1].ledgers["d"].buckets[T0].missing_ids = ["1-9"]  # named at SETTLED_MS + 1_000
    look(SETTLED_MS + 1_500)  # the lead looks before P1's member posts it
    assert len(written) == 2
    view.update(_entries([lead, other], {P1: {T0: SETTLED_MS + 1_000}}))
    look(SETTLED_MS + 2_500)
    assert [(r["minute_ms"], r["missing_ids"]) for r in written[2:]] == [(T0, ["1-9"])]
    assert written[2]["missing"] == written[0]["missing"]
    look(SETTLED_MS + 3_500)
    assert len(written) == 3  # taken in: not written again
