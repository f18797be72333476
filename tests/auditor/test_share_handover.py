"""A share handed from member to member keeps every figure, whatever the handover meets.

- A member names a final minute's missing ids in the roll after the one whose snapshot made the
  minute final, and keeps them in memory until its next snapshot. Killed in between (kill -9),
  the share's next owner reads a snapshot whose minute is final with its ids unnamed: it names
  them itself, or the destination's row never gets them.
- A member waiting for its next assignment while another owns one of its shares (the group
  rebalanced twice: a killed member's restart, then its session's end) gets the share back with
  its commits moved on: it reads the share's snapshot again instead of keeping its own copy.
"""

from __future__ import annotations

from pathlib import Path

from aiokafka import TopicPartition

from auditor.accounts import Accounts
from auditor.archive import Archive
from auditor.board import board_dir
from auditor.lead import read_final_rows
from config.destination import Destination
from hifi.accounting.buckets import MINUTE_MS
from tests.auditor.support import audited_destination, group_member
from tests.auditor.test_ledger import T0
from tests.auditor.test_rebalance_window import _records

TOPIC, AUDIT = "src", "audit"
P0, P1, AUDIT0 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1), TopicPartition(AUDIT, 0)
ALL = {P0, P1, AUDIT0}
NOW_MS = T0 + MINUTE_MS + 5_000  # the minute T0 settles (settle_s 1)
ENDS = {P0: 3, P1: 0, AUDIT0: 0}  # each partition read to its end: its progress is now


def _member(dest: Destination, archive: Archive, name: str) -> Accounts:
    accounts = group_member(
        dest,
        archive,
        audit_topic=AUDIT,
        now_ms=NOW_MS,
        roll_s=0.0,
        member=name,
        highwater=ENDS.get,
    )
    accounts.assigned(ALL)
    accounts.held(ALL)
    return accounts


async def _roll(accounts: Accounts) -> None:
    work = accounts.next_work(poll_open=False)
    assert work is not None
    await work.job
    accounts.after_commit({})


async def test_the_next_owner_names_the_missing_ids_a_killed_member_had_not_saved(
    catalog_dir: Path, tmp_path: Path
) -> None:
    dest = audited_destination(catalog_dir, "d", "http://d.test/in", TOPIC)
    archive = Archive(tmp_path / "archive")
    killed = _member(dest, archive, "killed")
    killed.take(P0, _records(P0, range(3)))  # three events entered, never delivered
    await _roll(killed)  # their entries archived; the minute becomes final after the commit
    bucket = killed.shares[P0].ledgers["d"].buckets[T0]
    assert bucket.final
    assert bucket.missing_ids is None
    await _roll(killed)  # the snapshot of the final minute, then its ids named in memory
    assert bucket.missing_ids == ["0-0", "0-1", "0-2"]
    # killed -9 here: its next snapshot, with the ids, is never written

    successor = _member(dest, Archive(archive.root), "successor")
    await _roll(successor)  # names them again
    await _roll(successor)  # posts the share's change: the lead (this member) takes it in
    assert successor.shares[P0].ledgers["d"].buckets[T0].missing_ids == ["0-0", "0-1", "0-2"]
    final = read_final_rows(board_dir(archive.root, "g"), "d")
    assert final[T0]["missing"] == 3
    assert final[T0]["missing_ids"] == ["0-0", "0-1", "0-2"]


async def test_a_share_another_member_held_meanwhile_is_read_again_from_its_snapshot(
    catalog_dir: Path, tmp_path: Path
) -> None:
    """A member waits for its next assignment while another member owns one of its shares,
    reads records of it, rolls and commits; given the share back, the first member reads its
    snapshot again rather than keep its own older copy (whose offsets the commits passed)."""
    dest = audited_destination(catalog_dir, "d", "http://d.test/in", TOPIC)
    archive = Archive(tmp_path / "archive")
    first = _member(dest, archive, "first")
    first.take(P1, _records(P1, range(3)))
    await _roll(first)
    first.drop(ALL)  # the group rebalances; the first member waits for its next assignment

    other = group_member(dest, Archive(archive.root), audit_topic=AUDIT, now_ms=NOW_MS, roll_s=0.0)
    other.assigned({P1, AUDIT0})
    other.held({P1, AUDIT0})
    other.take(P1, _records(P1, range(3, 6)))
    await _roll(other)  # its snapshot, then its commit: the first member's consumer starts at 6
    other.drop({P1, AUDIT0})

    first.assigned(ALL)
    assert first.shares[P1].ledgers["d"].buckets[T0].entered_count() == 6
