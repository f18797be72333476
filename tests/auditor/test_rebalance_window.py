"""A member between a revocation and its next assignment takes nothing in, rolls nothing, posts nothing.

aiokafka gives the consumer its new assignment a moment before the member's callback opens the
new shares; a roll then would write the snapshots of shares that already belong to another
member (over the ones it writes from now on), and a poll taken then would go to shares the
member no longer owns, or to none.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
from aiokafka import TopicPartition

from auditor.archive import Archive
from auditor.board import board_dir
from auditor.shares import snapshot_name
from tests.auditor.support import audited_destination, group_member
from tests.auditor.test_ledger import T0

TOPIC, AUDIT = "src", "audit"
P0, P1, AUDIT0 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1), TopicPartition(AUDIT, 0)
NOW_MS = T0 + 30_000


def _records(tp: TopicPartition, offsets: range) -> list[Any]:
    return [
        SimpleNamespace(
            topic=tp.topic,
            partition=tp.partition,
            offset=o,
            key=None,
            value=orjson.dumps({"id": f"{tp.partition}-{o}", "event_time": T0 + o}),
            headers=[],
            timestamp=T0 + o,
        )
        for o in offsets
    ]


async def test_between_two_assignments_the_member_takes_rolls_and_posts_nothing(
    catalog_dir: Path, tmp_path: Path
) -> None:
    """Revoked with entries not rolled yet, the member starts no roll and posts nothing; a
    poll comes back whole (read again); assigned again, it rolls the shares it owns now only."""
    dest = audited_destination(catalog_dir, "d", "http://d.test/in", TOPIC)
    archive = Archive(tmp_path / "archive")
    # a roll is due whenever something waits
    accounts = group_member(dest, archive, audit_topic=AUDIT, now_ms=NOW_MS, roll_s=0.0)
    accounts.assigned({P0, P1, AUDIT0})
    assert accounts.take(P0, _records(P0, range(3))) is None
    assert archive.buffered_rows == 3

    accounts.drop({P0, P1, AUDIT0})  # the revocation
    assert accounts.next_work(poll_open=False) is None
    assert accounts.take(P1, _records(P1, range(5, 8))) == 5  # read again from offset 5
    accounts.after_commit({})
    assert not board_dir(archive.root, "g").exists()

    accounts.assigned({P1, AUDIT0})  # P0 went to another member
    assert not accounts.rebalancing
    work = accounts.next_work(poll_open=False)
    assert work is not None
    await work.job
    state = archive.root / "_state"
    assert (state / f"{snapshot_name('g', P1)}.snapshot").exists()
    assert not (state / f"{snapshot_name('g', P0)}.snapshot").exists()
