"""An auditor upgraded from one before shares carries the group's snapshot over, share by share."""

from __future__ import annotations

from pathlib import Path

import msgspec
from aiokafka import TopicPartition

from auditor.accounts import Accounts
from auditor.archive import Archive, write_snapshot
from auditor.progress import ProgressClock
from hifi.accounting.buckets import MINUTE_MS
from hifi.accounting.ledger import Ledger
from hifi.accounting.tables import archive_row
from tests.auditor.support import audited_destination
from tests.auditor.test_share_merge import FIGURES, SETTLED_MS, T0, TOPIC, _entries, _records

P0, P1, AUDIT0 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1), TopicPartition("audit", 0)


async def test_the_group_snapshot_of_before_shares_gives_the_same_minutes(
    catalog_dir: Path, tmp_path: Path
) -> None:
    """One ledger over two partitions, one minute final and one not, saved as the old
    `auditor-GROUP` snapshot: the upgraded auditor's shares start from their parts of it and
    its tables (summed over the shares) are the old ledger's, minute by minute; the audit topic
    is read from where the old auditor had read it."""
    dest = audited_destination(catalog_dir, "d", "http://d.test/in", TOPIC, lag_sla_s=1.0)
    old = Ledger("d", dest.accounting)
    for tp, by_minute in _entries().items():
        for minute, offsets in by_minute.items():
            old.enter(minute, (tp.topic, tp.partition), offsets)
    for fact in _records()[1]:
        old.apply(fact)
    old.advance(T0 + 2 * MINUTE_MS + 500)  # T0 final, T0 + 1 min not yet
    expected = [{k: archive_row(old, b, written_ms=0)[k] for k in FIGURES} for b in old.rows()]
    assert [r["final"] for r in expected] == [True, False]
    state = {
        "format": 1,
        "written_ms": SETTLED_MS,
        "ledgers": {"d": old.snapshot()},
        "health": {},
        "progress": [[TOPIC, 0, 13, T0], [TOPIC, 1, 14, T0], ["audit", 0, 5, T0]],
        "incarnations": [],
        "held_facts": [],
    }
    archive = Archive(tmp_path / "archive")
    write_snapshot(archive.root, "auditor-g", msgspec.msgpack.encode(state))
    accounts = Accounts(
        {"d": dest},
        archive,
        audit_topic="audit",
        clock=ProgressClock(lambda tp: None, lambda: SETTLED_MS),
        roll_s=60.0,
        group_id="g",
        partitions={TOPIC: [0, 1]},
        now_ms=lambda: SETTLED_MS,
    )
    await accounts.restore()
    positions = accounts.assigned({P0, P1, AUDIT0})
    assert positions == {AUDIT0: 5}
    accounts.settling.cycle(
        {P0: T0 + 2 * MINUTE_MS + 500, P1: T0 + 2 * MINUTE_MS + 500}, SETTLED_MS
    )
    view = accounts.settling.views["d"]
    rows = view.rows(from_ms=None, to_ms=None, now_ms=SETTLED_MS)
    assert [{k: r[k] for k in FIGURES} for r in rows] == expected
    # the final minute was written by the old auditor: the lead share does not write it again
    assert accounts.shares[P0].lead["d"]["before_ms"] == old.closed_before_ms
