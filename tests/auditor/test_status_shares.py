"""`/status` of a group member: the shares it owns, who posted each share and when, the stale ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from aiokafka import TopicPartition

from auditor.archive import Archive
from auditor.board import board_dir, post
from auditor.pages import Pages
from tests.auditor.support import audited_destination, group_member
from tests.auditor.test_ledger import T0

TOPIC, AUDIT = "src", "audit"
P0, P1, AUDIT0 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1), TopicPartition(AUDIT, 0)
NOW_MS = T0 + 30_000


async def test_status_names_the_members_shares_and_the_shares_not_posted_lately(
    catalog_dir: Path, tmp_path: Path
) -> None:
    """A member owning P0 beside one that last posted P1 20 s ago: P0 is its own, P1 is the
    other member's and stale; between two assignments the member says it is rebalancing."""
    dest = audited_destination(catalog_dir, "d", "http://d.test/in", TOPIC)
    archive = Archive(tmp_path / "archive")
    accounts = group_member(
        dest, archive, audit_topic=AUDIT, now_ms=NOW_MS, roll_s=1.0, member="auditor@a:1"
    )
    entry = {"member": "auditor@b:2", "written_ms": NOW_MS - 20_000, "progress_ms": 0}
    post(board_dir(archive.root, "g"), P1, {**entry, "dests": {"d": _empty_share()}})
    accounts.assigned({P0, AUDIT0})
    accounts.after_commit({})
    pages = Pages(accounts, lambda: NOW_MS)

    status = await pages.status(cast(Any, None))
    assert (status["member"], status["owned_shares"], status["rebalancing"]) == (
        "auditor@a:1",
        ["src/0"],
        False,
    )
    shares = status["dests"]["d"]["shares"]
    assert (shares["src/0"]["member"], shares["src/0"]["owned"]) == ("auditor@a:1", True)
    assert shares["src/0"]["posted_ms"] == NOW_MS
    assert (shares["src/1"]["member"], shares["src/1"]["owned"]) == ("auditor@b:2", False)
    assert status["dests"]["d"]["stale_shares"] == ["src/1"]

    accounts.drop({P0, AUDIT0})
    assert (await pages.status(cast(Any, None)))["rebalancing"] is True


def _empty_share() -> dict[str, Any]:
    return {"closed_before_ms": None, "first_minute_ms": None, "waiting": 0, "rows": []}
